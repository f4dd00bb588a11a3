"""Stage 1 of the verification cascade: the candidate's source against a small allowlisted language.

A candidate is untrusted Python (a language model or a stranger's pull request wrote
it) that will be imported and run inside the model under test. This module reads it
with :mod:`ast` (it never imports or runs it, and imports neither torch nor triton)
and accepts it only if every statement, expression, name and attribute belongs to
the *candidate language*: Triton device code plus a launch function, as Inductor
writes them. Whatever the grammar below does not name is rejected, so a way out that
nobody thought of is rejected too; a blocklist (the previous design) let through
every path it did not list (``c = tl.core; c.builtins``, ``[tl.core][0]``, a call on
``tl.core``, ``tl.math.core.knobs.os``, state hung on ``tl.dtype``).

The language, in brief (docs/candidate-language.md has the full grammar and the
reasons):

* **module level**: a docstring, the import forms of :data:`IMPORTS`, constants
  (literals, tuples and arithmetic of them, ``tl.constexpr(<constant>)``) and
  functions: ``@triton.jit`` device functions (``@triton.constexpr_function`` ones too,
  Triton's compile-time helpers: device-code rules, never launched) and undecorated
  host functions;
* **names** resolve to a local, a module-level definition, an allowed builtin, or
  are an import alias followed by an allowlisted member
  (:data:`TL_FUNCTIONS`, :data:`LIBDEVICE_FUNCTIONS`, ...). Aliases are never values;
  trusted names are never rebound; no dunder anywhere; identifiers are ASCII;
* **device code** (``@triton.jit``): assignments to names, ``if``/``for`` over a
  range/``while``, ``return``, ``assert``; calls of allowlisted ``tl``/``libdevice``/
  ``tl_math`` functions, of the file's device functions and of tensor methods
  (:data:`DEVICE_VALUE_ATTRS`);
* **host code**: computes the grid from the integer size arguments and tensor
  metadata and launches the file's kernels: ``kernel[grid](args, NAME=..., num_warps=...)``.
  A tensor argument may only be passed to a launch or read for metadata
  (``.shape``, ``.stride()``, ...): host code can neither compute with tensors nor
  look at their values (which would let a candidate tell the harness's poisoned
  buffers from the model's);
* **the entry point** ``run(<the kernel's runtime arguments, in order>, *, stream=None)``.

Known limits, left to the later stages and the sandboxed worker: resource
exhaustion (``10 ** 10 ** 10``, endless loops), and under ``TRITON_INTERPRET=1``
device code runs as plain Python (the grammar keeps it to the same names).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass, field

# --- the allowlists (data) -------------------------------------------------------------

# Import statements, each in one spelling, and the name each binds (None: binds nothing).
# Fixed aliases keep every candidate readable the same way as a dump.
IMPORTS: dict[str, tuple[str | None, str | None]] = {
    # spelled statement -> (local name, canonical module)
    "import triton": ("triton", "triton"),
    "import triton.language": ("triton", "triton"),
    "import triton.language as tl": ("tl", "triton.language"),
    "from triton import language as tl": ("tl", "triton.language"),
    "from triton.language import math as tl_math": ("tl_math", "triton.language.math"),
    "from triton.language.extra import libdevice": ("libdevice", "libdevice"),
    "from triton.language.extra.cuda import libdevice": ("libdevice", "libdevice"),
    "import math": ("math", "math"),
    "from __future__ import annotations": (None, None),
}

# Submodules reachable by attribute: ``triton.language.X``, ``tl.math.X``.
SUBMODULES = {("triton", "language"): "triton.language", ("triton.language", "math"): "triton.language.math"}

# triton.language: functions (called, never used as values).
TL_FUNCTIONS = frozenset({
    # memory and indexing
    "load", "store", "arange", "program_id", "num_programs", "make_block_ptr", "advance",
    "make_tensor_descriptor", "load_tensor_descriptor", "store_tensor_descriptor",
    "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_xchg",
    "atomic_xor",
    # creation and shape
    "full", "zeros", "zeros_like", "broadcast", "broadcast_to", "reshape", "view", "ravel", "expand_dims",
    "permute", "trans", "cat", "join", "split", "interleave", "flip", "gather", "squeeze", "unsqueeze",
    "cast", "where", "pointer_type", "swizzle2d",
    # reductions and scans
    "sum", "max", "min", "argmax", "argmin", "reduce", "reduce_or", "xor_sum", "associative_scan",
    "cumsum", "cumprod", "sort", "topk", "histogram", "softmax", "map_elementwise",
    # math
    "abs", "add", "sub", "mul", "cdiv", "ceil", "floor", "clamp", "maximum", "minimum", "exp", "exp2",
    "log", "log2", "cos", "sin", "sqrt", "sqrt_rn", "rsqrt", "erf", "sigmoid", "fma", "fdiv", "div_rn",
    "umulhi", "dot", "dot_scaled",
    # random numbers (Philox: pure functions of seed and offset)
    "rand", "randn", "randint", "rand4x", "randn4x", "randint4x", "philox", "pair_uniform_to_normal",
    "uint_to_uniform_float",
    # compiler hints, loops, debugging
    "multiple_of", "max_contiguous", "max_constancy", "assume", "static_range", "range", "debug_barrier",
    "static_assert", "static_print", "device_assert", "device_print",
})
# triton.language: values (dtypes, constants).
TL_DTYPES = frozenset({
    "int1", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
    "float8e4nv", "float8e5", "float8e4b8", "float8e5b16", "float8e4b15",
})
TL_CONSTANTS = frozenset({"TRITON_MAX_TENSOR_NUMEL"})
# triton.language enums and their members: ``tl.PropagateNan.ALL`` (Inductor's nan-propagating max).
TL_ENUMS = {"PropagateNan": frozenset({"ALL", "NONE"})}
# triton.language types: annotations, isinstance, and ``tl.constexpr(<value>)``.
TL_TYPES = frozenset({"constexpr", "tensor", "dtype"})
# triton.language.core: the two helpers Inductor's inlined triton_helpers call, and nothing
# else of the module (it imports builtins, os, the knobs, the IR). Calls only, in device code.
TL_CORE_CALLS = frozenset({"_unwrap_if_constexpr", "get_int_dtype"})

# triton.language.math (``tl_math`` / ``tl.math``).
TL_MATH_FUNCTIONS = frozenset({
    "abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "rsqrt",
    "sin", "sqrt", "sqrt_rn", "umulhi",
})

# libdevice: every public function of triton.language.extra.libdevice (triton 3.7); all pure math.
LIBDEVICE_FUNCTIONS = frozenset("""
abs acos acosh add_rd add_rn add_ru add_rz asin asinh atan atan2 atanh brev byte_perm cbrt ceil clz
copysign cos cosh cospi cyl_bessel_i0 cyl_bessel_i1 div_rd div_rn div_ru div_rz double2float_rd
double2float_rn double2float_ru double2float_rz double2hiint double2int_rd double2int_rn double2int_ru
double2int_rz double2ll_rd double2ll_rn double2ll_ru double2ll_rz double2loint double2uint_rd
double2uint_rn double2uint_ru double2uint_rz double2ull_rd double2ull_rn double2ull_ru double2ull_rz
double_as_longlong erf erfc erfcinv erfcx erfinv exp exp10 exp2 expm1 fast_cosf fast_dividef
fast_exp10f fast_expf fast_log10f fast_log2f fast_logf fast_powf fast_sinf fast_tanf fast_tanhf fdim
ffs finitef float2int_rd float2int_rn float2int_ru float2int_rz float2ll_rd float2ll_rn float2ll_ru
float2ll_rz float2uint_rd float2uint_rn float2uint_ru float2uint_rz float2ull_rd float2ull_rn
float2ull_ru float2ull_rz float_as_int float_as_uint floor fma fma_rd fma_rn fma_ru fma_rz fmod hadd
hiloint2double hypot ilogb int2double_rn int2float_rd int2float_rn int2float_ru int2float_rz
int_as_float isfinited isinf isnan j0 j1 jn ldexp lgamma ll2double_rd ll2double_rn ll2double_ru
ll2double_rz ll2float_rd ll2float_rn ll2float_ru ll2float_rz llrint llround log log10 log1p log2 logb
longlong_as_double mul24 mul_rd mul_rn mul_ru mul_rz mulhi nearbyint nextafter norm3d norm4d normcdf
normcdfinv popc pow rcbrt rcp64h rcp_rd rcp_rn rcp_ru rcp_rz remainder rhadd rhypot rint rnorm3d
rnorm4d round rsqrt rsqrt_rn sad saturatef scalbn signbit sin sinh sinpi sqrt sqrt_rd sqrt_rn sqrt_ru
sqrt_rz sub_rd sub_rn sub_ru sub_rz tan tanh tgamma trunc uint2double_rn uint2float_rd uint2float_rn
uint2float_ru uint2float_rz uint_as_float ull2double_rd ull2double_rn ull2double_ru ull2double_rz
ull2float_rd ull2float_rn ull2float_ru ull2float_rz y0 y1 yn
""".split())

# Python's math: constants anywhere, functions in host code (Triton cannot call them on device).
MATH_CONSTANTS = frozenset({"pi", "e", "tau", "inf", "nan"})
MATH_FUNCTIONS = frozenset({
    "ceil", "floor", "trunc", "sqrt", "isqrt", "log", "log2", "log10", "exp", "pow", "gcd", "lcm", "prod",
    "fabs", "copysign", "isfinite", "isinf", "isnan", "sin", "cos", "tan", "tanh", "atan", "atan2", "erf",
    "erfc", "hypot", "expm1", "log1p",
})

# triton: functions host code may call, and the one decorator.
TRITON_HOST_FUNCTIONS = frozenset({"cdiv", "next_power_of_2"})
TRITON_DECORATOR = "jit"
# Triton's compile-time helpers (``_log2`` of its sort): called from device code, evaluated
# while the kernel compiles; checked by the device-code rules, never launched.
CONSTEXPR_DECORATOR = "constexpr_function"

# Attributes and methods of values in device code (tl.tensor, tl.dtype): pure, and none of
# them leads to a module. ``.item``/``.handle``/``.type``/``.value`` are left out on purpose.
DEVICE_VALUE_ATTRS = frozenset({
    # tensor attributes
    "dtype", "shape", "numel", "T",
    # tensor methods (tl functions bound to the tensor)
    "to", "cast", "broadcast_to", "reshape", "view", "ravel", "trans", "permute", "expand_dims", "flip",
    "split", "gather", "logical_and", "logical_or", "abs", "ceil", "floor", "cos", "sin", "exp", "exp2",
    "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "erf", "sigmoid", "cdiv", "sum", "max", "min", "argmax",
    "argmin", "reduce", "reduce_or", "xor_sum", "associative_scan", "cumsum", "cumprod", "sort",
    "histogram", "softmax", "advance", "load", "store",
    # dtype attributes and predicates
    "primitive_bitwidth", "int_bitwidth", "element_ty", "scalar", "is_floating", "is_int", "is_int_signed",
    "is_int_unsigned", "is_bool", "is_fp16", "is_bf16", "is_fp32", "is_fp64", "is_fp8", "is_ptr",
    "is_standard_floating", "is_block", "get_int_max_value", "get_int_min_value",
})

# Python builtins device code may call (Triton's code generator supports them).
DEVICE_BUILTINS = frozenset({"abs", "bool", "float", "int", "isinstance", "len", "max", "min", "range"})
# Python builtins host code may call: pure functions of numbers, plus exceptions for guards.
HOST_BUILTINS = frozenset({
    "abs", "all", "any", "bool", "divmod", "enumerate", "float", "int", "isinstance", "len", "max", "min",
    "pow", "range", "round", "sum", "tuple", "zip",
    "AssertionError", "IndexError", "NotImplementedError", "RuntimeError", "TypeError", "ValueError",
})
# Builtin types usable as the second argument of isinstance.
TYPE_NAMES = frozenset({"bool", "float", "int", "tuple"})
BUILTINS = DEVICE_BUILTINS | HOST_BUILTINS

# Tensor metadata host code may read from the entry point's tensor arguments.
HOST_METADATA_ATTRS = frozenset({"shape", "ndim", "dtype"})
# Not ``data_ptr()``: an address tells a candidate where it runs (the verifier's guarded
# copies, or the model's own buffers in production: consecutive allocations lie a rounded
# size apart), so host code could launch differently outside verification. Triton itself
# specialises on 16-byte alignment.
HOST_METADATA_METHODS = frozenset({"stride", "size", "numel", "dim", "element_size", "is_contiguous"})

# Keyword arguments of ``kernel[grid](...)`` besides the kernel's own parameters: the launch
# options Inductor uses (dumps spell out debug and sanitize_overflow as Inductor compiles
# them: device asserts for indirect indexing on, overflow checks off). Left out:
# extern_libs (loads a library), ptx_options, ir_override, instrumentation_mode, arch.
LAUNCH_OPTIONS = frozenset({
    "num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "enable_reflect_ftz",
    "launch_pdl", "launch_cooperative_grid", "debug", "sanitize_overflow",
})

# Names of the kernel's runtime arguments that are integers (Inductor's naming: sizes
# ``xnumel``/``r0_numel``, size variables ``ks0``, random seeds). Every other argument of the
# entry point is treated as a tensor: passed to a launch or read for metadata, nothing else.
SCALAR_ARG = re.compile(r"^(?:[xyz]numel|r\d*_numel|rnumel|ks\d+|seed|load_seed_offset\d*)$")

# Why some well-known names are not allowed (the rest get a generic message).
_WHY_NOT = {
    "inline_asm_elementwise": "arbitrary PTX can read timers (%globaltimer, %clock) and do anything",
    "extra": "tl.extra holds target intrinsics (tl.extra.cuda: globaltimer, clock, smid); "
             "import libdevice instead",
    "core": "triton.language.core imports builtins, os and the runtime knobs; "
            "only tl.core._unwrap_if_constexpr/get_int_dtype calls are allowed in device code",
    "semantic": "Triton internals", "standard": "Triton internals", "random": "Triton internals",
    "target_info": "Triton internals", "math": "use tl_math.<function> or tl.math.<function>",
    "runtime": "the driver, streams and launch machinery", "compiler": "the compiler",
    "knobs": "global configuration and environment", "testing": "benchmarking and timers",
    "backends": "the driver backends", "tools": "Triton tools", "autotune": "autotuning is not allowed",
    "heuristics": "heuristics are not allowed", "Config": "autotuning configurations are not allowed",
}


# --- the text itself: what every reader of the file sees -----------------------------------
#
# The text checked here is compiled and run as it is, but Triton reads a kernel's source
# again: ``inspect.getsourcelines`` (through ``linecache``, which splits lines with
# ``str.splitlines``) for ``JITFunction.src`` on the GPU, and, in the interpreter, from the
# *last* line of that text that starts with ``def``. Two rules keep every reader on the
# text that was checked: (1) no character on which Python's parser and ``str.splitlines``
# disagree about where lines end (and no invisible formatting character a reviewer cannot
# see), so a line number names the same line for everyone; (2) inside a Triton function no
# line but its own ``def`` line starts with ``def``. The loader
# (:func:`pytest_kernelopt.candidate.load_candidate_source`) then checks that what each of
# Triton's readers will compile parses to the very tree checked here.

# Control characters allowed in a candidate: tab and newline (\r only as part of \r\n).
_ALLOWED_CONTROL = {"\t", "\n"}
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\t\n]")
_MAX_TEXT_PROBLEMS = 5


def _char_problem(ch: str, following: str) -> str | None:
    import unicodedata

    if ch == "\r" and following == "\n":
        return None
    category = unicodedata.category(ch)
    if category not in ("Cc", "Cf", "Zl", "Zp", "Cs") or ch in _ALLOWED_CONTROL:
        return None
    name = unicodedata.name(ch, "a control character")
    why = ("Python's parser and str.splitlines() (linecache, inspect, Triton) disagree about where lines end "
           "around it" if category in ("Cc", "Zl", "Zp") else "it is invisible: a reviewer would not see it")
    return f"character U+{ord(ch):04X} ({name}) is not allowed: {why}"


def text_problems(source: str) -> list[tuple[int, str]]:
    """(line, message) for characters no candidate may hold and for a coding declaration
    other than UTF-8. Cheap (one regex pass); also run by the loader on every path."""
    problems: list[tuple[int, str]] = []
    if source.startswith("\ufeff"):  # some editors write one; the bytes are what is verified and stored
        problems.append((1, "the file starts with a UTF-8 byte-order mark (U+FEFF): save it without one"))
    bad = 0
    for match in _NOT_PLAIN.finditer(source):
        start = match.start()
        if start == 0 and problems:
            continue
        why = _char_problem(match.group(), source[start + 1:start + 2])
        if why is None:
            continue
        bad += 1
        if bad <= _MAX_TEXT_PROBLEMS:
            problems.append((source.count("\n", 0, start) + 1, why))
    if bad > _MAX_TEXT_PROBLEMS:
        problems.append((1, f"{bad - _MAX_TEXT_PROBLEMS} more such character(s) not listed"))
    if not problems:
        problems += _coding_problems(source)
    return problems


def _coding_problems(source: str) -> list[tuple[int, str]]:
    """A coding declaration (PEP 263) other than UTF-8 makes Python decode the file on import
    differently from the text checked here: under ``# coding: utf-7``, ``+AAo-`` is a
    newline, so code hidden in a comment runs (seen with Python 3.11). Python's own
    detection decides, so no spelling of a declaration escapes it."""
    head = source.split("\n", 2)[:2]
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO("\n".join(head).encode("utf-8")).readline)
    except SyntaxError as exc:
        return [(1, f"coding declaration is not allowed ({exc.msg})")]
    if encoding == "utf-8":
        return []
    for number, line in enumerate(head, 1):
        match = re.match(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
        if match:
            return [(number, f"coding declaration '{match.group(1)}' is not allowed "
                             "(candidates are UTF-8; another codec decodes differently on import)")]
    return [(1, f"coding declaration ({encoding}) is not allowed (candidates are UTF-8)")]


_DEF_LINE = re.compile(r"[ \t]*def\s")


def _is_triton_function(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef) and bool(node.decorator_list)


def reread_problems(source: str, tree: ast.Module) -> list[tuple[int, str]]:
    """Lines inside a Triton function that a reader of its source could take for its ``def``.

    Triton's interpreter re-reads a function from the last line of its source that starts
    with ``def`` (triton 3.7), so such a line inside a string would make it run the text
    after it, which nobody checked. Nested functions are not in the language, so any other
    such line is inside a string or a continuation.
    """
    lines = source.split("\n")
    problems = []
    for node in tree.body:
        if not _is_triton_function(node):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        for number in range(first, (node.end_lineno or node.lineno) + 1):
            if number != node.lineno and number <= len(lines) and _DEF_LINE.match(lines[number - 1]):
                problems.append((number, f"a line inside Triton function '{node.name}' starts with 'def' (in a "
                                         "string?): Triton re-reads a kernel's source from such a line; reword it"))
    return problems


@dataclass
class StaticReport:
    ok: bool
    problems: list[str] = field(default_factory=list)  # each "line N: what is wrong"


def check_candidate(source: str, entry_args: list[str] | None = None, entry_point: str = "run") -> StaticReport:
    """Statically check candidate ``source``; ``entry_args`` are the kernel's runtime argument names."""
    ambiguous = text_problems(source)
    if ambiguous:  # line numbers past such a character mean different lines to different readers
        return StaticReport(False, [f"line {line}: {msg}" for line, msg in ambiguous])
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning for "\d" in a string: not our concern
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport(False, [f"line {exc.lineno or 1}: syntax error: {exc.msg}"])
    except (ValueError, RecursionError, MemoryError) as exc:  # absurd nesting
        return StaticReport(False, [f"line 1: cannot parse: {type(exc).__name__}: {exc}"])
    checker = _Checker(tree, entry_point, entry_args)
    checker.check_source_text(source)
    checker.problems += reread_problems(source, tree)
    try:
        checker.check()
    except RecursionError:
        checker.add(tree, "source is nested too deeply to check")
    unique = dict.fromkeys(checker.problems)  # first occurrence order, no repeats
    problems = [f"line {line}: {msg}" for line, msg in sorted(unique, key=lambda p: p[0])]
    return StaticReport(not problems, problems)


