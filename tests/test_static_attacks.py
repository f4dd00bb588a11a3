"""Stage 1 against hostile candidates: every way out we know of must be rejected, on its line.

Each case puts a few lines into a valid candidate (module level, device code or host
code); the line marked ``# attack`` is the one the checker must name. The first group
are attacks that got through the earlier blocklist checker.
"""

from __future__ import annotations

import pytest

from pytest_kernelopt.verify.static import check_candidate

BASE = '''"""A valid candidate: an elementwise kernel and its launch."""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice
#MODULE


@triton.jit
def combine(a, b):
    return a + b


@triton.jit
def kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr0 + xindex, xmask)
    #DEVICE
    tl.store(out_ptr0 + xindex, libdevice.exp(x), xmask)


def run(in_ptr0, out_ptr0, xnumel, *, stream=None):
    XBLOCK = 128
    #HOST
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    kernel[grid](in_ptr0, out_ptr0, xnumel, XBLOCK=XBLOCK, num_warps=4)
'''
ARGS = ["in_ptr0", "out_ptr0", "xnumel"]


def place(where: str, code: str) -> str:
    """BASE with ``code`` at ``#MODULE``, ``#DEVICE`` or ``#HOST`` (indented to fit)."""
    indent = "" if where == "MODULE" else "    "
    lines = code.strip("\n").splitlines()
    return BASE.replace(f"{indent}#{where}", "\n".join(indent + line for line in lines))


def test_base_is_valid():
    for where in ("MODULE", "DEVICE", "HOST"):
        report = check_candidate(place(where, ""), ARGS)
        assert report.ok, report.problems


