"""Stage 4 (GPU only): the model, and the kernel alone, timed baseline vs candidate.

Paired and interleaved (A B, B A, ...), L2 flushed before each repetition, CUDA
events, warm-up untimed (:mod:`pytest_kernelopt.measure`), as CUDA-graph replays of
the whole model when it can be captured (GPU time: host launch cost drops out),
eager calls otherwise. This stage only measures; the verdict comes from the one
:class:`~.options.SpeedPolicy`, in the parent.
"""

from __future__ import annotations

from typing import Any, Callable

from ..measure.text import interval, speedup_text
from ..records import Timing
from .prepared import Prepared


def describe(t: Timing) -> str:
    return (f"{speedup_text(t.speedup)}, 95% CI {interval(t.ci_low, t.ci_high)}, "
            f"{t.baseline_ms * 1e3:.1f} -> {t.candidate_ms * 1e3:.1f} us over {t.pairs} pairs ({t.method})")


def _steps(prepare_a: Callable[[], None], run_a: Callable[[], object], cleanup_a: Callable[[], None],
           prepare_b: Callable[[], None], run_b: Callable[[], object], cleanup_b: Callable[[], None]) -> tuple[Any, Any, str]:
    """Timing steps for A and B: CUDA-graph replays when both capture, else eager calls."""
    from ..measure.timing import graphed

    a = graphed(prepare_a, run_a, cleanup_a)
    b = graphed(prepare_b, run_b, cleanup_b) if a is not None else None
    if a is not None and b is not None:
        return a, b, "cuda-graph"
    return (prepare_a, run_a, cleanup_a), (prepare_b, run_b, cleanup_b), "eager"


def _timing(est: Any, method: str) -> Timing:
    return Timing(baseline_ms=est.baseline_ms, candidate_ms=est.candidate_ms, speedup=est.speedup,
                  ci_low=est.ci_low, ci_high=est.ci_high, pairs=est.pairs, method=method)


def _stream() -> Any:
    import torch

    return torch.cuda.current_stream().cuda_stream


def first_launch(compiled: Any, name: str, inputs: list[Any]) -> tuple[Any, ...]:
    """The arguments of the first launch of kernel ``name`` in one model run.

    Model inputs are passed as they are (no copy: they may be 8 GiB); arguments the
    kernel reads that the model allocated are copied (their buffers are reused later
    in the run); what it only writes is kept as the buffer itself.
    """
    import torch

    from ..capture.swap import swapped

    handle = compiled.kernel(name)
    infos = handle.info.args
    model_inputs = {x.data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    model_inputs |= {p.data_ptr() for p in [*compiled.model.parameters(), *compiled.model.buffers()]}
    calls: list[tuple[Any, ...]] = []

    class Recorder:
        def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
            if not calls:
                kept = []
                for i, a in enumerate(args):
                    read = i >= len(infos) or infos[i].starts_from_contents
                    written = i >= len(infos) or infos[i].written
                    if isinstance(a, torch.Tensor):
                        ours = a.data_ptr() in model_inputs
                        if (read and not ours) or (written and ours):  # never time writes into inputs
                            a = a.clone()
                    kept.append(a)
                calls.append(tuple(kept))
            return handle.original.run(*args, stream=stream, **kwargs)

    with swapped(compiled, {name: Recorder()}):
        compiled(*inputs)
    return calls[0]


def speed_stage(prepared: Prepared, replacements: dict[str, Any], kernel: str | None, model_seconds: float,
                kernel_seconds: float) -> tuple[Timing, Timing | None]:
    """Model (and kernel) time, baseline vs candidate, paired and interleaved."""
    from ..measure.timing import paired_timings
    from ..capture.swap import restore, swap

    compiled = prepared.compiled
    inputs = prepared.inputs(prepared.seeds[0])

    def nothing() -> None:
        pass

    def swap_in() -> None:
        for name, rep in replacements.items():
            swap(compiled, name, rep)

    def swap_out() -> None:
        for name in replacements:
            restore(compiled, name)

    run_model = lambda: compiled(*inputs)  # noqa: E731
    a, b, method = _steps(nothing, run_model, nothing, swap_in, run_model, swap_out)
    model = _timing(paired_timings(a, b, target_seconds=model_seconds), method)
    del a, b
    kernel_timing = None
    if kernel is not None:
        handle = compiled.kernel(kernel)
        args = first_launch(compiled, kernel, inputs)
        rep = replacements[kernel]
        # The stream is read at call time: under graph capture it is the capture stream.
        a, b, method = _steps(nothing, lambda: handle.original.run(*args, stream=_stream()), nothing,
                              nothing, lambda: rep.run(*args, stream=_stream()), nothing)
        kernel_timing = _timing(paired_timings(a, b, target_seconds=kernel_seconds), method)
    return model, kernel_timing


def base_speed(prepared: Prepared, replacements: dict[str, Any], base: Any, model_seconds: float) -> Timing:
    """The base revision as production ran it (``base``, a :class:`.base.CompiledBase`: baseline) against
    this one with its replacements (candidate), paired and interleaved on the first seed's inputs."""
    from ..measure.timing import paired_timings
    from ..capture.swap import restore, swap

    compiled = prepared.compiled
    seed = prepared.seeds[0]
    base_inputs = base.inputs(seed)
    inputs = prepared.inputs(seed)

    def swap_in() -> None:
        for name, rep in replacements.items():
            swap(compiled, name, rep)

    a, b, method = _steps(lambda: None, lambda: base(*base_inputs), lambda: None,
                          swap_in, lambda: compiled(*inputs), lambda: restore(compiled))
    return _timing(paired_timings(a, b, target_seconds=model_seconds), method)
