"""The allowlists of the candidate language: every import, name, call and attribute a
candidate may use, as data. Whatever is not named here is rejected by the rules of
:mod:`.checker` and :mod:`.names`; docs/candidate-language.md gives the reasons.
"""

from __future__ import annotations

import re

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
WHY_NOT = {
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

