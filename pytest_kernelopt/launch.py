"""Fast launches for candidate kernels on a GPU.

Inductor launches its kernels through a generated launcher that calls the
compiled binary directly; a candidate launches through ``kernel[grid](...)``,
Triton's general path, which re-reads environment knobs, the current device and
stream, and re-checks globals on every call. On the H200 (torch 2.11, triton 3.6)
that cost 22-29 us per launch against Inductor's 11-13 us, enough to make an
unedited dump 20% slower than the compiler on launch-bound models.

:class:`FastJIT` stands in for a ``@triton.jit`` function in the *host* code of a
candidate (its ``run``). It keeps Triton's own argument binder and cache key (so
specialization is exactly Triton's) and, when the compiled kernel is cached,
launches it directly on the stream the compiled model passed in. Anything it does
not recognise falls back to Triton's normal path.
"""

from __future__ import annotations

import types
from typing import Any

# The stream the compiled model passed to the kernel being replaced; set around each
# candidate call by CandidateKernel.run (Inductor launches from one host thread).
_current_stream: Any = None


class FastJIT:
    """Proxy for a JITFunction with a cached-kernel fast path for ``fn[grid](...)``.

    The first launch for a given *launch key* goes through Triton's normal path,
    which specializes and compiles; the compiled kernel is then looked up in
    Triton's cache with Triton's own binder and key and remembered under the launch
    key. The launch key is at least as fine as Triton's specialization: each
    tensor's dtype and 16-byte alignment, every other argument's exact value, and
    the launch keyword arguments. Later launches with the same key skip the binder
    and call the compiled kernel directly.
    """

    def __init__(self, fn: Any):
        import inspect

        from triton import knobs

        self._fn = fn
        self._params = list(inspect.signature(fn.fn).parameters.values())
        self._debug = fn.debug or knobs.runtime.debug
        self._instrumentation = knobs.compilation.instrumentation_mode
        self._enter = knobs.runtime.launch_enter_hook
        self._exit = knobs.runtime.launch_exit_hook
        self._kernels: dict[tuple[Any, ...], Any] = {}
        self._broken = False
        self.why_slow: str | None = None  # why launches take Triton's general path (diagnostics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self._launch(grid, args, kwargs)

    @staticmethod
    def _key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # Launch sites pass keywords in a fixed order, so items() needs no sorting.
        return (*[(a.dtype, a.data_ptr() & 15 == 0) if hasattr(a, "data_ptr") else (type(a), a) for a in args],
                *kwargs.items())

    def _launch(self, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        stream = _current_stream
        if self._broken or stream is None:
            return self._fn[grid](*args, **kwargs)
        key = self._key(args, kwargs)
        entry = self._kernels.get(key)
        if entry is None:
            result = self._fn[grid](*args, **kwargs)  # Triton's path: specializes, compiles, launches
            self._remember(key, args, kwargs, result)
            return result
        kernel, tail = entry
        values = (*args, *tail)
        if callable(grid):
            grid = grid(dict(zip((p.name for p in self._params), values)))
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        meta = kernel.launch_metadata(grid, stream, *values) if self._enter is not None else None
        kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, meta, self._enter, self._exit, *values)
        return kernel

    def _values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        values = list(args)
        for p in self._params[len(args):]:
            values.append(kwargs.get(p.name, p.default))
        return values

    def _remember(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], launched: Any) -> None:
        tail = tuple(self._values(args, kwargs)[len(args):])  # constexprs and defaults: fixed by the key
        if _is_compiled(launched):
            # Triton's launch returns the compiled kernel it ran (triton 3.6-3.7). On the H200
            # (torch 2.11, triton 3.6) re-deriving its cache key from a launch that passes
            # debug=/sanitize_overflow= missed, and every launch paid Triton's general path
            # (44 instead of 12 us), so take the kernel that actually ran.
            self._kernels[key] = (launched, tail)
            return
        try:
            import torch
            from triton.runtime.jit import compute_cache_key

            caches = self._fn.device_caches[torch.cuda.current_device()]
            kernel_cache, kernel_key_cache, binder = caches[0], caches[1], caches[-1]
            # As JITFunction.run does: a launch's own debug= wins over the function's.
            kw = dict(kwargs)
            debug = kw.pop("debug", self._fn.debug) or self._debug
            _, specialization, options = binder(*args, **kw, debug=debug, instrumentation_mode=self._instrumentation)
            kernel = kernel_cache.get(compute_cache_key(kernel_key_cache, specialization, options))
            if _is_compiled(kernel):
                self._kernels[key] = (kernel, tail)
            else:
                self.why_slow = "the compiled kernel was not found in Triton's cache under the computed key"
        except Exception as exc:
            # A Triton version whose internals differ: keep using the normal path.
            self._broken = True
            self.why_slow = f"{type(exc).__name__}: {exc}"


def _is_compiled(kernel: Any) -> bool:
    """A compiled, loaded kernel (not a future of an asynchronous compile)."""
    return (kernel is not None and not hasattr(kernel, "result") and hasattr(kernel, "packed_metadata")
            and hasattr(kernel, "run") and hasattr(kernel, "function"))


def fast_entry_point(module: types.ModuleType, entry: Any) -> Any:
    """``entry`` re-bound to globals in which the module's jit functions are FastJIT proxies.

    Device code keeps the module's own globals (Triton compiles jit functions from
    them), so helpers called from kernels are untouched.
    """
    from triton.runtime.jit import JITFunction

    namespace = dict(vars(module))
    for key, value in vars(module).items():
        if isinstance(value, JITFunction):
            namespace[key] = FastJIT(value)
    fast = types.FunctionType(entry.__code__, namespace, entry.__name__, entry.__defaults__, entry.__closure__)
    fast.__kwdefaults__ = entry.__kwdefaults__
    return fast


def set_stream(stream: Any) -> Any:
    """Make ``stream`` the launch stream; returns the previous one."""
    global _current_stream
    previous, _current_stream = _current_stream, stream
    return previous