# --- helpers ---------------------------------------------------------------------------

def _is_dunder(name: str) -> bool:
    """Dunder names (``__class__``) and, to keep one simple rule, any name starting with ``__``."""
    return name.startswith("__")


def _short(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # an unparsable fragment: still name the node
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _import_spelling(stmt: ast.Import | ast.ImportFrom) -> list[str]:
    """One canonical spelling per name imported: ``from a import b as c`` -> "from a import b as c"."""
    out = []
    for alias in stmt.names:
        suffix = f" as {alias.asname}" if alias.asname else ""
        if isinstance(stmt, ast.Import):
            out.append(f"import {alias.name}{suffix}")
        else:
            out.append(f"from {'.' * stmt.level}{stmt.module or ''} import {alias.name}{suffix}")
    return out


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _stored_names(nodes: list[ast.stmt]) -> set[str]:
    """Names bound by these statements (Python makes them locals of the enclosing function)."""
    return {
        n.id for stmt in nodes for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }


_STATEMENT_NAMES = {
    ast.Global: "'global' (hidden state)", ast.Nonlocal: "'nonlocal' (hidden state)", ast.ClassDef: "class",
    ast.With: "'with'", ast.AsyncWith: "'async with'", ast.Try: "'try'", ast.Delete: "'del'",
    ast.Import: "import", ast.ImportFrom: "import", ast.FunctionDef: "nested function",
    ast.AsyncFunctionDef: "async function", ast.AsyncFor: "'async for'", ast.Match: "'match'",
    ast.Raise: "'raise'", ast.While: "'while'", ast.If: "'if'", ast.For: "'for'", ast.Assert: "'assert'",
    ast.AugAssign: "augmented assignment", ast.Pass: "'pass'", ast.Return: "'return'", ast.Expr: "expression",
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    _STATEMENT_NAMES[ast.TryStar] = "'try'"
if hasattr(ast, "TypeAlias"):  # Python 3.12+
    _STATEMENT_NAMES[ast.TypeAlias] = "'type' alias"

_EXPRESSION_NAMES = {
    ast.Lambda: "lambda", ast.NamedExpr: "':=' (assignment expression)", ast.Starred: "'*' unpacking",
    ast.Dict: "dict", ast.Set: "set", ast.ListComp: "comprehension", ast.SetComp: "comprehension",
    ast.DictComp: "comprehension", ast.GeneratorExp: "generator expression", ast.Await: "'await'",
    ast.Yield: "'yield'", ast.YieldFrom: "'yield from'", ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string", ast.List: "list",
}

# Annotations (also as strings): Triton reads tl.constexpr; the rest document.
_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "tl.constexpr", "tl.tensor", "tl.dtype"})

