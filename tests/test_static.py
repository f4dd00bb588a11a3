"""Stage 1: the static check of a candidate's source (pure ast; no torch, no triton)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pytest_kernelopt.static import check_candidate

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
    ("import os", module("import os"), "import of 'os'"),
    ("import torch", module("import torch"), "import of 'torch'"),
    ("import threading", module("import threading"), "import of 'threading'"),
    ("from triton.runtime", module("from triton.runtime import driver"), "import of 'triton.runtime.driver'"),
    ("driver stream", host("s = triton.runtime.driver.active.get_current_stream()"), "'triton.runtime'"),
    ("do_bench", host("t = triton.testing.do_bench(run)"), "'triton.testing'"),
    ("open", host("open('/etc/passwd')"), "'open'"),
    ("os.environ", edit(IMPORTS, "import os\n" + IMPORTS, HOST, "    env = os.environ\n" + HOST), "import of 'os'"),
    ("__import__", host("m = __import__('os')"), "'__import__'"),
    ("getattr", host("y = getattr(in_ptr0, 'y')"), "'getattr'"),
    ("dunder", host("b = ().__class__.__bases__"), "'__class__'"),
    ("module dict", module("_cache = {}"), "module-level mutable state: '_cache'"),
    ("module list", edit(IMPORTS, IMPORTS + "CACHE = []\n", HOST, "    CACHE.append(xnumel)\n" + HOST),
     "module-level mutable state: 'CACHE'"),
    ("mutable default", edit("*, stream=None)", "*, stream=None, cache={})"), "default value '{}' of 'run'"),
    ("global", host("global XBLOCK"), "'global'"),
    ("add_", host("in_ptr0.add_(1)"), "'in_ptr0.add_()'"),
    ("copy_", host("in_out_ptr0.copy_(in_ptr0)"), "torch compute in host code"),
    ("item", host("n = in_ptr0.item()"), "torch compute in host code"),
    ("setitem", host("in_out_ptr0[0] = 1"), "'in_out_ptr0[0]'"),
    ("monkey-patch", host("tl.load = None"), "assignment to attribute 'tl.load'"),
    ("globaltimer", device("t0 = tl.extra.cuda.globaltimer()"), "timer 'globaltimer'"),
    ("print", host("print('x')"), "'print'"),
    ("lambda", edit("grid = (", "grid = lambda meta: ("), "lambda"),
    # Beyond the brief's list: the ways around the rules above.
    ("timer via asm", device('t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], tl.int64, 0, 1)'),
     "timer register"),
    ("tl.extra.cuda", device("w = tl.extra.cuda.num_warps()"), "'tl.extra.cuda'"),
    ("tl.core.builtins", device("f = tl.core.builtins"), "'tl.core.builtins'"),
    ("tl.core in host", host("v = tl.core._unwrap_if_constexpr(XBLOCK)"), "'tl.core'"),
    ("rebinding a builtin", host("len = in_ptr0.add_"), "'len' rebinds"),
    ("rebinding a module", host("tl = in_ptr0"), "'tl' rebinds"),
    ("calling a local", host("f = in_ptr0.zero_\n    f()"), "call to local value 'f'"),
    ("module as a value", host("m = triton"), "module 'triton'"),
    ("in-place on argument", host("in_ptr0 += 1"), "augmented assignment 'in_ptr0 += 1'"),
    ("in-place through an alias", host("o = in_ptr0\n    o += 1"), "augmented assignment 'o += 1'"),
    ("reading an argument's values", host("if in_ptr0[0, 0] == 0:\n        return"), "reading values of argument 'in_ptr0'"),
    ("reading values through an alias", host("o = in_ptr0\n    v = o[0]"), "reading values of argument 'o'"),
    ("relative import", module("from . import x"), "relative import"),
    ("import in function", host("import math"), "only allowed at module level"),
    ("from triton import jit", module("from triton import jit"), "import of 'triton.jit'"),
    ("other decorator", edit("@triton.jit\ndef maximum", "@staticmethod\ndef maximum"), "decorator 'staticmethod'"),
    ("class", module("class A:\n    pass"), "class definition"),
    ("with", host("with x:\n        pass"), "'with'"),
    ("match", host("match x:\n        case object(__globals__=g):\n            pass"), "'match'"),
    ("yield", host("yield 1"), "'yield'"),
    ("module-level call", module("N = int('4')"), "module-level mutable state: 'N'"),
    ("module-level if", module("if True:\n    N = 1"), "module-level 'if' statement"),
    ("module-level del", module("del triton"), "module-level 'del' statement"),
    ("jit entry point", edit(SIGNATURE, "@triton.jit\n" + SIGNATURE), "must be a plain host function"),
    ("no stream", edit("*, stream=None)", ")"), "'stream' keyword"),
    ("*args", edit(SIGNATURE, "def run(*args, stream=None):"), "must not take *args"),
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


def test_syntax_error_is_the_only_problem():
    found = problems(VALID + "\n)\n")
    assert len(found) == 1 and found[0].startswith(f"line {len(VALID.splitlines()) + 2}: syntax error")


ACCEPTED = [
    ("no entry_args given", VALID, None),
    ("stream positional with default", edit("*, stream=None)", "stream=None)"), ARGS),
    ("**kwargs instead of stream", edit("*, stream=None)", "**kwargs)"), ARGS),
    ("import aliases", edit("import triton.language as tl\n", "from triton import language as tl\n"
                            "import triton.language.extra.libdevice as ld\n"
                            "from triton.language.extra.cuda import libdevice as cuda_ld\nimport math\n"), ARGS),
    ("future import", edit(IMPORTS, "from __future__ import annotations\n" + IMPORTS), ARGS),
    ("module constants", module("_LOG_2_E = tl.constexpr(1.4426950408889634)\nN = 2 ** 10\n"
                                "PAIR = (1, -2.5, 'x', None)\nM = N * 2"), ARGS),
    ("host metadata and math", host("n = max(in_ptr0.numel(), in_ptr0.stride(0), in_ptr0.shape[0], 1)\n"
                                    "    b = triton.next_power_of_2(n) + triton.cdiv(n, 4) + math.ceil(n / 2)\n"
                                    "    ok = in_ptr0.is_contiguous() and in_ptr0.dtype is not None")
     .replace(IMPORTS, IMPORTS + "import math\n", 1), ARGS),
    ("host helper and nested grid fn", edit(SIGNATURE, "def blocks(n):\n    return min(n, 1024)\n\n\n" + SIGNATURE,
                                            HOST, "    def grid_fn(meta):\n"
                                            "        return (triton.cdiv(xnumel, meta['XBLOCK']),)\n"
                                            "    b = blocks(xnumel)\n    g = grid_fn({'XBLOCK': b})\n" + HOST), ARGS),
    ("device code may use tl.core, tl.* and shadow names",
     device("tmp = tl.core._unwrap_if_constexpr(XBLOCK)\n    exp = tl.atomic_add(in_ptr0, 1)\n    maximum = 1"), ARGS),
    ("device param named input", edit("def max2(a, dim):\n    return tl.reduce(a, dim, maximum)",
                                      "def max2(input, dim):\n    return tl.reduce(input, dim, maximum)"), ARGS),
    ("device_print", device("tl.device_print('x', xnumel)"), ARGS),
    ("host guard raising ValueError", host("if xnumel < 0:\n        raise ValueError('bad size')"), ARGS),
    ("autotune", edit("@triton.jit\ndef triton_per",
                      "@triton.autotune(configs=[triton.Config({'XBLOCK': 1}, num_warps=2)], key=['xnumel'])\n"
                      "@triton.jit\ndef triton_per",
                      ", XBLOCK=XBLOCK, num_warps=2, num_stages=1", ""), ARGS),
    ("try in host code", host("try:\n        n = int(xnumel)\n    except ValueError:\n        n = 0"), ARGS),
]


@pytest.mark.parametrize("source, entry_args", [case[1:] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_accepted(source: str, entry_args: list[str] | None):
    assert problems(source, entry_args) == []


def test_checker_imports_neither_torch_nor_triton():
    """It must stay cheap and never run candidate-adjacent code: stdlib imports only."""
    import pytest_kernelopt.static as static

    tree = ast.parse(Path(static.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "ast", "re", "warnings", "dataclasses"}, imported
