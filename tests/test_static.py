"""Stage 1: the static check of a candidate's source (pure ast; no torch, no triton).

The grammar itself, case by case. Attacks are in test_static_attacks.py; every kernel
Inductor generates for the example problems is checked in test_static_inductor.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_kernelopt.verify import static
from pytest_kernelopt.verify.static import check_candidate

# The shape our dumper writes.
VALID = '''"""docstring"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def maximum(a, b):
    mask = a > b
    return tl.where(mask, a, b)


@triton.jit
def max2(a, dim):
    return tl.reduce(a, dim, maximum)


@triton.jit
def triton_per_fused_softmax_0(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 8
    r0_numel = 32
    R0_BLOCK: tl.constexpr = 32
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    tmp0 = tl.load(in_out_ptr0 + (r0_index + 32*xindex), xmask, eviction_policy='evict_first', other=0.0)
    tmp1 = max2(tl.where(xmask, tmp0, float("-inf")), 1)[:, None].to(tl.float32)
    tmp2 = libdevice.exp(tmp0 - tmp1)
    tl.store(in_out_ptr0 + (r0_index + 32*xindex), tmp2, xmask)


def run(in_out_ptr0, in_ptr0, xnumel, r0_numel, *, stream=None):
    """Launch with the configuration Inductor chose."""
    XBLOCK = 1
    grid = (-((xnumel) // -(XBLOCK)), 1, 1)
    triton_per_fused_softmax_0[grid](in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK=XBLOCK, num_warps=2, num_stages=1, enable_fp_fusion=True)
'''
ARGS = ["in_out_ptr0", "in_ptr0", "xnumel", "r0_numel"]

# Anchors in VALID where snippets go.
IMPORTS = "import triton\n"
HOST = "    XBLOCK = 1\n"  # first statement of run's body
DEVICE = "    xnumel = 8\n"  # first statement of the kernel's body
SIGNATURE = "def run(in_out_ptr0, in_ptr0, xnumel, r0_numel, *, stream=None):"


def edit(*pairs: str) -> str:
    """VALID with each (old, new) pair replaced; ``old`` must be there."""
    source = VALID
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert old in source, old
        source = source.replace(old, new, 1)
    return source


def host(line: str) -> str:
    return edit(HOST, f"    {line}\n{HOST}")


def device(line: str) -> str:
    return edit(DEVICE, f"    {line}\n{DEVICE}")


def module(line: str) -> str:
    return edit(IMPORTS, f"{IMPORTS}{line}\n")


def problems(source: str, entry_args: list[str] | None = ARGS) -> list[str]:
    report = check_candidate(source, entry_args)
    assert report.ok == (not report.problems)
    return report.problems


def test_valid_dump_passes():
    report = check_candidate(VALID, ARGS)
    assert report.ok and report.problems == []


REJECTED = [
    ("syntax error", edit("def run(", "def run(("), "syntax error"),
    ("missing run", edit("def run(", "def launch("), "no module-level function 'run'"),
    ("parameter order", edit(SIGNATURE, "def run(in_ptr0, in_out_ptr0, xnumel, r0_numel, *, stream=None):"),
     "expected (in_out_ptr0, in_ptr0, xnumel, r0_numel) in that order"),
    ("parameter name", edit(SIGNATURE, SIGNATURE.replace("r0_numel", "rnumel")),
     "are (in_out_ptr0, in_ptr0, xnumel, rnumel)"),
    ("import os", module("import os"), "'import os' is not allowed"),
    ("import torch", module("import torch"), "'import torch' is not allowed"),
    ("import threading", module("import threading"), "'import threading' is not allowed"),
    ("from triton.runtime", module("from triton.runtime import driver"), "'from triton.runtime import driver'"),
    ("another alias", module("import triton.language as lang"), "'import triton.language as lang' is not allowed"),
    ("driver stream", host("s = triton.runtime.driver.active.get_current_stream()"), "'triton.runtime.driver"),
    ("do_bench", host("t = triton.testing.do_bench(run)"), "'triton.testing.do_bench' is not allowed"),
    ("open", host("open('/etc/passwd')"), "unknown name 'open'"),
    ("__import__", host("m = __import__('os')"), "'__import__' is not allowed (dunder)"),
    ("getattr", host("y = getattr(in_ptr0, 'y')"), "unknown name 'getattr'"),
    ("dunder", host("b = ().__class__.__bases__"), "'().__class__.__bases__' is not allowed in host code"),
    ("module dict", module("_cache = {}"), "module-level mutable or computed state: _cache = {}"),
    ("module list", edit(IMPORTS, IMPORTS + "CACHE = []\n", HOST, "    CACHE.append(xnumel)\n" + HOST),
     "module-level mutable or computed state: CACHE = []"),
    ("mutable default", edit("*, stream=None)", "*, stream=None, cache={})"), "default value '{}' of 'run'"),
    ("global", host("global XBLOCK"), "'global' (hidden state) statement is not allowed"),
    ("add_", host("in_ptr0.add_(1)"), "attribute access 'in_ptr0.add_' is not allowed in host code"),
    ("copy_", host("in_out_ptr0.copy_(in_ptr0)"), "attribute access 'in_out_ptr0.copy_'"),
    ("item", host("n = in_ptr0.item()"), "attribute access 'in_ptr0.item'"),
    ("setitem", host("in_out_ptr0[0] = 1"), "assignment to item 'in_out_ptr0[0]'"),
    ("monkey-patch", host("tl.load = None"), "assignment to attribute 'tl.load'"),
    ("globaltimer", device("t0 = tl.extra.cuda.globaltimer()"), "'tl.extra.cuda.globaltimer' is not allowed (tl.extra"),
    ("print", host("print('x')"), "unknown name 'print'"),
    ("lambda", edit("grid = (", "grid = lambda meta: ("), "lambda is not allowed"),
    ("inline asm", device('t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], tl.int64, 0, 1)'),
     "'tl.inline_asm_elementwise' is not allowed (arbitrary PTX"),
    ("tl.extra.cuda", device("w = tl.extra.cuda.num_warps()"), "'tl.extra.cuda.num_warps' is not allowed"),
    ("tl.core.builtins", device("f = tl.core.builtins"), "'tl.core.builtins' is not allowed"),
    ("other tl.core names", device("f = tl.core.get_int_dtype"), "'tl.core.get_int_dtype' is not allowed"),
    ("tl.core in host", host("v = tl.core._unwrap_if_constexpr(XBLOCK)"), "'tl.core._unwrap_if_constexpr' is not allowed"),
    ("tl function in host", host("v = tl.load(in_ptr0)"), "'tl.load' is not allowed (device code only)"),
    ("tl function as a value", device("f = tl.load"), "'tl.load' is not allowed (only called, in device code)"),
    ("unlisted tl name", device("f = tl.str_to_ty('fp32')"), "'tl.str_to_ty' is not allowed"),
    ("unlisted tensor attribute", device("h = xmask.handle"), "attribute '.handle' is not allowed in device code"),
    ("rebinding a builtin", host("len = 3"), "'len' rebinds an allowed builtin"),
    ("rebinding a module", host("tl = 3"), "'tl' rebinds an imported module"),
    ("rebinding a module in device code", device("tl = 3"), "'tl' rebinds an imported module"),
    ("rebinding a kernel in host code", host("max2 = 3"), "'max2' rebinds a module-level function"),
    ("calling a local", host("f = len\n    f(in_ptr0)"), "builtin 'len' may only be called"),
    ("calling a device local", device("f = maximum\n    f(xnumel, 1)"), "call of local value 'f'"),
    ("module as a value", host("m = triton"), "module 'triton' may only be used as 'triton.<name>'"),
    ("in-place on argument", host("in_ptr0 += 1"), "host code may not assign to parameter 'in_ptr0'"),
    ("aliasing an argument", host("o = in_ptr0"), "tensor argument 'in_ptr0' may only be passed to a kernel launch"),
    ("reading an argument's values", host("if in_ptr0[0, 0] == 0:\n        return"), "tensor argument 'in_ptr0'"),
    ("relative import", module("from . import x"), "'from . import x' is not allowed"),
    ("import in function", host("import math"), "import statement is not allowed in host code"),
    ("from triton import jit", module("from triton import jit"), "'from triton import jit' is not allowed"),
    ("other decorator", edit("@triton.jit\ndef maximum", "@staticmethod\ndef maximum"), "decorator 'staticmethod'"),
    ("autotune", edit("@triton.jit\ndef triton_per",
                      "@triton.autotune(configs=[triton.Config({'XBLOCK': 1}, num_warps=2)], key=['xnumel'])\n"
                      "@triton.jit\ndef triton_per"), "decorator 'triton.autotune(configs="),
    ("class", module("class A:\n    pass"), "module level: class statement"),
    ("with", host("with x:\n        pass"), "'with' statement is not allowed"),
    ("try in host code", host("try:\n        n = int(xnumel)\n    except ValueError:\n        n = 0"),
     "'try' statement is not allowed in host code"),
    ("match", host("match x:\n        case object(__globals__=g):\n            pass"), "'match' statement"),
    ("yield", host("yield 1"), "'yield 1' is not allowed (only calls; 'yield'"),
    ("module-level call", module("N = int('4')"), "module-level mutable or computed state: N = int('4')"),
    ("module-level if", module("if True:\n    N = 1"), "module level: 'if' statement"),
    ("module-level del", module("del triton"), "module level: 'del' statement"),
    ("jit entry point", edit(SIGNATURE, "@triton.jit\n" + SIGNATURE), "must be a plain host function"),
    ("no stream", edit("*, stream=None)", ")"), "must take the stream as its last parameter"),
    ("**kwargs instead of stream", edit("*, stream=None)", "**kwargs)"), "'run' must not take **kwargs"),
    ("*args", edit(SIGNATURE, "def run(*args, stream=None):"), "must not take *args"),
    ("using the stream", host("s = stream"), "the 'stream' parameter may not be used"),
    ("nested grid function", host("def grid_fn(meta):\n        return (1,)"), "nested function statement"),
    ("grid callable", edit("[grid](", "[run]("), "host function 'run' may only be called"),
    ("launch option outside the list", edit("enable_fp_fusion=True", "extern_libs={'libdevice': '/tmp/x.bc'}"),
     "launch keyword 'extern_libs' is neither a parameter"),
    ("tensor as constexpr", edit("XBLOCK=XBLOCK,", "XBLOCK=in_ptr0,"), "may not be passed as constexpr 'XBLOCK'"),
    ("launch from device code", device("triton_per_fused_softmax_0[(1,)](in_out_ptr0)"), "only kernel[grid](...) launches"),
    ("calling a kernel directly", host("triton_per_fused_softmax_0(in_out_ptr0)"), "kernel 'triton_per_fused_softmax_0' may only be launched"),
    ("device calls host", device("run(xnumel)"), "device code may not use host function 'run'"),
    ("for over a tensor", device("for v in xmask:\n        pass"), "'for' must iterate over range(...)"),
    ("f-string", host("s = f'{xnumel}'"), "f-string is not allowed"),
    ("list in host code", host("g = [1]"), "list is not allowed in host code (use a tuple)"),
    ("non-ASCII identifier", host("\u0435 = 1"), "identifier '\u0435' is not ASCII"),
    ("launching a compile-time helper", edit("@triton.jit\ndef maximum", "@triton.constexpr_function\ndef log2_(i):\n    n = i\n    k = 0\n    while n > 1:\n        n >>= 1\n        k += 1\n    return k\n\n\n@triton.jit\ndef maximum",
                                             HOST, "    log2_[(1,)](xnumel)\n" + HOST), "only kernel[grid](...) launches"),
    ("compile-time helper with host powers", edit("@triton.jit\ndef maximum",
                                                  "@triton.constexpr_function\ndef f(i):\n    return open(i)\n\n\n"
                                                  "@triton.jit\ndef maximum"), "unknown name 'open'"),
    ("compile-time helper with arguments", edit("@triton.jit\ndef maximum",
                                                "@triton.constexpr_function(x=1)\ndef f(i):\n    return i\n\n\n"
                                                "@triton.jit\ndef maximum"), "decorator 'triton.constexpr_function(x=1)'"),
    ("compile-time and jit at once", edit("@triton.jit\ndef maximum", "@triton.constexpr_function\n@triton.jit\ndef maximum"),
     "more than one decorator"),
    ("compile-time decorator as a value", host("f = triton.constexpr_function"),
     "only as the decorator @triton.constexpr_function"),
]


@pytest.mark.parametrize("source, expected", [case[1:] for case in REJECTED], ids=[case[0] for case in REJECTED])
def test_rejected(source: str, expected: str):
    found = problems(source)
    assert found, "expected a problem"
    assert any(expected in p for p in found), found


def test_problems_name_their_line_and_are_all_collected():
    source = edit(IMPORTS, "import os\n" + IMPORTS, HOST, "    in_ptr0.add_(1)\n    print(1)\n" + HOST)
    found = problems(source)
    assert all(re.match(r"line \d+: ", p) for p in found), found
    lines = source.splitlines()
    for needle in ("import os", "in_ptr0.add_(1)", "print(1)"):
        line = next(i for i, text in enumerate(lines, 1) if needle in text)
        assert any(p.startswith(f"line {line}: ") for p in found), (needle, found)


def test_a_byte_order_mark_is_named():
    assert problems("\ufeff" + VALID) == ["line 1: the file starts with a UTF-8 byte-order mark (U+FEFF): save it without one"]


def test_syntax_error_is_the_only_problem():
    found = problems(VALID + "\n)\n")
    assert len(found) == 1 and found[0].startswith(f"line {len(VALID.splitlines()) + 2}: syntax error")


ACCEPTED = [
    ("no entry_args given", VALID, None),
    ("stream positional with default", edit("*, stream=None)", "stream=None)"), ARGS),
    ("other import spellings", edit("import triton.language as tl\n", "from triton import language as tl\n"
                                    "from triton.language.extra.cuda import libdevice\nimport math\nimport triton.language\n"),
     ARGS),
    ("future import", edit(IMPORTS, "from __future__ import annotations\n" + IMPORTS), ARGS),
    ("module constants", module("_LOG_2_E = tl.constexpr(1.4426950408889634)\nN = 2 ** 10\n"
                                "PAIR = (1, -2.5, 'x', None)\nM = N * 2\nDT: tl.constexpr = tl.float16"), ARGS),
    ("host metadata and math", host("n = max(in_ptr0.numel(), in_ptr0.stride(0), in_ptr0.shape[0], 1)\n"
                                    "    b = triton.next_power_of_2(n) + triton.cdiv(n, 4) + math.ceil(n / 2)\n"
                                    "    ok = in_ptr0.is_contiguous() and in_ptr0.dtype == in_out_ptr0.dtype\n"
                                    "    square = in_ptr0.ndim == 2")
     .replace(IMPORTS, IMPORTS + "import math\n", 1), ARGS),
    ("host helper", edit(SIGNATURE, "def blocks(n, cap=1024):\n    return min(n, cap)\n\n\n" + SIGNATURE,
                         HOST, "    b = blocks(xnumel)\n    for i in range(2):\n        b += i\n" + HOST), ARGS),
    ("host branches and loops on sizes", host("if xnumel > 1024:\n        XBLOCK = 8\n    else:\n        XBLOCK = 1\n"
                                              "    while XBLOCK * 4 < xnumel:\n        XBLOCK *= 2\n"
                                              "    assert r0_numel <= 32, 'too long'"), ARGS),
    ("device code may use tl.core helpers and shadow function names",
     device("tmp = tl.core._unwrap_if_constexpr(XBLOCK)\n    exp = tl.atomic_add(in_ptr0, 1)\n    maximum = 1\n"
            "    idt = tl.core.get_int_dtype(bitwidth=32, signed=True)"), ARGS),
    ("device param named input", edit("def max2(a, dim):\n    return tl.reduce(a, dim, maximum)",
                                      "def max2(input, dim):\n    return tl.reduce(input, dim, maximum)"), ARGS),
    ("device function parameter called (a combine function)",
     edit("def max2(a, dim):\n    return tl.reduce(a, dim, maximum)",
          "def max2(a, dim, combine_fn):\n    return combine_fn(a, dim)"), ARGS),
    ("device_print", device("tl.device_print('x', xnumel)"), ARGS),
    ("device loops, asserts, isinstance, nan-propagating max",
     device("for i in tl.static_range(2):\n        xnumel = xnumel + i\n"
            "    while xnumel > 100:\n        xnumel = xnumel // 2\n"
            "    assert isinstance(XBLOCK, (int, tl.constexpr))\n"
            "    m = tl.maximum(xnumel, 1, tl.PropagateNan.ALL)"), ARGS),
    ("annotations", edit("def maximum(a, b):", "def maximum(a: tl.tensor, b: 'tl.tensor', c: int = 0, "
                                                "d: tl.dtype = tl.float32, e: tl.constexpr = tl.constexpr(False)):"),
     ARGS),
    ("host guard raising ValueError", host("if xnumel < 0:\n        raise ValueError('bad size')"), ARGS),
    ("a compile-time helper called from device code (Triton's _log2, which Inductor's sort uses)",
     edit("@triton.jit\ndef maximum", "@triton.constexpr_function\ndef log2_(i):\n    n = i\n    k = 0\n    while n > 1:\n        n >>= 1\n        k += 1\n    return k\n\n\n@triton.jit\ndef maximum", DEVICE, "    k: tl.constexpr = log2_(XBLOCK)\n" + DEVICE),
     ARGS),
]


@pytest.mark.parametrize("source, entry_args", [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_accepted(source: str, entry_args: list[str] | None):
    assert problems(source, entry_args) == []


def test_checker_imports_neither_torch_nor_triton():
    """It must stay cheap and never run candidate-adjacent code: stdlib imports only."""
    files = sorted(Path(static.__file__).parent.glob("*.py"))  # the package: every module of the stage
    assert len(files) > 1
    for path in files:
        tree = ast.parse(path.read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        # Relative imports stay inside the package (the files checked here).
        imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module and not n.level}
        assert not any(isinstance(n, ast.ImportFrom) and n.level > 1 for n in ast.walk(tree)), path.name
        assert imported <= {"__future__", "ast", "dataclasses", "io", "re", "tokenize", "typing", "unicodedata",
                            "warnings"}, (path.name, imported)
