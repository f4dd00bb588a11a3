"""Interpreter mode: Inductor's Triton kernels on the CPU, run by Triton's interpreter.

Without a CUDA device, Inductor is told to generate Triton (not C++) for the CPU
device and Triton runs those kernels with ``TRITON_INTERPRET=1``. Two things the
interpreter lacks are filled in here:

* Inductor stamps every kernel with a hash of the active Triton backend, and no
  backend is active on a CPU-only machine (torch 2.13 / triton 3.7.1: "0 active
  drivers"). We hash the Triton version alone instead.
* Inductor calls ``triton.language.extra.libdevice`` math (``libdevice.exp``,
  ``.rsqrt``, ...), whose functions are empty stubs that only a GPU backend
  resolves; under the interpreter they return ``None``. We give each function a
  NumPy implementation. A function without one raises
  :class:`InterpreterUnsupported` naming it, instead of failing later on ``None``.

:func:`enable` must run before ``triton`` is first imported (the interpreter flag
is read at import time) and is idempotent.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable

from .errors import InterpreterUnsupported

_enabled = False


def enable() -> None:
    """Switch this process to interpreter mode (idempotent)."""
    global _enabled
    if _enabled:
        return
    os.environ["TRITON_INTERPRET"] = "1"
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton

    inductor_config.cpu_backend = "triton"

    def backend_hash() -> str:
        import triton

        return hashlib.sha256(f"triton-{triton.__version__}-interpreter".encode()).hexdigest().upper()

    torch_triton.triton_hash_with_backend = backend_hash
    _patch_libdevice()
    _enabled = True


def is_enabled() -> bool:
    return _enabled


# --- libdevice -------------------------------------------------------------------------

def _numpy_table() -> dict[str, tuple[Callable[..., Any], str]]:
    """libdevice name -> (NumPy implementation, result kind).

    Result kind: "same" keeps the (promoted) float dtype of the inputs, "bool",
    "int32" and "int64" force that dtype.
    """
    import numpy as np

    def erf(x):
        from triton.runtime.interpreter import np_erf_fp32, np_erf_fp64

        return np_erf_fp32(x) if x.dtype == np.float32 else np_erf_fp64(x)

    def erfc(x):
        return 1.0 - erf(x)

    def lgamma(x):
        import math

        return np.vectorize(math.lgamma, otypes=[x.dtype])(x)

    def erfinv(x):
        # NumPy has no erfinv: Newton steps on erf from a rational first guess.
        w = -np.log((1.0 - x) * (1.0 + x))
        y = np.sign(x) * np.sqrt(np.sqrt((2 / (np.pi * 0.147) + w / 2) ** 2 - w / 0.147) - (2 / (np.pi * 0.147) + w / 2))
        for _ in range(3):
            y = y - (erf(y) - x) / (2 / np.sqrt(np.pi) * np.exp(-y * y))
        return y.astype(x.dtype)

    def ilogb(x):
        return np.frexp(x)[1] - 1

    def rint(x):
        return np.rint(x)

    return {
        "exp": (np.exp, "same"), "exp2": (np.exp2, "same"), "expm1": (np.expm1, "same"),
        "log": (np.log, "same"), "log2": (np.log2, "same"), "log10": (np.log10, "same"),
        "log1p": (np.log1p, "same"), "sqrt": (np.sqrt, "same"),
        "rsqrt": (lambda x: (1 / np.sqrt(x)).astype(x.dtype), "same"),
        "erf": (erf, "same"), "erfc": (erfc, "same"), "erfinv": (erfinv, "same"), "lgamma": (lgamma, "same"),
        "sin": (np.sin, "same"), "cos": (np.cos, "same"), "tan": (np.tan, "same"),
        "asin": (np.arcsin, "same"), "acos": (np.arccos, "same"), "atan": (np.arctan, "same"),
        "sinh": (np.sinh, "same"), "cosh": (np.cosh, "same"), "tanh": (np.tanh, "same"),
        "asinh": (np.arcsinh, "same"), "acosh": (np.arccosh, "same"), "atanh": (np.arctanh, "same"),
        "fast_tanhf": (np.tanh, "same"),
        "floor": (np.floor, "same"), "ceil": (np.ceil, "same"), "trunc": (np.trunc, "same"),
        "nearbyint": (rint, "same"), "rint": (rint, "same"), "round": (rint, "same"),
        "abs": (np.abs, "same"), "fabs": (np.abs, "same"),
        "llrint": (lambda x: np.rint(x).astype(np.int64), "int64"),
        "ilogb": (ilogb, "int32"),
        "isnan": (np.isnan, "bool"), "isinf": (np.isinf, "bool"), "isfinited": (np.isfinite, "bool"),
        "finitef": (np.isfinite, "bool"), "signbit": (np.signbit, "bool"),
        "pow": (np.power, "same"), "atan2": (np.arctan2, "same"), "fmod": (np.fmod, "same"),
        "hypot": (np.hypot, "same"), "copysign": (np.copysign, "same"), "nextafter": (np.nextafter, "same"),
        "fmax": (np.fmax, "same"), "fmin": (np.fmin, "same"),
        "ldexp": (lambda x, e: np.ldexp(x, e.astype(np.int32)), "same"),
        "fma": (lambda x, y, z: x * y + z, "same"),
    }


def _wrap(name: str, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def impl(*args: Any, **_: Any) -> Any:
        arrays, float_dtype = [], None
        for a in args:
            handle = getattr(a, "handle", None)
            if handle is not None and hasattr(handle, "data"):
                data = handle.data
                if np.issubdtype(data.dtype, np.floating) and float_dtype is None:
                    float_dtype = a.dtype.scalar if hasattr(a.dtype, "scalar") else a.dtype
            else:
                data = np.asarray(getattr(a, "value", a))
            arrays.append(data)
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*arrays))
        if kind == "bool":
            out, dtype = out.astype(np.bool_), tl.int1
        elif kind == "int32":
            out, dtype = out.astype(np.int32), tl.int32
        elif kind == "int64":
            out, dtype = out.astype(np.int64), tl.int64
        else:
            dtype = float_dtype or tl.float32
            out = out.astype(_np_dtype(dtype))
        ty = tl.block_type(dtype, list(out.shape)) if out.ndim else dtype
        return tl.core.tensor(TensorHandle(out, dtype), ty)

    impl.__name__ = name
    return impl


def _np_dtype(dtype: Any) -> Any:
    import numpy as np

    return {"fp16": np.float16, "bf16": np.float32, "fp32": np.float32, "fp64": np.float64}.get(dtype.name, np.float32)


def _unsupported(name: str) -> Callable[..., Any]:
    def impl(*_: Any, **__: Any) -> Any:
        raise InterpreterUnsupported(f"libdevice.{name} has no interpreter-mode implementation")

    impl.__name__ = name
    return impl


def _patch_libdevice() -> None:
    import inspect

    from triton.language.extra import libdevice

    table = _numpy_table()
    for name, member in inspect.getmembers(libdevice, inspect.isfunction):
        if member.__module__ != libdevice.__name__:
            continue
        if name in table:
            fn, kind = table[name]
            setattr(libdevice, name, _wrap(name, fn, kind))
        else:
            setattr(libdevice, name, _unsupported(name))


def supported_libdevice() -> list[str]:
    """Names of the libdevice functions interpreter mode implements."""
    return sorted(_numpy_table())