# (id, where, code, substring of the reason given on the "# attack" line)
ATTACKS = [
    # --- attacks that passed the blocklist checker --------------------------------------
    ("module alias chain to builtins", "DEVICE",
     "c = tl.core  # attack\nb = c.builtins\no = c.knobs.os\no.system('touch /tmp/pwned')", "'tl.core' is not allowed"),
    ("alias chain: the later lines fail too", "DEVICE",
     "c = x\no = c.knobs.os  # attack", "attribute '.knobs' is not allowed"),
    ("list root", "DEVICE", "b = [tl.core][0].builtins  # attack", "'tl.core' is not allowed"),
    ("call root", "DEVICE", "o = tl.core._unwrap_if_constexpr(tl.core).knobs.os  # attack",
     "attribute access on the result of 'tl.core._unwrap_if_constexpr(...)'"),
    ("heuristics decorator running print", "MODULE",
     "@triton.heuristics(values={'XBLOCK': print})  # attack\n@triton.jit\ndef k2(x):\n    return x",
     "decorator 'triton.heuristics"),
    ("host reads the environment through tl.math", "HOST",
     "env = tl.math.core.knobs.os.environ  # attack", "'tl.math.core.knobs.os.environ' is not allowed"),
    ("host state hung on tl.dtype", "HOST", "tl.dtype.SINT_TYPES.append(xnumel)  # attack",
     "'tl.dtype.SINT_TYPES.append' is not allowed"),
    ("device code calls print", "DEVICE", "print(x)  # attack", "unknown name 'print'"),
    ("device code opens a file", "DEVICE", "open('/tmp/x', 'w')  # attack", "unknown name 'open'"),
    ("device code calls a host helper", "MODULE",
     "def helper(n):\n    return n\n\n\n@triton.jit\ndef k2(x):\n    return helper(x)  # attack",
     "device code may not use host function 'helper'"),
    # --- modules as values --------------------------------------------------------------
    ("module alias at module level", "MODULE", "x = tl  # attack", "module-level mutable or computed state"),
    ("module alias in host code", "HOST", "t = triton  # attack", "module 'triton' may only be used as"),
    ("module alias in device code", "DEVICE", "m = tl_math  # attack", "module 'tl_math' may only be used as"),
    ("submodule as a value", "DEVICE", "m = tl.math  # attack", "module 'tl.math' may only be used"),
    ("module in a tuple", "HOST", "t = (tl, 1)  # attack", "module 'tl' may only be used"),
    ("module passed to a call", "DEVICE", "y = combine(tl, x)  # attack", "module 'tl' may only be used"),
    ("module inside tl.constexpr", "MODULE", "K = tl.constexpr(tl)  # attack", "module-level mutable or computed"),
    ("dict root", "HOST", "c = {'a': tl}['a'].core  # attack", "dict is not allowed"),
    ("tuple root", "HOST", "c = (tl,)[0].core  # attack", "attribute access '(tl,)[0].core' is not allowed"),
    ("lambda root", "HOST", "c = (lambda: tl)().core  # attack", "call of 'lambda: tl' is not allowed"),
    ("conditional expression root", "DEVICE", "c = (tl if x else tl).core  # attack", "module 'tl' may only be used"),
    # --- dunder and reflection ------------------------------------------------------------
    ("dunder attribute in device code", "DEVICE", "g = combine.__globals__  # attack", "'__globals__' is not allowed"),
    ("dunder on a literal", "HOST", "k = ().__class__.__base__.__subclasses__()  # attack", "is not allowed in host code"),
    ("dunder module member", "HOST", "b = triton.__builtins__  # attack", "'triton.__builtins__' is not allowed (dunder)"),
    ("__builtins__", "HOST", "b = __builtins__  # attack", "name '__builtins__' is not allowed (dunder)"),
    ("__import__", "DEVICE", "os = __import__('os')  # attack", "name '__import__' is not allowed (dunder)"),
    ("dunder keyword", "DEVICE", "y = tl.load(in_ptr0, __x=1)  # attack", "keyword '__x' is not allowed (dunder)"),
    ("dunder parameter", "MODULE", "@triton.jit\ndef k2(__x):  # attack\n    return 1", "name '__x' is not allowed"),
    ("dunder function name", "MODULE", "def __getattr__(name):  # attack\n    return 1", "'__getattr__' is not allowed"),
    ("getattr", "HOST", "f = getattr(triton, 'runtime')  # attack", "unknown name 'getattr'"),
    ("eval", "HOST", "eval('1')  # attack", "unknown name 'eval'"),
    ("exec", "DEVICE", "exec('import os')  # attack", "unknown name 'exec'"),
    ("compile", "HOST", "c = compile('1', 'f', 'eval')  # attack", "unknown name 'compile'"),
    ("globals", "HOST", "g = globals()  # attack", "unknown name 'globals'"),
    ("vars", "DEVICE", "v = vars(x)  # attack", "unknown name 'vars'"),
    ("type", "HOST", "t = type(xnumel)  # attack", "unknown name 'type'"),
    ("breakpoint", "HOST", "breakpoint()  # attack", "unknown name 'breakpoint'"),
    ("str.format reaches attributes", "HOST", "s = '{0.__class__}'.format(xnumel)  # attack",
     "attribute access ''{0.__class__}'.format' is not allowed"),
    ("f-string format spec", "HOST", "s = f'{xnumel:{XBLOCK}}'  # attack", "f-string is not allowed"),
    ("f-string in device code", "DEVICE", "tl.device_print(f'{x!r}')  # attack", "f-string is not allowed"),
    # --- decorators, defaults, module level ----------------------------------------------
    ("decorator with a side effect", "MODULE", "@print  # attack\ndef h(n):\n    return n", "decorator 'print'"),
    ("decorator lambda", "MODULE", "@(lambda f: f)  # attack\ndef h(n):\n    return n", "decorator 'lambda f: f' is not allowed"),
    ("jit with options", "MODULE", "@triton.jit(debug=True)  # attack\ndef k2(x):\n    return x",
     "decorator 'triton.jit(debug=True)' is not allowed"),
    ("autotune", "MODULE",
     "@triton.autotune(configs=[triton.Config({'XBLOCK': 64})], key=['xnumel'])  # attack\n@triton.jit\n"
     "def k2(x, XBLOCK: tl.constexpr):\n    return x", "autotuning is not allowed"),
    ("mutable default in host helper", "MODULE", "def h(n, seen=[]):  # attack\n    return n",
     "default value '[]' of 'h' must be a constant"),
    ("mutable default in device code", "MODULE", "@triton.jit\ndef k2(x, acc={}):  # attack\n    return x",
     "default value '{}' of 'k2'"),
    ("computed default", "MODULE", "def h(n, m=len('ab')):  # attack\n    return n", "default value 'len('ab')'"),
    ("module-level call", "MODULE", "print('imported')  # attack", "module level: expression statement"),
    ("module-level computed constant", "MODULE", "N = len('abc')  # attack", "module-level mutable or computed state"),
    ("module-level attribute assignment", "MODULE", "triton.knobs.cache_dir = '/tmp'  # attack",
     "must assign one plain name"),
    ("module-level for", "MODULE", "for i in range(3):  # attack\n    pass", "module level: 'for' statement"),
    ("module-level try", "MODULE", "try:  # attack\n    pass\nexcept Exception:\n    pass", "module level: 'try'"),
    ("main guard", "MODULE", "if __name__ == '__main__':  # attack\n    pass", "module level: 'if' statement"),
    ("module-level set", "MODULE", "S = {1, 2}  # attack", "module-level mutable or computed state"),
    ("module-level walrus", "MODULE", "(N := 3)  # attack", "module level: expression statement"),
    ("builtin shadowed at module level", "MODULE", "def range(n):  # attack\n    return n", "'range' rebinds an allowed builtin"),
    ("constant shadows builtin", "MODULE", "len = 3  # attack", "'len' rebinds an allowed builtin"),
    # --- Triton internals and timers ---------------------------------------------------
    ("tl.core.builtins", "DEVICE", "b = tl.core.builtins  # attack", "'tl.core.builtins' is not allowed"),
    ("triton.language.core spelled out", "DEVICE", "b = triton.language.core.builtins  # attack",
     "'triton.language.core.builtins' is not allowed"),
    ("_unwrap_if_constexpr on a module", "DEVICE", "m = tl.core._unwrap_if_constexpr(tl)  # attack",
     "takes exactly one local name"),
    ("get_int_dtype smuggling", "DEVICE", "d = tl.core.get_int_dtype(8, True, tl.core)  # attack",
     "tl.core.get_int_dtype takes (bitwidth, signed) only"),
    ("other tl.core function", "DEVICE", "d = tl.core._aggregate(x)  # attack", "'tl.core._aggregate' is not allowed"),
    ("tl.core helper in host code", "HOST", "d = tl.core.get_int_dtype(8, True)  # attack", "'tl.core.get_int_dtype' is not allowed"),
    ("triton.runtime", "HOST", "d = triton.runtime.driver.active  # attack", "'triton.runtime.driver.active' is not allowed"),
    ("triton.knobs", "HOST", "k = triton.knobs.runtime.interpret  # attack", "'triton.knobs.runtime.interpret' is not allowed"),
    ("triton.compiler", "HOST", "c = triton.compiler.compile  # attack", "'triton.compiler.compile' is not allowed"),
    ("triton.testing timer", "HOST", "t = triton.testing.do_bench  # attack", "'triton.testing.do_bench' is not allowed"),
    ("triton.Config", "HOST", "c = triton.Config({})  # attack", "'triton.Config' is not allowed"),
    ("tl.extra.cuda timer", "DEVICE", "t = tl.extra.cuda.globaltimer()  # attack", "'tl.extra.cuda.globaltimer' is not allowed"),
    ("clock via tl.extra", "DEVICE", "t = tl.extra.cuda.clock64()  # attack", "'tl.extra.cuda.clock64' is not allowed"),
    ("inline asm timer", "DEVICE",
     "t = tl.inline_asm_elementwise('mov.u64 $0, %globaltimer;', '=l', [], dtype=tl.int64, is_pure=False, pack=1)  # attack",
     "'tl.inline_asm_elementwise' is not allowed"),
    ("libdevice internals", "DEVICE", "b = libdevice.core.builtins  # attack", "'libdevice.core.builtins' is not allowed"),
    ("tl_math internals", "DEVICE", "b = tl_math.core  # attack", "'tl_math.core' is not allowed"),
    ("module internals", "DEVICE", "b = tl_math.__loader__  # attack", "'tl_math.__loader__' is not allowed (dunder)"),
    ("tl.tensor internals", "DEVICE", "i = tl.tensor.__init__  # attack", "'tl.tensor.__init__' is not allowed (dunder)"),
    ("dtype class state", "DEVICE", "k = tl.float32.codegen_name()  # attack", "'tl.float32.codegen_name' is not allowed"),
    ("tensor handle", "DEVICE", "h = x.handle  # attack", "attribute '.handle' is not allowed"),
    ("tensor item", "DEVICE", "h = x.item()  # attack", "attribute '.item' is not allowed"),
    ("constexpr value", "DEVICE", "v = XBLOCK.value  # attack", "attribute '.value' is not allowed"),
    ("method of a kernel object", "DEVICE", "f = combine.fn  # attack", "attribute '.fn' is not allowed"),
    ("kernel object in host code", "HOST", "c = kernel.cache  # attack", "attribute access 'kernel.cache' is not allowed"),
    ("launch option loading a library", "HOST",
     "kernel[(1,)](in_ptr0, out_ptr0, xnumel, XBLOCK=1, extern_libs={'libdevice': '/tmp/evil.bc'})  # attack",
     "launch keyword 'extern_libs' is neither"),
    ("launch option overriding the IR", "HOST",
     "kernel[(1,)](in_ptr0, out_ptr0, xnumel, XBLOCK=1, ir_override='/tmp/evil.ttgir')  # attack",
     "launch keyword 'ir_override' is neither"),
    ("tensor into a constexpr", "HOST", "kernel[(1,)](in_ptr0, out_ptr0, xnumel, in_ptr0)  # attack",
     "tensor argument 'in_ptr0' may not be passed as constexpr 'XBLOCK'"),
    ("holding the compiled kernel", "HOST", "k = kernel[(1,)](in_ptr0, out_ptr0, xnumel, XBLOCK=1)  # attack",
     "the result of the launch 'kernel[1,](...)' may not be used"),
    ("launch with unpacking", "HOST", "a = (1,)\nkernel[(1,)](*a)  # attack", "'*' unpacking in a call"),
    ("launch with ** unpacking", "HOST", "kernel[(1,)](in_ptr0, out_ptr0, xnumel, **XBLOCK)  # attack",
     "'**' unpacking in a call"),
    ("the stream", "HOST", "s = stream  # attack", "the 'stream' parameter may not be used"),
    # --- host code doing the work in torch, or looking at the data ------------------------
    ("add_", "HOST", "in_ptr0.add_(1)  # attack", "attribute access 'in_ptr0.add_' is not allowed"),
    ("copy_", "HOST", "out_ptr0.copy_(in_ptr0)  # attack", "attribute access 'out_ptr0.copy_' is not allowed"),
    ("item", "HOST", "v = in_ptr0.item()  # attack", "attribute access 'in_ptr0.item' is not allowed"),
    ("cpu", "HOST", "v = in_ptr0.cpu()  # attack", "attribute access 'in_ptr0.cpu' is not allowed"),
    ("tolist", "HOST", "v = in_ptr0.tolist()  # attack", "attribute access 'in_ptr0.tolist' is not allowed"),
    ("metadata chained", "HOST", "v = in_ptr0.dtype.is_floating_point  # attack",
     "attribute access 'in_ptr0.dtype.is_floating_point' is not allowed"),
    ("metadata method not called", "HOST", "s = in_ptr0.stride  # attack", "'in_ptr0.stride' must be called"),
    ("tensor arithmetic", "HOST", "y = in_ptr0 * 2  # attack", "tensor argument 'in_ptr0' may only be passed"),
    ("tensor truth value", "HOST", "if out_ptr0:  # attack\n    pass", "tensor argument 'out_ptr0'"),
    ("tensor comparison", "HOST", "z = in_ptr0 is None  # attack", "tensor argument 'in_ptr0'"),
    ("tensor values through max", "HOST", "m = max(in_ptr0)  # attack", "tensor argument 'in_ptr0'"),
    ("tensor values through int", "HOST", "m = int(out_ptr0)  # attack", "tensor argument 'out_ptr0'"),
    ("tensor values through a subscript", "HOST", "m = out_ptr0[0]  # attack", "tensor argument 'out_ptr0'"),
    ("tensor grid", "HOST", "kernel[in_ptr0](in_ptr0, out_ptr0, xnumel, XBLOCK=1)  # attack", "tensor argument 'in_ptr0'"),
    ("tensor in an assert", "HOST", "assert in_ptr0  # attack", "tensor argument 'in_ptr0'"),
    ("tensor in an exception", "HOST", "raise ValueError(in_ptr0)  # attack", "tensor argument 'in_ptr0'"),
    ("for over a tensor", "HOST", "for v in in_ptr0:  # attack\n    pass", "'for' must iterate over range(...)"),
    ("item assignment", "HOST", "out_ptr0[0] = 1.0  # attack", "assignment to item 'out_ptr0[0]'"),
    ("item assignment in device code", "DEVICE", "x[0] = 1.0  # attack", "assignment to item 'x[0]'"),
    ("attribute assignment on a kernel", "HOST", "kernel.fn = None  # attack", "assignment to attribute 'kernel.fn'"),
    ("monkey-patching tl", "DEVICE", "tl.load = tl.store  # attack", "assignment to attribute 'tl.load'"),
    ("augmented assignment to a tensor", "HOST", "out_ptr0 += 1  # attack", "host code may not assign to parameter"),
    ("calling a kernel without a grid", "HOST", "kernel(in_ptr0, out_ptr0, xnumel, 1)  # attack", "kernel 'kernel' may only be launched"),
    ("launching from device code", "DEVICE", "kernel[(1,)](in_ptr0, out_ptr0, xnumel, 1)  # attack", "only kernel[grid](...) launches"),
    ("calling the entry point", "HOST", "run(in_ptr0, out_ptr0, xnumel)  # attack", "the entry point 'run' may not be called"),
    # --- statements outside the language -------------------------------------------------
    ("walrus into a trusted name", "DEVICE", "y = (tl := x)  # attack", "':=' (assignment expression) is not allowed"),
    ("walrus in host code", "HOST", "n = (XBLOCK := 1)  # attack", "':=' (assignment expression) is not allowed"),
    ("del a module", "HOST", "del tl  # attack", "'del' statement is not allowed"),
    ("del a local", "DEVICE", "del x  # attack", "'del' statement is not allowed"),
    ("rebinding tl", "HOST", "tl = None  # attack", "'tl' rebinds an imported module"),
    ("rebinding libdevice in device code", "DEVICE", "libdevice = x  # attack", "'libdevice' rebinds an imported module"),
    ("rebinding a builtin", "HOST", "max = min  # attack", "'max' rebinds an allowed builtin"),
    ("rebinding a kernel", "HOST", "kernel = None  # attack", "'kernel' rebinds a module-level function"),
    ("loop variable rebinding a builtin", "HOST", "for len in range(2):  # attack\n    pass", "'len' rebinds"),
    ("tuple target rebinding a module", "DEVICE", "a, triton = x, x  # attack", "'triton' rebinds an imported module"),
    ("parameter named like a module", "MODULE", "@triton.jit\ndef k2(tl):  # attack\n    return 1", "'tl' rebinds"),
    ("global", "DEVICE", "global XBLOCK  # attack", "'global' (hidden state)"),
    ("nonlocal", "HOST", "nonlocal XBLOCK  # attack", "'nonlocal' (hidden state)"),
    ("class", "MODULE", "class K:  # attack\n    pass", "module level: class statement"),
    ("with", "HOST", "with open('x') as f:  # attack\n    pass", "'with' statement is not allowed"),
    ("try to swallow errors", "HOST", "try:  # attack\n    pass\nexcept Exception:\n    pass", "'try' statement"),
    ("yield", "DEVICE", "yield x  # attack", "'yield' is not part of the language"),
    ("async", "MODULE", "async def h():  # attack\n    pass", "module level: async function statement"),
    ("match", "HOST", "match xnumel:  # attack\n    case 1:\n        pass", "'match' statement"),
    ("nested function", "HOST", "def g(meta):  # attack\n    return 1", "nested function statement"),
    ("lambda", "DEVICE", "f = lambda a: a  # attack", "lambda is not allowed"),
    ("comprehension", "HOST", "s = tuple(i for i in range(3))  # attack", "generator expression is not allowed"),
    ("list comprehension in device code", "DEVICE", "s = [i for i in range(3)]  # attack", "comprehension is not allowed"),
    ("import inside a function", "DEVICE", "import os  # attack", "import statement is not allowed in device code"),
    ("raise in device code", "DEVICE", "raise ValueError('x')  # attack", "'raise' statement is not allowed in device code"),
    ("raise an arbitrary exception", "HOST", "raise SystemExit(0)  # attack", "'raise SystemExit(0)' is not allowed"),
    ("star-import", "MODULE", "from triton.language import *  # attack", "'from triton.language import *' is not allowed"),
    ("relative import", "MODULE", "from .helpers import x  # attack", "'from .helpers import x' is not allowed"),
    ("import of os", "MODULE", "import os  # attack", "'import os' is not allowed"),
    ("import under another alias", "MODULE", "import triton.language as t2  # attack", "'import triton.language as t2'"),
    ("importing tl.extra.cuda", "MODULE", "from triton.language.extra import cuda  # attack",
     "'from triton.language.extra import cuda' is not allowed"),
    ("importlib", "MODULE", "import importlib  # attack", "'import importlib' is not allowed"),
    ("future feature", "MODULE", "from __future__ import barry_as_FLUFL  # attack", "is not allowed"),
    ("annotation with a call", "MODULE", "def h(n: print('x')):  # attack\n    return n", "annotation 'print('x')'"),
    ("string annotation with code", "MODULE", "def h(n: \"__import__('os')\"):  # attack\n    return n", "annotation"),
    ("bytes constant", "HOST", "b = b'\\x00'  # attack", "constant"),
    ("unknown module name", "HOST", "m = sys.modules  # attack", "unknown name 'sys'"),
    # --- text tricks -----------------------------------------------------------------------
    ("fullwidth identifier normalizing to exec", "HOST", "\uff45\uff58\uff45\uff43('1')  # attack", "is not ASCII"),
    ("Cyrillic letter in a tl name", "DEVICE", "y = tl.l\u043ead(in_ptr0)  # attack", "is not ASCII"),
]