# Roles a name or attribute can play where it is used.
VALUE, CALL, ATTR_ROOT, LAUNCH_ROOT, LAUNCH_ARG, TYPE, DECORATOR = (
    "value", "call", "attribute root", "launch root", "launch argument", "type", "decorator",
)


@dataclass
class _Scope:
    """The function being checked."""

    func: ast.FunctionDef
    kind: str  # "device" or "host"
    locals: set[str]
    params: set[str]
    assigned: set[str] = field(default_factory=set)  # names assigned in the body
    tensors: set[str] = field(default_factory=set)  # host: arguments that may hold tensors
    stream: str | None = None  # host entry point: its stream parameter


class _Checker:
    """Checks a parsed candidate against the candidate language; collects (line, message)."""

    def __init__(self, tree: ast.Module, entry_point: str, entry_args: list[str] | None):
        self.tree = tree
        self.entry_point = entry_point
        self.entry_args = entry_args
        self.problems: list[tuple[int, str]] = []
        self.modules: dict[str, str] = {}  # import alias -> canonical module
        self.device_fns: dict[str, ast.FunctionDef] = {}
        self.constexpr_fns: set[str] = set()  # device functions Triton evaluates at compile time
        self.host_fns: dict[str, ast.FunctionDef] = {}
        self.constants: set[str] = set()
        self.scope: _Scope | None = None

    def add(self, node: ast.AST, message: str) -> None:
        self.problems.append((getattr(node, "lineno", 1) or 1, message))

    @property
    def kind(self) -> str:
        return self.scope.kind if self.scope else "module"

    # --- the text itself ----------------------------------------------------------------

    def check_source_text(self, source: str) -> None:
        """The identifier rule the syntax tree cannot see (the rules on characters and the
        coding declaration ran before parsing: :func:`text_problems`).

        Non-ASCII identifiers are NFKC-normalized by the parser (``ｅｘｅｃ`` is ``exec``):
        the tree is what runs, but a reviewer reading the file would see something else.
        """
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.NAME and not token.string.isascii():
                    self.problems.append((token.start[0], f"identifier '{token.string}' is not ASCII"))
        except (tokenize.TokenError, SyntaxError):  # ast.parse accepted it; nothing to add
            pass

    # --- module level -------------------------------------------------------------------

    def check(self) -> None:
        self._collect()
        for i, stmt in enumerate(self.tree.body):
            if isinstance(stmt, ast.FunctionDef):
                self._function(stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)) or (i == 0 and _is_docstring(stmt)):
                continue  # checked in _collect
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self._module_constant(stmt)
            else:
                what = _STATEMENT_NAMES.get(type(stmt), f"'{type(stmt).__name__}'")
                self.add(stmt, f"module level: {what} statement is not allowed "
                               "(only a docstring, imports, constants and function definitions)")
        self._check_entry_point()

    def _collect(self) -> None:
        """Import aliases, functions and constants bound at module level, each bound once."""
        bound: dict[str, object] = {}

        def bind(node: ast.AST, name: str, what: object) -> None:
            if _is_dunder(name):
                self.add(node, f"name '{name}' is not allowed (dunder)")
            elif name in BUILTINS:
                self.add(node, f"'{name}' rebinds an allowed builtin")
            elif name in bound and not (isinstance(what, str) and bound[name] == what):
                self.add(node, f"'{name}' is defined more than once at module level")
            bound[name] = what

        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for spelled in _import_spelling(stmt):
                    if spelled not in IMPORTS:
                        self.add(stmt, f"'{spelled}' is not allowed (only import triton, import triton.language as "
                                       "tl, from triton.language import math as tl_math, from triton.language.extra "
                                       "import libdevice, import math)")
                        continue
                    local, module = IMPORTS[spelled]
                    if local is not None:
                        bind(stmt, local, module)
                        self.modules[local] = module
            elif isinstance(stmt, ast.FunctionDef):
                bind(stmt, stmt.name, stmt)
                (self.device_fns if stmt.decorator_list else self.host_fns)[stmt.name] = stmt
                if any(self._module_member(d) == ("triton", CONSTEXPR_DECORATOR, []) for d in stmt.decorator_list):
                    self.constexpr_fns.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        bind(stmt, target.id, stmt)
                        self.constants.add(target.id)
        for name in set(self.modules) & (set(self.device_fns) | set(self.host_fns) | self.constants):
            self.constants.discard(name)
            self.device_fns.pop(name, None)
            self.host_fns.pop(name, None)

    def _module_constant(self, stmt: ast.Assign | ast.AnnAssign) -> None:
        """``NAME = <constant>`` or ``NAME: <annotation> = <constant>``: immutable, computed from literals."""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            self.add(stmt, f"module level: '{_short(stmt)}' must assign one plain name")
            return
        if isinstance(stmt, ast.AnnAssign):
            self._annotation(stmt.annotation)
        if stmt.value is None:
            self.add(stmt, f"module level: '{targets[0].id}' needs a value")
        elif not self._constant(stmt.value):
            self.add(stmt, f"module-level mutable or computed state: {targets[0].id} = {_short(stmt.value)} "
                           "(only constants: numbers, strings, tuples of them, tl.constexpr(<constant>))")

    def _constant(self, node: ast.expr) -> bool:
        """A compile-time constant: a literal, a tuple or arithmetic of constants, a module
        constant, a tl dtype, or ``tl.constexpr(<constant>)``."""
        if isinstance(node, ast.Constant):
            return node.value is None or isinstance(node.value, (bool, int, float, str))
        if isinstance(node, ast.Name):
            return node.id in self.constants
        if isinstance(node, ast.Tuple):
            return all(self._constant(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            return self._constant(node.operand)
        if isinstance(node, ast.BinOp):
            return self._constant(node.left) and self._constant(node.right)
        member = self._module_member(node)
        if member is not None:
            module, name, extra = member
            return not extra and ((module == "triton.language" and name in TL_DTYPES | TL_CONSTANTS)
                                  or (module == "math" and name in MATH_CONSTANTS))
        if isinstance(node, ast.Call):
            member = self._module_member(node.func)
            return member == ("triton.language", "constexpr", []) and len(node.args) == 1 \
                and not node.keywords and self._constant(node.args[0])
        return False

    # --- the entry point ----------------------------------------------------------------

    def _check_entry_point(self) -> None:
        name = self.entry_point
        func = self.host_fns.get(name) or self.device_fns.get(name)
        if func is None:
            self.add(self.tree, f"no module-level function '{name}' (the entry point)")
            return
        if name in self.device_fns:
            self.add(func, f"entry point '{name}' must be a plain host function, not a Triton kernel")
        if func.args.defaults and not (len(func.args.defaults) == 1 and self._entry_positional(func) != [
                a.arg for a in func.args.args]):
            self.add(func, f"entry point '{name}': the kernel's arguments may not have default values")
        names = self._entry_positional(func)
        if self.entry_args is not None and names != list(self.entry_args):
            self.add(func, f"entry point '{name}' parameters are ({', '.join(names)}); "
                           f"expected ({', '.join(self.entry_args)}) in that order")
        if self._stream_param(func) is None:
            self.add(func, f"entry point '{name}' must take the stream as its last parameter: "
                           f"def {name}(<the kernel's arguments>, *, stream=None)")

    @staticmethod
    def _entry_positional(func: ast.FunctionDef) -> list[str]:
        names = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
        return names[:-1] if names and names[-1] == "stream" and func.args.defaults else names

    @staticmethod
    def _stream_param(func: ast.FunctionDef) -> str | None:
        """``*, stream=None`` (or a last positional ``stream=None``); None if absent or malformed."""
        args = func.args
        if args.vararg or args.kwarg or args.posonlyargs:
            return None
        none = lambda d: isinstance(d, ast.Constant) and d.value is None  # noqa: E731
        if [a.arg for a in args.kwonlyargs] == ["stream"] and none(args.kw_defaults[0]):
            return "stream" if not args.defaults else None
        if not args.kwonlyargs and args.args and args.args[-1].arg == "stream" and len(args.defaults) == 1 \
                and none(args.defaults[0]):
            return "stream"
        return None

    # --- functions ----------------------------------------------------------------------

    def _function(self, func: ast.FunctionDef) -> None:
        device = bool(func.decorator_list)
        for decorator in func.decorator_list:
            if self._module_member(decorator) not in (("triton", TRITON_DECORATOR, []),
                                                      ("triton", CONSTEXPR_DECORATOR, [])):
                member = self._module_member(decorator.func if isinstance(decorator, ast.Call) else decorator)
                why = _WHY_NOT.get(member[1]) if member else None
                self.add(decorator, f"decorator '{_short(decorator)}' is not allowed "
                                    f"({why + '; ' if why else ''}only a bare @triton.jit or @triton.constexpr_function)")
        if len(func.decorator_list) > 1:
            self.add(func, f"'{func.name}' has more than one decorator (only a bare @triton.jit or "
                           "@triton.constexpr_function)")
        if func.returns is not None:
            self._annotation(func.returns)
        self._parameters(func, device)
        args = func.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        kind = "device" if device else "host"
        assigned = _stored_names(func.body)
        scope = _Scope(func, kind, set(params) | assigned, set(params), assigned)
        if not device and func.name == self.entry_point:
            # Other host functions only ever receive numbers: a tensor cannot be passed to them.
            scope.stream = self._stream_param(func)
            scope.tensors = {p for p in params if not SCALAR_ARG.match(p) and p != scope.stream}
        self.scope = scope
        for i, stmt in enumerate(func.body):
            if i == 0 and _is_docstring(stmt):
                continue
            self._statement(stmt)
        self.scope = None

    def _parameters(self, func: ast.FunctionDef, device: bool) -> None:
        args = func.args
        if args.vararg or args.kwarg:
            star = f"*{args.vararg.arg}" if args.vararg else f"**{args.kwarg.arg}"  # type: ignore[union-attr]
            self.add(func, f"'{func.name}' must not take {star}; name its parameters")
        if args.posonlyargs:
            self.add(func, f"'{func.name}': positional-only parameters are not allowed")
        if device and args.kwonlyargs:
            self.add(func, f"'{func.name}': keyword-only parameters are not allowed in device code")
        if not device and func.name != self.entry_point and args.kwonlyargs:
            self.add(func, f"'{func.name}': keyword-only parameters are not allowed")
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            self._binding(arg, arg.arg, "host" if not device else "device")
            if arg.annotation is not None:
                self._annotation(arg.annotation)
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None and not self._constant(default):
                self.add(default, f"default value '{_short(default)}' of '{func.name}' must be a constant "
                                  "(a literal, a tl dtype or tl.constexpr(<literal>))")

    def _annotation(self, node: ast.expr) -> None:
        """Annotations: tl.constexpr/tl.tensor/tl.dtype, int/float/bool/str, or such a name as a string."""
        if isinstance(node, ast.Constant) and node.value in _ANNOTATIONS:  # a forward reference: 'bool'
            return
        if isinstance(node, ast.Name) and node.id in _ANNOTATIONS:
            return
        member = self._module_member(node)
        if member is not None and member[0] == "triton.language" and member[1] in TL_TYPES and not member[2]:
            return
        self.add(node, f"annotation '{_short(node)}' is not allowed "
                       "(only tl.constexpr, tl.tensor, tl.dtype, int, float, bool, str)")

    def _binding(self, node: ast.AST, name: str, kind: str | None = None) -> None:
        """A name bound inside a function: never a dunder, an import alias or an allowed builtin;
        in host code never a module-level function or a parameter.

        Device code may shadow the file's function names (Inductor's inlined ``pow_integer``
        has a local ``exp`` next to the helper ``exp``): a local is never callable in this
        language, so the shadowing opens nothing.
        """
        kind = kind or self.kind
        if _is_dunder(name):
            self.add(node, f"name '{name}' is not allowed (dunder)")
        elif name in self.modules:
            self.add(node, f"'{name}' rebinds an imported module")
        elif name in BUILTINS:
            self.add(node, f"'{name}' rebinds an allowed builtin")
        elif kind == "host" and (name in self.device_fns or name in self.host_fns):
            self.add(node, f"'{name}' rebinds a module-level function in host code")

    # --- statements ---------------------------------------------------------------------

    def _statement(self, stmt: ast.stmt) -> None:
        device = self.kind == "device"
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Call):
                self._call(stmt.value, statement=True)
            elif not _is_docstring(stmt):
                what = _EXPRESSION_NAMES.get(type(stmt.value))
                self.add(stmt, f"expression statement '{_short(stmt)}' is not allowed (only calls"
                               f"{'; ' + what + ' is not part of the language' if what else ''})")
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._target(target)
            self._expr(stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            self._target(stmt.target, plain=True)
            self._annotation(stmt.annotation)
            if stmt.value is not None:
                self._expr(stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self._target(stmt.target, plain=True)
            self._expr(stmt.value)
        elif isinstance(stmt, ast.If):
            self._expr(stmt.test)
            self._body(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.For):
            self._target(stmt.target)
            self._loop_range(stmt.iter)
            if stmt.orelse:
                self.add(stmt.orelse[0], "'for ... else' is not allowed")
            self._body(stmt.body)
        elif isinstance(stmt, ast.While):  # (a host loop that never ends is the worker's time limit's job)
            self._expr(stmt.test)
            if stmt.orelse:
                self.add(stmt.orelse[0], "'while ... else' is not allowed")
            self._body(stmt.body)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self._expr(stmt.value)
        elif isinstance(stmt, ast.Assert):
            self._expr(stmt.test)
            if stmt.msg is not None:
                self._expr(stmt.msg)
        elif isinstance(stmt, ast.Raise) and not device:
            self._raise(stmt)
        elif isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            pass
        else:
            what = _STATEMENT_NAMES.get(type(stmt), f"'{type(stmt).__name__}'")
            self.add(stmt, f"{what} statement is not allowed in {self.kind} code")

    def _body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self._statement(stmt)

    def _target(self, node: ast.expr, plain: bool = False) -> None:
        """Assignment targets: names (or, unless ``plain``, tuples/lists of names)."""
        if isinstance(node, ast.Name):
            self._binding(node, node.id)
            scope = self.scope
            if scope and scope.kind == "host" and node.id in scope.params:
                self.add(node, f"host code may not assign to parameter '{node.id}'")
        elif isinstance(node, (ast.Tuple, ast.List)) and not plain:
            for element in node.elts:
                self._target(element)
        elif isinstance(node, ast.Attribute):
            self.add(node, f"assignment to attribute '{_short(node)}' is not allowed (monkey-patching, hidden state)")
        elif isinstance(node, ast.Subscript):
            self.add(node, f"assignment to item '{_short(node)}' is not allowed (only names are assigned)")
        else:
            self.add(node, f"assignment target '{_short(node)}' is not allowed (only names)")

    def _loop_range(self, node: ast.expr) -> None:
        """``for`` iterates over ``range(...)``, ``tl.range(...)`` or ``tl.static_range(...)`` only."""
        if isinstance(node, ast.Call):
            member = self._module_member(node.func)
            is_builtin_range = isinstance(node.func, ast.Name) and node.func.id == "range" \
                and not self._is_local(node.func.id)
            if is_builtin_range or (self.kind == "device" and member in (
                    ("triton.language", "range", []), ("triton.language", "static_range", []))):
                self._call(node)
                return
        self.add(node, f"'for' must iterate over range(...)"
                       f"{', tl.range(...) or tl.static_range(...)' if self.kind == 'device' else ''}, "
                       f"not '{_short(node)}'")

    def _raise(self, stmt: ast.Raise) -> None:
        """Host guards: ``raise ValueError("...")``."""
        exc = stmt.exc
        if stmt.cause is not None:
            self.add(stmt, "'raise ... from' is not allowed")
        if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id[:1].isupper() \
                and exc.func.id in HOST_BUILTINS:
            self._call(exc)
        else:
            self.add(stmt, f"'raise {_short(exc) if exc else ''}' is not allowed "
                           "(only raise ValueError(...)/RuntimeError(...)/... with a message)")

    # --- expressions ----------------------------------------------------------------------

    def _expr(self, node: ast.expr, role: str = VALUE) -> None:
        if isinstance(node, ast.Constant):
            if not (node.value is None or isinstance(node.value, (bool, int, float, str))):
                self.add(node, f"constant '{_short(node)}' is not allowed (only numbers, strings, True/False/None)")
        elif isinstance(node, ast.Name):
            self._name(node, role)
        elif isinstance(node, ast.Attribute):
            self._attribute(node, role)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.BinOp):
            self._expr(node.left)
            self._expr(node.right)
        elif isinstance(node, ast.UnaryOp):
            self._expr(node.operand)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self._expr(value)
        elif isinstance(node, ast.Compare):
            for value in [node.left, *node.comparators]:
                self._expr(value)
        elif isinstance(node, ast.IfExp):
            for value in (node.test, node.body, node.orelse):
                self._expr(value)
        elif isinstance(node, ast.Subscript):
            self._expr(node.value)
            self._expr(node.slice)
        elif isinstance(node, ast.Slice):
            for value in (node.lower, node.upper, node.step):
                if value is not None:
                    self._expr(value)
        elif isinstance(node, ast.Tuple) or (isinstance(node, ast.List) and self.kind == "device"):
            for element in node.elts:
                self._expr(element)
        else:
            what = _EXPRESSION_NAMES.get(type(node), f"'{type(node).__name__}'")
            hint = " (use a tuple)" if isinstance(node, ast.List) else ""
            self.add(node, f"{what} is not allowed in {self.kind} code{hint}")

    def _is_local(self, name: str) -> bool:
        return self.scope is not None and name in self.scope.locals

    def _name(self, node: ast.Name, role: str) -> None:
        """A name must resolve: a local, a module-level definition, an allowed builtin."""
        name, scope, device = node.id, self.scope, self.kind == "device"
        if _is_dunder(name):
            self.add(node, f"name '{name}' is not allowed (dunder)")
        elif scope is not None and name in scope.locals:
            if scope.stream is not None and name == scope.stream:
                self.add(node, f"the '{name}' parameter may not be used (Triton launches on the current stream)")
            elif name in scope.tensors and role not in (LAUNCH_ARG, ATTR_ROOT):
                self.add(node, f"tensor argument '{name}' may only be passed to a kernel launch or read for "
                               "metadata (.shape, .stride(), ...) in host code")
            elif role == CALL and not (device and name in scope.params and name not in scope.assigned):
                # A device function's parameter may be called: Inductor's scan helpers take
                # ``combine_fn``. Only the file's device functions can reach a parameter (host
                # code cannot pass a function), so the call stays inside the file.
                self.add(node, f"call of local value '{name}' is not allowed")
            elif role in (LAUNCH_ROOT, TYPE, DECORATOR):
                self.add(node, f"'{name}' is a local value, not a {'kernel' if role == LAUNCH_ROOT else role}")
        elif name in self.modules:
            if role != ATTR_ROOT:
                self.add(node, f"module '{name}' may only be used as '{name}.<name>'")
        elif name in self.device_fns:
            if device and role not in (CALL, VALUE):
                self.add(node, f"device function '{name}' may only be called or passed to tl.reduce/associative_scan")
            elif not device and role != LAUNCH_ROOT:
                self.add(node, f"kernel '{name}' may only be launched from host code: {name}[grid](...)")
        elif name in self.host_fns:
            if device:
                self.add(node, f"device code may not use host function '{name}'")
            elif role != CALL:
                self.add(node, f"host function '{name}' may only be called")
            elif name == self.entry_point:
                self.add(node, f"the entry point '{name}' may not be called from the candidate")
        elif name in self.constants:
            if role not in (VALUE, LAUNCH_ARG):
                self.add(node, f"module constant '{name}' may only be used as a value")
        elif name in (DEVICE_BUILTINS if device else HOST_BUILTINS):
            if not (role == CALL or (role == TYPE and name in TYPE_NAMES)):
                self.add(node, f"builtin '{name}' may only be called")
        else:
            allowed = DEVICE_BUILTINS if device else HOST_BUILTINS
            self.add(node, f"unknown name '{name}' (not a local, a module-level definition or an allowed "
                           f"builtin: {', '.join(sorted(n for n in allowed if n[0].islower()))})")

    def _module_member(self, node: ast.expr) -> tuple[str, str, list[str]] | None:
        """``tl.load`` -> ("triton.language", "load", []); ``tl.PropagateNan.ALL`` ->
        (..., "PropagateNan", ["ALL"]); None if ``node`` is not rooted at an import alias or
        names a module itself (then ("<module>", "", [])).
        """
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.modules or self._is_local(node.id):
            return None
        module, chain = self.modules[node.id], chain[::-1]
        while chain and (module, chain[0]) in SUBMODULES:
            module = SUBMODULES[(module, chain.pop(0))]
        if not chain:
            return module, "", []
        return module, chain[0], chain[1:]

    def _attribute(self, node: ast.Attribute, role: str) -> None:
        member = self._module_member(node)
        if member is not None:
            self._member(node, member, role)
            return
        if self.kind == "device":
            if _is_dunder(node.attr):
                self.add(node, f"attribute '{node.attr}' is not allowed (dunder)")
            elif node.attr not in DEVICE_VALUE_ATTRS:
                self.add(node, f"attribute '.{node.attr}' is not allowed in device code (tensor and dtype "
                               "attributes only: .to(), .dtype, .shape, .broadcast_to(), ...)")
            value = node.value
            if isinstance(value, ast.Call) and (m := self._module_member(value.func)) and m[0] == "triton.language" \
                    and m[1] == "core":
                self.add(node, f"attribute access on the result of '{_short(value.func)}(...)' is not allowed")
                return
            self._expr(value, ATTR_ROOT if isinstance(value, ast.Name) else VALUE)
            return
        # Host code: tensor metadata of a parameter, nothing else.
        value, scope = node.value, self.scope
        is_param = isinstance(value, ast.Name) and scope is not None and value.id in scope.params
        wanted = HOST_METADATA_METHODS if role == CALL else HOST_METADATA_ATTRS
        if is_param and node.attr in wanted:
            self._expr(value, ATTR_ROOT)
            return
        if is_param and node.attr in HOST_METADATA_METHODS | HOST_METADATA_ATTRS:
            self.add(node, f"'{_short(node)}' must be {'called' if role != CALL else 'read, not called'}")
            return
        self._expr(value, ATTR_ROOT if isinstance(value, ast.Name) else VALUE)  # e.g. an unknown name
        self.add(node, f"attribute access '{_short(node)}' is not allowed in host code (only <module>.<name> "
                       f"and metadata of the arguments: .{', .'.join(sorted(HOST_METADATA_ATTRS))}, "
                       f".{'(), .'.join(sorted(HOST_METADATA_METHODS))}())")

    def _member(self, node: ast.expr, member: tuple[str, str, list[str]], role: str) -> None:
        """``<alias>.<name>``: allowed by name, in this kind of code, in this role."""
        module, name, extra = member
        device = self.kind == "device"
        spelled = _short(node)
        if not name:
            self.add(node, f"module '{spelled}' may only be used as '{spelled}.<name>'")
            return
        if _is_dunder(name) or any(_is_dunder(e) for e in extra):
            self.add(node, f"'{spelled}' is not allowed (dunder)")
            return
        if module == "triton.language" and name in TL_ENUMS:
            if len(extra) == 1 and extra[0] in TL_ENUMS[name] and role == VALUE and device:
                return
            self.add(node, f"'{spelled}' is not allowed (only {', '.join(f'tl.{name}.{m}' for m in sorted(TL_ENUMS[name]))} "
                           "in device code)")
            return
        if extra:
            why = _WHY_NOT.get(name) if module in ("triton", "triton.language") else None
            self.add(node, f"'{spelled}' is not allowed ({why or 'no attribute access on ' + _short_path(module, name)})")
            return
        why = None
        if module == "triton.language":
            if name in TL_FUNCTIONS:
                why = None if device and role == CALL else ("only called, in device code" if device else
                                                            "device code only")
            elif name in TL_DTYPES | TL_CONSTANTS:
                why = None if role in (VALUE, LAUNCH_ARG) else "a value, not callable"
            elif name in TL_TYPES:
                ok = role == TYPE or (name == "constexpr" and role == CALL)
                why = None if ok else "only in annotations, isinstance(...) and tl.constexpr(<value>)"
            else:
                why = _WHY_NOT.get(name, "not in the allowlist of triton.language")
        elif module == "triton.language.math":
            why = None if name in TL_MATH_FUNCTIONS and device and role == CALL else (
                "not in the allowlist of triton.language.math" if name not in TL_MATH_FUNCTIONS
                else "only called, in device code")
        elif module == "libdevice":
            why = None if name in LIBDEVICE_FUNCTIONS and device and role == CALL else (
                "not a libdevice function" if name not in LIBDEVICE_FUNCTIONS else "only called, in device code")
        elif module == "math":
            if name in MATH_CONSTANTS:
                why = None if role in (VALUE, LAUNCH_ARG) else "a value, not callable"
            elif name in MATH_FUNCTIONS:
                why = None if role == CALL and not device else (
                    "host code only (Triton cannot call Python's math)" if device else "only called")
            else:
                why = "not in the allowlist of math"
        elif module == "triton":
            if name in TRITON_HOST_FUNCTIONS:
                why = None if role == CALL and not device else ("host code only" if device else "only called")
            elif name in (TRITON_DECORATOR, CONSTEXPR_DECORATOR):
                why = None if role == DECORATOR else f"only as the decorator @triton.{name}"
            else:
                why = _WHY_NOT.get(name, f"only triton.{TRITON_DECORATOR}, "
                                         f"triton.{', triton.'.join(sorted(TRITON_HOST_FUNCTIONS))}")
        if why:
            self.add(node, f"'{spelled}' is not allowed ({why})")

    def _call(self, node: ast.Call, statement: bool = False) -> None:
        func = node.func
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.add(arg, f"'*' unpacking in a call is not allowed: '{_short(arg)}'")
        for keyword in node.keywords:
            if keyword.arg is None:
                self.add(keyword.value, f"'**' unpacking in a call is not allowed: '**{_short(keyword.value)}'")
            elif _is_dunder(keyword.arg):
                self.add(keyword.value, f"keyword '{keyword.arg}' is not allowed (dunder)")
        args = [a for a in node.args if not isinstance(a, ast.Starred)]
        keywords = [k for k in node.keywords if k.arg is not None]
        if isinstance(func, ast.Subscript):
            if not statement and self.kind == "host":
                # Triton returns the compiled kernel object: nothing host code should hold.
                self.add(node, f"the result of the launch '{_short(func)}(...)' may not be used (a launch is a statement)")
            self._launch(node, func, args, keywords)
            return
        if self.kind == "device" and isinstance(func, ast.Attribute):
            member = self._module_member(func)
            if member is not None and member[0] == "triton.language" and member[1] == "core":
                self._core_call(node, func, member, args, keywords)
                return
        if isinstance(func, (ast.Name, ast.Attribute)):
            self._expr(func, CALL)
        else:
            self.add(node, f"call of '{_short(func)}' is not allowed")
            return
        type_arg = isinstance(func, ast.Name) and func.id == "isinstance" and not self._is_local("isinstance")
        for i, arg in enumerate(args):
            if type_arg and i == 1:
                self._isinstance_type(arg)
            else:
                self._expr(arg)
        for keyword in keywords:
            self._expr(keyword.value)

    def _isinstance_type(self, node: ast.expr) -> None:
        for element in node.elts if isinstance(node, ast.Tuple) else [node]:
            self._expr(element, TYPE)

    def _core_call(self, node: ast.Call, func: ast.Attribute, member: tuple[str, str, list[str]],
                   args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        """``tl.core._unwrap_if_constexpr(<local>)`` and ``tl.core.get_int_dtype(<values>)``, exactly."""
        _, _, extra = member
        if len(extra) != 1 or extra[0] not in TL_CORE_CALLS:
            self.add(func, f"'{_short(func)}' is not allowed ({_WHY_NOT['core']})")
            return
        if extra[0] == "_unwrap_if_constexpr":
            plain = len(args) == 1 and not keywords and isinstance(args[0], ast.Name) and self._is_local(args[0].id)
            if not plain:
                self.add(node, "tl.core._unwrap_if_constexpr takes exactly one local name")
                return
        elif any(k.arg not in ("bitwidth", "signed") for k in keywords) or len(args) > 2:
            self.add(node, "tl.core.get_int_dtype takes (bitwidth, signed) only")
            return
        for arg in args:
            self._expr(arg)
        for keyword in keywords:
            self._expr(keyword.value)

    def _launch(self, node: ast.Call, func: ast.Subscript, args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        """``kernel[grid](args..., NAME=..., num_warps=...)``: host code launching one of the file's kernels."""
        kernel = func.value
        if self.kind != "host" or not isinstance(kernel, ast.Name) or kernel.id not in self.device_fns \
                or kernel.id in self.constexpr_fns or self._is_local(kernel.id):
            self.add(node, f"call of '{_short(func)}' is not allowed (only kernel[grid](...) launches of the "
                           "file's @triton.jit functions, from host code)")
            return
        self._expr(func.slice)
        target = self.device_fns[kernel.id]
        params = [a.arg for a in target.args.args]
        constexpr = {a.arg for a in target.args.args if a.annotation is not None and "constexpr" in _short(a.annotation)}
        for i, arg in enumerate(args):
            self._launch_arg(arg, params[i] if i < len(params) else None, constexpr)
        for keyword in keywords:
            name = keyword.arg
            if name not in params and name not in LAUNCH_OPTIONS:
                self.add(keyword.value, f"launch keyword '{name}' is neither a parameter of '{kernel.id}' nor a "
                                        f"launch option ({', '.join(sorted(LAUNCH_OPTIONS))})")
            self._launch_arg(keyword.value, name, constexpr)

    def _launch_arg(self, arg: ast.expr, param: str | None, constexpr: set[str]) -> None:
        scope = self.scope
        if isinstance(arg, ast.Name) and scope is not None and arg.id in scope.tensors and param in constexpr:
            self.add(arg, f"tensor argument '{arg.id}' may not be passed as constexpr '{param}'")
            return
        self._expr(arg, LAUNCH_ARG if isinstance(arg, ast.Name) else VALUE)


def _short_path(module: str, name: str) -> str:
    alias = {"triton.language": "tl", "triton.language.math": "tl.math"}.get(module, module)
    return f"{alias}.{name}"
