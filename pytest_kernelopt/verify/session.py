"""The parent's side of the verifier: a problem opened once, candidates judged one after another.

A :class:`VerifySession` opens a problem once (an isolated worker starts, compiles
the model, draws the inputs of every seed, computes the compiled baseline and the
float64 reference) and then judges many candidates against it, running the stages of
:data:`.stages.STAGES` in order: the parent's (the static check), then the worker's.

Each candidate is read once here, hashed, statically checked (stage 1: parsed, never
run, in a fresh short-lived process of its own, never the worker that earlier
candidates ran in, under a time and an address-space limit) and sent as those exact
bytes to the worker for the kernel, model and speed stages. A candidate file is at
most :data:`CANDIDATE_BYTES`; whatever text comes back from a candidate's run is cut
short (:func:`.worker.clip`). A candidate that crashes the worker, hangs past the
time limit or corrupts the CUDA context is rejected, and the session starts a fresh
worker for the next one. The verifier's own failures (out of memory, a problem
that does not compile) raise :class:`~pytest_kernelopt.errors.KerneloptError`
subclasses: they are never blamed on a candidate.

Nothing here imports pydantic at load time: the static checker's process imports this
package without it (see worker.serve_static).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import BudgetSpent, KerneloptError, ProblemError, UsageError, VerifierError
from .limits import CANDIDATE_BYTES, size_problem
from .limits import human_bytes as _human
from .limits import oversized as _oversized

if TYPE_CHECKING:
    from ..records import StageResult, Verdict
    from .options import VerifyOptions
    from .protocol import CandidateSource, CheckRequest, Failure, Opened, StageDone

__all__ = ["GIB", "STATIC_MEMORY", "STATIC_SECONDS", "VerifySession", "read_candidate", "source_of", "verify"]

GIB = float(1 << 30)
STATIC_SECONDS = 20.0         # stage 1's wall-clock bound (or the check's --timeout, if smaller)
STATIC_MEMORY = 1 << 30       # its process's address space (RLIMIT_AS)


def read_candidate(path: str | Path) -> CandidateSource:
    """Read a candidate file once; what is hashed here is what runs and what is stored."""
    from .protocol import CandidateSource

    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(CANDIDATE_BYTES + 1)  # never more: a file past the cap is not read whole
            if len(data) > CANDIDATE_BYTES:
                raise UsageError(_oversized(str(path), max(len(data), _size_of(f))))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read candidate ({exc.strerror or exc})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: candidate is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return CandidateSource(label=str(path), source=text, sha256=hashlib.sha256(data).hexdigest())


def source_of(text: str, label: str) -> CandidateSource:
    """A candidate held in memory (tuning's proposals, the store's versions). Its size is
    checked by stage 1, which rejects a text over :data:`CANDIDATE_BYTES` before parsing it."""
    from .protocol import CandidateSource

    return CandidateSource(label=label, source=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def _size_of(f: Any) -> int:
    import os

    return os.fstat(f.fileno()).st_size


class VerifySession:
    """A problem compiled once in an isolated worker; candidates verified one after another."""

    def __init__(self, problem: str | Path, device: str, options: VerifyOptions | None = None, *,
                 progress: Callable[[str], None] | None = None, variant: str | None = None,
                 shape: str | None = None, worker: Any = None,
                 launch_configs: dict[str, dict[str, int]] | None = None):
        """``variant``: the compile settings the model is compiled under (a name from
        ``capture/variants.py``, the model's ``model.json`` choice; None: Inductor's defaults);
        ``launch_configs``: that choice's launch configurations (``KernelStore.launch_configs``), each listed
        kernel launched at its point (capture/launch_configs.py).
        ``shape``: the declared shape (the problem's SHAPES) it is opened at; None: its first, if any.
        ``worker``: a :class:`~.worker.WorkerProcess` started ahead (it imports torch and Inductor while the
        caller loads the problem), used for the first opening if still alive; the session closes it."""
        self.problem = Path(problem).resolve()
        from ..capture.variants import unknown_variant
        from .options import VerifyOptions

        if variant is not None and unknown_variant(variant):
            raise UsageError(f"{self.problem}: {unknown_variant(variant)}")
        self.variant = variant
        self.launch_configs = launch_configs if variant is not None else None
        self.shape = shape
        self.device = device
        self.options = options or VerifyOptions()
        self.progress = progress or (lambda _: None)
        self._worker: Any = None
        self._spare: Any = worker
        self._opened: Opened | None = None
        self._checker: Any = None  # stage 1's next process, started ahead (see static_problems)
        self._used: Any = None     # the one that served the last check, closed later
        self.restarts = 0
        self.checks = 0  # checks sent to a worker so far (an exact reproduction derives each one's draws from it)
        self._draw_seeds()

    def _draw_seeds(self) -> None:
        """The seeds a worker prepares: drawn from the OS for each worker, so a restarted one never
        replays what an earlier one checked (unless a human asked for reproduction: ``options``)."""
        self.session_seeds = self.options.session_seeds()
        self.seed = self.session_seeds.root
        self.seeds = list(self.session_seeds.seeds)

    # --- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> VerifySession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        if self._worker is not None:
            self._worker.close()
            self._worker = None
        for checker in (self._checker, self._used):
            if checker is not None:
                checker.close()
        self._checker = self._used = None

    def open(self, budget_s: float | None = None) -> Opened:
        """Start the worker and prepare the problem (again, after a candidate killed the last worker).
        ``budget_s``: the caller's time left (tune's ``--run-budget-s``), where sooner than ``open_timeout``: an
        opening still running then is stopped, :class:`~pytest_kernelopt.errors.BudgetSpent` (never the problem's
        error)."""
        if self._worker is not None and self._worker.alive and self._opened is not None:
            return self._opened
        if self._worker is not None:
            self._worker.close()
            self.restarts += 1
            self._draw_seeds()  # new seeds, references computed for them: nothing of the last worker's replays
        at = f" at shape {self.shape}" if self.shape else ""
        self.progress(f"opening {self.problem.name}{at}: starting the worker, compiling, preparing "
                      f"{len(self.seeds)} seed(s)")
        try:
            return self._open_worker(budget_s)
        except VerifierError as exc:
            from . import sandbox

            # The sandbox has not been tried with every driver: if CUDA cannot start inside
            # the namespaces (before any candidate runs), say so and fall back, once.
            if self.device != "cuda" or not sandbox.isolation().namespaces or not _looks_like_cuda(str(exc)):
                raise
            sandbox.disable(f"CUDA failed inside the namespaces: {str(exc)[-200:]}")
            self.progress("the GPU is not usable inside the worker's namespaces; retrying without them")
            return self._open_worker(budget_s)

    def _open_worker(self, budget_s: float | None = None) -> Opened:
        from . import sandbox
        from .protocol import Failure, Opened, OpenRequest
        from .worker import OPENED_BYTES, WorkerExited, WorkerProcess

        spare, self._spare = self._spare, None
        # One started ahead is used if it still runs, in the isolation workers get now (CUDA failing inside the
        # namespaces turns them off for the workers started after).
        if spare is not None and (not spare.alive or spare.sandbox is not sandbox.isolation()):
            spare.close()
            spare = None
        self._worker = worker = spare if spare is not None else WorkerProcess()
        if self._checker is None:
            self._checker = _static_checker()  # starts while the problem compiles
        budgeted = budget_s is not None and budget_s < self.options.open_timeout
        limit = max(1.0, budget_s) if budget_s is not None and budgeted else self.options.open_timeout
        started = time.monotonic()
        try:
            worker.send(OpenRequest(problem=str(self.problem), device=self.device, seeds=self.seeds,
                                    variant=self.variant, launch_configs=self.launch_configs, shape=self.shape))
            reply = worker.receive(limit, limit=OPENED_BYTES)
        except WorkerExited as exc:
            self.close()
            raise VerifierError(f"{self.problem}: the verifier's worker failed while opening the problem ({exc})") from exc
        if reply is None and budgeted:
            self.close()
            raise BudgetSpent(f"stopped {time.monotonic() - started:.0f} s into opening the problem (compiling it, "
                              f"drawing inputs, computing the float64 reference): the budget it was given ran out")
        if reply is None:
            self.close()
            raise VerifierError(f"{self.problem}: opening the problem (compiling it, drawing inputs, computing the "
                                f"float64 reference) took longer than {limit:g} s; no candidate ran")
        if isinstance(reply, Failure):
            self.close()
            error = _failure(reply, self.problem)
            if reply.kind == "internal" or (reply.kind == "problem" and _looks_like_cuda(reply.message)):
                raise VerifierError(str(error)) from error
            raise error
        assert isinstance(reply, Opened)
        self._opened = reply
        if reply.launches_refused:
            self.progress(f"{self.problem.name}: {len(reply.launches_refused)} of the stored compile setting's launch "
                          f"configurations not used (those kernels race as Inductor does): "
                          f"{'; '.join(reply.launches_refused[:3])}")
        return reply

    @property
    def opened(self) -> Opened:
        return self._opened or self.open()

    @property
    def isolation(self) -> str | None:
        """What contains the current worker (None before it starts)."""
        return self._worker.isolation if self._worker is not None else None

    @property
    def kernels(self) -> dict[str, Any]:
        return {k.name: k for k in self.opened.kernels}

    def kernel_info(self, name: str) -> Any:
        kernels = self.kernels
        if name not in kernels:
            known = ", ".join(kernels) or "none"
            at = f" at shape {self.shape}" if self.shape else ""
            other = ("; each declared shape compiles kernels of its own (`kernelopt kernels PROBLEM.py` lists every "
                     "shape's): is it another shape's?") if self.shape else ""
            raise UsageError(f"{self.problem}: no Triton kernel named {name!r}{at} (kernels{at}: {known}){other}")
        return kernels[name]

    def profile(self, runs: int = 20) -> Any:
        """Per kernel device time, registers and spills of the compiled model (no candidate runs)."""
        from .protocol import Failure, Profiled, ProfileRequest
        from .worker import WorkerExited

        self.open()
        try:
            self._worker.send(ProfileRequest(runs=runs))
            reply = self._worker.receive(self.options.open_timeout)
        except WorkerExited as exc:
            self.close()
            raise VerifierError(f"{self.problem}: the verifier's worker failed while profiling ({exc})") from exc
        if reply is None:
            self.close()
            raise VerifierError(f"{self.problem}: profiling took longer than {self.options.open_timeout:g} s")
        if isinstance(reply, Failure):
            raise _failure(reply, self.problem)
        assert isinstance(reply, Profiled)
        return reply

    # --- checks --------------------------------------------------------------------

    def verify(self, kernel: str, candidate: str | Path | CandidateSource) -> Verdict:
        """The whole cascade for one candidate of ``kernel``."""
        from .protocol import CandidateSource

        source = candidate if isinstance(candidate, CandidateSource) else read_candidate(candidate)
        return self._check(kernel, {kernel: source}, None)

    def verify_model(self, replacements: dict[str, str | Path | CandidateSource],
                     base_problem: str | Path | None = None, base_kernels: str | Path | None = None) -> Verdict:
        """The model with every replacement swapped in (the gate's model item): model and speed stages.

        ``base_problem`` (and ``base_kernels``, the kernels_dir holding that revision's ``<model>/``
        folder; None: nothing committed there): the base revision, compiled as production ran it
        and timed side by side; ``verdict.base_run`` says what ran there, or why it could not."""
        from .protocol import CandidateSource

        sources = {k: v if isinstance(v, CandidateSource) else read_candidate(v) for k, v in replacements.items()}
        return self._check(None, sources, None if base_problem is None else str(base_problem),
                           base_kernels=None if base_kernels is None else str(base_kernels))

    def verify_compile(self, variant: str, launch_configs: dict[str, dict[str, int]] | None = None,
                       budget_s: float | None = None) -> Verdict:
        """The model compiled under ``variant`` against the default compile (model and speed stages):
        the session must be open under the defaults or under ``variant`` itself. ``launch_configs``: in a session
        under the defaults, the variant's compile launches these (capture/launch_configs.py) instead of racing.
        ``budget_s``: what is left of the caller's run budget; a check still running then is stopped and raises
        :class:`~pytest_kernelopt.errors.BudgetSpent` (never a verdict on the setting). A setting with GEMM
        templates takes minutes to compile (243 s for a GPT-2 block's training step on an H100)."""
        from ..capture.variants import unknown_variant

        why = unknown_variant(variant)
        if why:
            raise UsageError(why)
        if self.variant not in (None, variant):
            raise UsageError(f"{self.problem}: this session compiles the model as {self.variant!r}; it cannot "
                             f"check {variant!r} against the default compile")
        return self._check(None, {}, None, compile_variant=variant, compile_launch_configs=launch_configs,
                           budget_s=budget_s)

    def _check(self, kernel: str | None, sources: dict[str, CandidateSource], base_problem: str | None,
               compile_variant: str | None = None, base_kernels: str | None = None,
               compile_launch_configs: dict[str, dict[str, int]] | None = None,
               budget_s: float | None = None) -> Verdict:
        """The stages of :data:`.stages.STAGES` for one check: the parent's, then the worker's; the verdict."""
        from .protocol import CheckRequest

        started = time.monotonic()
        verdict = self._new_verdict(kernel, sources, compile_variant)
        rows = self._in_parent(sources, compile_variant)
        if any(row.passed is False for row in rows):
            self._next_checker()
            return self._finish(verdict, rows, started, setting=compile_variant is not None)
        request = CheckRequest(
            kernel=kernel, replacements=sources, allow_reduced_precision=self.options.allow_reduced_precision,
            error_factor=self.options.error_factor, measure_speed=self.options.measure_speed,
            model_seconds=self.options.model_seconds, kernel_seconds=self.options.kernel_seconds,
            base_problem=base_problem, base_kernels=base_kernels, compile_variant=compile_variant,
            compile_launch_configs=compile_launch_configs,
            entropy=verdict.check_seed,
        )
        return self._finish(verdict, rows + self._in_worker(verdict, request, budget_s), started,
                            setting=compile_variant is not None)

    def _new_verdict(self, kernel: str | None, sources: dict[str, CandidateSource],
                     compile_variant: str | None) -> Verdict:
        """The verdict before any stage ran: what is checked, under which seeds, on what (rejected until judged)."""
        from ..records import Verdict

        opened = self.open()
        for name in sources:
            self.kernel_info(name)  # unknown names are bad input, whatever the file
        label = kernel or "+".join(sources) or (f"compile:{compile_variant}" if compile_variant else "compiler")
        only = sources[kernel] if kernel else None
        verdict = Verdict(
            model=self.problem.stem, kernel=label,
            fingerprint=self.kernel_info(kernel).fingerprint if kernel else None,
            candidate=only.label if only else (f"the model compiled as {compile_variant}" if compile_variant
                                               else "committed kernels"),
            candidate_sha256=only.sha256 if only else "",
            status="rejected", seed=self.seed, seeds=self.seeds, pinned_seed=self.session_seeds.pinned,
            check_seed=self.options.check_entropy(self.session_seeds, self.checks), environment=opened.environment,
            reference=opened.reference, reference_note=opened.reference_note,
            eager_peak_gib=_gib(opened.eager_peak_bytes), peak_gib=_gib(opened.peak_bytes),
            isolation=self._worker.isolation,
        )
        if only is not None:
            verdict.kernel_info = self.kernel_info(kernel)  # type: ignore[arg-type]
            verdict.verified_source = only.source
        return verdict

    def _in_parent(self, sources: dict[str, CandidateSource], compile_variant: str | None) -> list[StageResult]:
        """The parent's stages (the static check), in order, up to the first that fails."""
        from ..records import StageResult
        from . import stages
        from .prepared import StageFailure
        from .worker import clip

        check = stages.ParentCheck(session=self, sources=sources, compile_variant=compile_variant)
        rows: list[StageResult] = []
        for stage in stages.in_parent():
            t0 = time.monotonic()
            try:
                detail, _ = stage.run(check)
            except StageFailure as failure:
                rows.append(StageResult(name=stage.name, passed=False, detail=clip(failure.detail),
                                        seconds=time.monotonic() - t0))
                break
            rows.append(StageResult(name=stage.name, passed=True, seconds=time.monotonic() - t0, detail=detail))
        return rows

    def _in_worker(self, verdict: Verdict, request: CheckRequest, budget_s: float | None = None) -> list[StageResult]:
        """The worker's stages: their rows as the worker sends them, merged into ``verdict``; a row of the stage
        it was in when it timed out, died or wrote too much (that worker is replaced). Stopped at ``budget_s``
        (the caller's budget, where it is sooner than the check's limit): BudgetSpent, and the worker replaced."""
        from ..records import StageResult
        from . import stages
        from .protocol import CheckDone, Failure, StageDone, StageStarted
        from .worker import FOLDER_BYTES, WorkerExited, clip

        rows: list[StageResult] = []
        self.checks += 1
        limit = self.options.timeout
        cap = limit if budget_s is None else max(0.0, min(limit, budget_s))
        budgeted = cap < limit
        deadline = time.monotonic() + cap
        first = next(s for s in stages.in_worker() if s.applies(request, self.opened.device))
        current, stage_t0 = first.name, time.monotonic()
        worker = self._worker
        try:
            worker.send(request)
            self._next_checker()  # while the worker runs the candidate
            while True:
                reply = worker.receive(max(0.0, deadline - time.monotonic()))
                if reply is None:
                    worker.kill()
                    if budgeted:
                        raise BudgetSpent(f"stopped {time.monotonic() - stage_t0:.0f} s into its {current} stage: "
                                          f"the run's budget (--run-budget-s) ran out")
                    elapsed = time.monotonic() - stage_t0
                    rows.append(StageResult(name=current, passed=False, seconds=elapsed,
                                            detail=f"timed out after {limit:g} s (the candidate's checks' limit)"))
                    break
                if isinstance(reply, StageStarted):
                    current, stage_t0 = reply.stage, time.monotonic()
                elif isinstance(reply, StageDone):
                    reply.result.detail = clip(reply.result.detail)  # it may quote the candidate
                    rows.append(reply.result)
                    self._merge(verdict, reply)
                elif isinstance(reply, CheckDone):
                    verdict.peak_gib = _gib(reply.peak_bytes) or verdict.peak_gib
                    verdict.base_run = _clipped_base(reply.base)
                    written = worker.folder_bytes()
                    if written > FOLDER_BYTES:  # its printed output, or files the candidate wrote
                        worker.kill()
                        rows.append(StageResult(name=current, passed=False, seconds=time.monotonic() - stage_t0,
                                                detail=f"the worker wrote {_human(written)} into its folder "
                                                       f"(limit {_human(FOLDER_BYTES)}); this worker is replaced"))
                    break
                elif isinstance(reply, Failure):
                    if reply.kind == "memory":
                        raise _failure(reply, self.problem)
                    worker.kill()
                    raise _failure(reply, self.problem)
        except WorkerExited as exc:
            rows.append(StageResult(name=current, passed=False, seconds=time.monotonic() - stage_t0,
                                    detail=clip(str(exc))))
        return rows

    def static_problems(self, sources: dict[str, CandidateSource]) -> list[str]:
        """Stage 1's problems, each prefixed with its file's name.

        The checker runs in a fresh process (:data:`.worker.STATIC_CHECKER`), never the
        worker, which has run earlier candidates' code: bounded by :data:`STATIC_SECONDS`
        (or the check's timeout) and :data:`STATIC_MEMORY`. Its timeout or crash rejects.
        Each process serves one check. Starting one takes ~90 ms (in the sandbox) and
        closing one ~50 ms, so both happen while the worker runs the previous candidate
        (:meth:`_next_checker`): the stage itself then costs a few ms more than in-process.
        """
        from .protocol import STATIC_REPLY, StaticRequest
        from .worker import WorkerExited

        oversized = [p for src in sources.values() if (p := size_problem(src.source, Path(src.label).name))]
        if oversized or not sources:
            return oversized
        limit = min(self.options.timeout, STATIC_SECONDS)
        deadline = time.monotonic() + limit
        problems: list[str] = []
        checker, self._checker = self._checker, None
        if checker is None or not checker.alive:  # none yet, or the spare died waiting
            if checker is not None:
                checker.close()
            checker = _static_checker()
        try:
            for name, src in sources.items():
                file = Path(src.label).name
                entry = [a.name for a in self.kernel_info(name).args]
                try:
                    checker.send(StaticRequest(source=src.source, entry_args=entry), timeout=limit)
                    reply = checker.receive(max(0.0, deadline - time.monotonic()), adapter=STATIC_REPLY)
                except WorkerExited as exc:
                    checker.kill()
                    return [f"{file}: the static check failed ({exc})"]
                if reply is None:
                    checker.kill()
                    return [f"{file}: the static check took longer than {limit:g} s (its bound); stopped"]
                problems += [f"{file}: {p}" for p in reply.problems]
                if reply.more:
                    problems.append(f"{file}: and {reply.more} more problem(s)")
        finally:
            if self._used is not None:  # the last check ended before it was closed
                self._used.close()
            self._used = checker
        return problems

    def _next_checker(self) -> None:
        """Close the static checker that served the last check; start the next one."""
        used, self._used = self._used, None
        if used is not None:
            used.close()
        if self._checker is None:
            self._checker = _static_checker()

    @staticmethod
    def _merge(verdict: Verdict, done: StageDone) -> None:
        """A worker stage's figures into the verdict: the model stage's error rows keep the kernel stage's columns."""
        if done.result.name == "kernel":
            verdict.errors = list(done.errors)
        elif done.errors:
            kernel_rows = {r.seed: r for r in verdict.errors}
            merged = []
            for row in done.errors:
                k = kernel_rows.get(row.seed)
                if k is not None:
                    row = row.model_copy(update={"kernel_max_abs": k.kernel_max_abs, "kernel_max_rel": k.kernel_max_rel,
                                                  "kernel_ratio": k.kernel_ratio})
                merged.append(row)
            verdict.errors = merged
        for key in ("model_timing", "kernel_timing", "base_timing", "launches", "launch_configs"):
            value = getattr(done, key)
            if value is not None:
                setattr(verdict, key, value)
        if done.model_timing is not None:
            verdict.speed_measured = True

    def _finish(self, verdict: Verdict, rows: list[StageResult], started: float, setting: bool = False) -> Verdict:
        """The verdict from its rows: rejected at the first failed row, else the speed policy judges the timings
        (``setting``: a compile setting's check, judged as :meth:`SpeedPolicy.for_settings` says)."""
        from ..records import StageResult
        from . import stages
        from .worker import clip

        policy = self.options.speed
        if setting:
            policy = policy.for_settings()
        measuring = next(s.name for s in stages.STAGES if s.measures)  # speed: its figures are judged here
        failed = next((row for row in rows if row.passed is False), None)
        if failed is not None:
            verdict.status, verdict.reason = "rejected", clip(f"{failed.name}: {failed.detail}")
        elif verdict.model_timing is not None:
            faster, why = policy.judge(verdict.model_timing)
            speed = next(row for row in rows if row.name == measuring)
            speed.passed = faster
            if why:
                speed.detail = f"{speed.detail}; {why}"
            verdict.status = "accepted" if faster else "correct"
        else:
            why = "interpreter mode" if self.device != "cuda" else "speed measurement switched off"
            rows.append(StageResult(name=measuring, passed=None, detail=f"not measured: {why}"))
            verdict.status = "correct"
        verdict.stages = rows
        verdict.wall_seconds = time.monotonic() - started
        return verdict


def _static_checker() -> Any:
    from .worker import STATIC_CHECKER, WorkerProcess

    return WorkerProcess(STATIC_CHECKER, memory=0, address_space=STATIC_MEMORY, file_size=1 << 20)


def _looks_like_cuda(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in ("cuda", "nvidia", "driver", "no gpu", "device-side"))


def _gib(value: int | None) -> float | None:
    return None if value is None else round(value / GIB, 3)


def _clipped_base(base: Any) -> Any:
    """The worker's account of the base revision, its free text capped (the worker ran candidate code)."""
    from .worker import clip

    if base is None:
        return None
    return base.model_copy(update={
        "failure": None if base.failure is None else clip(base.failure),
        "kernels": [k.model_copy(update={"name": k.name[:200], "why": None if k.why is None else k.why[:200]})
                    for k in base.kernels[:1000]]})


def _failure(reply: Failure, problem: Path) -> KerneloptError:
    from .worker import clip

    reply = reply.model_copy(update={"message": clip(reply.message)})
    if reply.kind == "usage":
        return UsageError(reply.message)
    if reply.kind == "problem":
        return ProblemError(problem, reply.message)
    if reply.kind == "memory":
        return VerifierError(f"{problem}: {reply.message}")
    return VerifierError(f"{problem}: the verifier failed: {reply.message}")


def verify(problem: str | Path, kernel: str, candidate: str | Path | CandidateSource, device: str,
           options: VerifyOptions | None = None) -> Verdict:
    """One candidate in a session of its own (tests and one-off calls)."""
    with VerifySession(problem, device, options) as session:
        return session.verify(kernel, candidate)