def attack_line(source: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if "# attack" in line)


@pytest.mark.parametrize("where, code, reason", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_attack_is_rejected_on_its_line(where: str, code: str, reason: str):
    source = place(where, code)
    report = check_candidate(source, ARGS)
    assert not report.ok
    line = attack_line(source)
    on_line = [p for p in report.problems if p.startswith(f"line {line}: ")]
    assert any(reason in p for p in on_line), (line, report.problems)


def test_tensor_cannot_reach_a_host_helper():
    """Host helpers see numbers only: their parameters are not checked as tensors, so none may get one."""
    source = place("MODULE", "def h(t):\n    return t[0]").replace("    #HOST", "    v = h(in_ptr0)  # attack")
    problems = check_candidate(source, ARGS).problems
    assert any(p.startswith(f"line {attack_line(source)}: tensor argument 'in_ptr0'") for p in problems), problems


def test_a_second_definition_is_rejected():
    """The last definition wins on import; rejecting duplicates keeps what was read what runs."""
    source = BASE + "\n\ndef run(in_ptr0, out_ptr0, xnumel, *, stream=None):\n    pass\n"
    problems = check_candidate(source, ARGS).problems
    assert any(p.startswith(f"line {len(BASE.splitlines()) + 3}: 'run' is defined more than once") for p in problems)


def test_coding_declaration_cannot_hide_code():
    """``# coding: utf-7`` makes ``+AAo-`` a newline on import: the comment below would run."""
    source = "# coding: utf-7\n" + BASE.replace("#MODULE", "X = 1  # +AAo-import os; os.system('id')")
    report = check_candidate(source, ARGS)
    assert any(p.startswith("line 1: coding declaration 'utf-7' is not allowed") for p in report.problems)
    assert check_candidate("# -*- coding: utf-8 -*-\n" + place("MODULE", ""), ARGS).ok


def test_every_problem_is_reported_not_just_the_first():
    source = place("HOST", "in_ptr0.add_(1)\nv = getattr(tl, 'core')")
    problems = check_candidate(source, ARGS).problems
    assert any("in_ptr0.add_" in p for p in problems) and any("getattr" in p for p in problems), problems


def test_deep_nesting_is_rejected_not_a_crash():
    source = place("HOST", "n = " + "(" * 200 + "1" + ")" * 200 + "\nm = " + "-" * 5000 + "1")
    report = check_candidate(source, ARGS)
    assert not report.ok and report.problems[0].startswith("line ")
