"""The keeper: what of a tuning run is stored in ``kernels/``, and with what evidence.

Per kernel (:meth:`Keeper.keep`): the Benchmarker confirms the best few correct
candidates at full length, and the one with the best whole-model speedup among those the
cascade *accepted* (faster than the compiler's kernel beyond noise) is stored, only if it
also beats the active version: its model interval lies entirely above the active
version's, both measured in this session against the same compiled baseline.

Per problem, after its kernels (:meth:`Keeper.finish_model`): the combine pass
(``_combine``) tries the kernels' near misses together: versions too small to clear the
model-level gain alone are stored as a set when the model with all of them clears it.
Then the pin pass (``_pin``) stores, for kernels whose compiler pick varies between
compiles, the fastest configuration the run measured, if the model with the pins is not
slower beyond noise than without them. Then the model's baseline (the
gate's reference) is recorded. On a CPU (interpreter mode) speed is not measured and
nothing is stored. Every store write is atomic.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import StoreError
from ..measure.rule import SpeedPolicy, above, below
from ..measure.text import timing_text
from ..records import KernelInfo, Verdict
from ..store import sha256_text
from .benchmarker import Benchmarker, KernelState, score
from .coder import Coder
from ..runs.records import KernelOutcome, ProblemOutcome
from .ui import UI


class Keeper:
    def __init__(self, store: Any, coder: Coder, bench: Benchmarker, ui: UI, *, device: str, confirm: int, pin: bool,
                 run_left: Callable[[], float], shape: str | None = None, policy: SpeedPolicy | None = None,
                 launch_fixed: frozenset[str] = frozenset()):
        """``confirm``: how many of a kernel's best are confirmed at full length; ``pin``: run the pin pass;
        ``run_left()``: device seconds left to the run (its budget); ``shape``: the declared shape tuned (a
        problem with SHAPES: versions go to ``<kernel>@<shape>/``); ``policy``: the one speed rule, the
        verifier's (its tolerances: ``VerifyOptions.speed``); ``launch_fixed``: fingerprints of the kernels whose
        launch configuration the stored compile setting records (``compile.launch_configs``): never pinned."""
        self.store = store
        self.coder = coder
        self.bench = bench
        self.ui = ui
        self.device = device
        self.n_confirm = confirm
        self.pin = pin
        self.run_left = run_left
        self.shape = shape
        self.policy = policy or SpeedPolicy()
        self.launch_fixed = launch_fixed

    def _folder(self, name: str) -> str:
        """The store folder of kernel ``name`` at the shape tuned."""
        from ..capture.shapes import store_name

        return store_name(name, self.shape)

    def active(self, model: str, info: KernelInfo, ev: Callable[..., Any]) -> Any:
        if self.store is None:
            return None
        try:
            active = self.store.active_file(model, self._folder(info.name))
        except StoreError as exc:
            ev("store", "active-unreadable", error=str(exc))
            self.ui.message(f"{model}/{info.name}: {exc}; tuning from the compiler's kernel")
            return None
        if active is not None and active.manifest.fingerprint != info.fingerprint:
            ev("store", "active-stale", version=active.record.version)
            return None
        return active

    def keep(self, model: str, info: KernelInfo, state: KernelState, result: KernelOutcome,
             active: Any, active_verdict: Verdict | None, ev: Callable[..., Any]) -> str | None:
        """Confirm the best few, store the best accepted one if it beats the active version; the source in force."""
        from ..store import accept_verdict

        active_ok = active is not None and active_verdict is not None and active_verdict.status != "rejected"
        in_force = active.source if active_ok else None
        if self.device != "cuda":
            correct = sum(1 for a in state.attempts if a.status == "correct")
            result.message = (f"speed not measured (interpreter mode): {correct} correct candidate(s), nothing stored "
                              f"as faster")
            return None
        if active is not None and active_verdict is not None and active_verdict.status == "rejected":
            result.message = f"the active v{active.record.version} was rejected ({active_verdict.reason}); "
        origin = {a.sha256: a.origin for a in state.attempts}
        ranked = sorted(((sha, score(v)) for sha, v in state.verdicts.items() if not origin[sha].startswith("active:")),
                        key=lambda sv: sv[1] or 0.0, reverse=True)
        # A candidate the short in-model timing already calls slower than the compiled model (the one
        # speed rule, with its tolerance) is not worth a full-length confirmation (the alone-timing can
        # rank it high, the model cannot accept it): on the H200 such a confirmation cost 9 s of a 40 s
        # budget (2^31-element problem).
        slower = {sha for sha, v in state.verdicts.items() if self.policy.slower(v.model_timing)}
        finalists = [sha for sha, s in ranked if s is not None and s > 1.0 and sha not in slower][: self.n_confirm]
        confirmed = []
        for sha in finalists:
            verdict = self.bench.confirm(state, sha, f"{origin[sha]} (confirm)", ev)
            if verdict.status == "accepted" and verdict.model_timing is not None:
                confirmed.append((sha, verdict))
        if active_ok and confirmed and sha256_text(active.source) in state.sources:
            active_verdict = self.bench.confirm(state, sha256_text(active.source),
                                                f"active:v{active.record.version} (confirm)", ev)
        if not confirmed:
            result.message += (f"nothing faster than the {'active version' if active_ok else 'compiler kernel'} "
                               f"beyond noise ({len(state.attempts)} candidate(s), {len(finalists)} confirmed)")
            return in_force
        sha, best = max(confirmed, key=lambda sv: sv[1].model_timing.speedup)  # type: ignore[union-attr]
        attempt = next(a for a in state.attempts if a.sha256 == sha)
        result.best_origin, result.best_timing, result.best_kernel_timing = attempt.origin, best.model_timing, best.kernel_timing
        result.best_sha256 = sha
        if active_ok and active_verdict is not None and active_verdict.model_timing is not None:
            if not above(best.model_timing, active_verdict.model_timing):  # type: ignore[arg-type]
                result.message += (f"best candidate {best.model_timing.speedup:.3f}x is not faster than the active "  # type: ignore[union-attr]
                                   f"v{active.record.version} ({active_verdict.model_timing.speedup:.3f}x) beyond noise")
                return in_force
        try:
            outcome = accept_verdict(self.store, model, info.name, state.sources[sha], best,
                                     provenance=self._provenance(attempt.origin),
                                     alternatives=self._alternatives(info), shape=self.shape)
        except StoreError as exc:
            result.message += f"not stored: {exc}"
            ev("store", "error", error=str(exc))
            return in_force
        result.message += outcome.message
        ev("store", "stored" if outcome.stored else "not-stored", message=outcome.message,
           version=outcome.record.version if outcome.record else None)
        return state.sources[sha] if self._in_store(model, info.name, result, outcome) else in_force

    def finish_model(self, model: str, outcome: ProblemOutcome,
                     tuned: dict[str, tuple[KernelState, KernelOutcome, str | None]], stored: dict[str, str],
                     ev: Callable[..., Any], stop_reason: str | None = None) -> None:
        """Measure the model with every version in force; try the near misses together; pin; record the baseline."""
        verdict = self.bench.model_check(stored, "stored", ev) if stored else None
        combined = self._combine(model, tuned, stored, verdict, ev, stop_reason)
        if combined is not None:
            verdict = combined
        pinned = self._pin(model, tuned, stored, verdict, ev, stop_reason)
        if pinned is not None:
            verdict = pinned
        if verdict is None:
            return
        outcome.model_timing = verdict.model_timing
        if verdict.status != "rejected" and any(r.stored_version for _, r, _ in tuned.values()):
            self._save_baseline(model, stored, verdict, ev)

    def near_miss(self, state: KernelState) -> str | None:
        """The kernel's best correct candidate that is faster alone beyond noise but missed the model's threshold."""
        origin = {a.sha256: a.origin for a in state.attempts}
        best: tuple[str, float] | None = None
        for sha, v in state.verdicts.items():
            k, m = v.kernel_timing, v.model_timing
            if origin.get(sha, "").startswith("active:") or k is None or m is None:
                continue
            if above(k) and m.speedup > 1.0 and (best is None or m.speedup > best[1]):
                best = (sha, m.speedup)
        return best[0] if best else None

    def _combine(self, model: str, tuned: dict[str, tuple[KernelState, KernelOutcome, str | None]],
                 stored: dict[str, str], base: Verdict | None, ev: Callable[..., Any],
                 stop_reason: str | None) -> Verdict | None:
        """Store near misses of several kernels as a set when, together, they make the model faster.

        Each kernel's version must clear the model-level gain (2%) alone to be stored by its
        own search; a model of several kernels, each a little faster, can gain that much
        only together. A kernel whose compiler version is in force joins with its best
        candidate that was faster alone beyond noise; each joins after a full-length check
        of its own (correct, kernel faster, model not slower), and the set is stored only
        if the model with all of them is faster than the compiler beyond the threshold and,
        when versions are already in force, faster than the model with those beyond noise.
        Returns the set's model verdict when it was stored.
        """
        from ..store import accept_verdict

        if stop_reason or self.coder.stopped:
            return None
        near = {name: (state, result, sha) for name, (state, result, source) in tuned.items()
                if source is None and (sha := self.near_miss(state)) is not None}
        if not near or len(near) + len(stored) < 2:
            return None
        ev("planner", "combine", kernels=sorted(near), in_force=sorted(stored))
        self.ui.message(f"{model}: trying {len(near)} near miss(es) together with {len(stored)} version(s) in force")
        joined: dict[str, tuple[KernelState, KernelOutcome, str, Verdict]] = {}
        for name, (state, result, sha) in near.items():
            if self.run_left() < state.estimate():  # the run's budget; a kernel's own was spent on search
                break
            origin = next(a.origin for a in state.attempts if a.sha256 == sha)
            v = self.bench.confirm(state, sha, f"{origin} (combine)", ev)
            k, m = v.kernel_timing, v.model_timing
            if v.status != "rejected" and k is not None and m is not None and above(k) and m.speedup > 1.0:
                joined[name] = (state, result, sha, v)
            else:
                result.message += f"; near miss {origin} not confirmed at full length"
        if not joined or len(joined) + len(stored) < 2:
            return None
        sources = {**stored, **{name: state.sources[sha] for name, (state, _, sha, _) in joined.items()}}
        verdict = self.bench.model_check(sources, "combined", ev)
        t = verdict.model_timing
        beats = base is None or (base.model_timing is not None and t is not None and above(t, base.model_timing))
        what = "+".join(sorted(sources))
        if verdict.status != "accepted" or t is None or not beats:
            why = verdict.reason or (f"{t.speedup:.3f}x, not beyond the threshold" if t is not None else "not timed")
            if verdict.status == "accepted" and not beats:
                why = "not faster than the versions in force beyond noise"
            for _, result, _, _ in joined.values():
                result.message += f"; together ({what}): {why}; not stored"
            ev("store", "combine-not-stored", kernels=sorted(sources), reason=why)
            return None
        for name, (state, result, sha, own) in joined.items():
            attempt = next(a for a in state.attempts if a.sha256 == sha)
            try:
                stored_outcome = accept_verdict(self.store, model, name, state.sources[sha], own, allow_no_gain=True,
                                                provenance=self._provenance(attempt.origin, "combined"),
                                                combined_timing=t,
                                                combined_with=sorted(set(sources) - {name}),
                                                alternatives=self._alternatives(state.info), shape=self.shape)
            except StoreError as exc:
                result.message += f"; not stored: {exc}"
                ev("store", "error", kernel=name, error=str(exc))
                continue
            ev("store", "stored" if stored_outcome.stored else "not-stored", kernel=name, combined=True,
               message=stored_outcome.message, version=stored_outcome.record.version if stored_outcome.record else None)
            if self._in_store(model, name, result, stored_outcome):
                assert stored_outcome.record is not None  # _in_store says True only with a record
                result.best_origin, result.best_sha256 = attempt.origin, sha
                result.best_timing, result.best_kernel_timing = own.model_timing, own.kernel_timing
                alone = own.model_timing.speedup if own.model_timing is not None else float("nan")
                result.message = (f"alone {alone:.3f}x, under the model gain a version needs alone; stored "
                                  f"v{stored_outcome.record.version} as one of a set: the model with {what} is "
                                  f"{timing_text(t)}")
                stored[name] = state.sources[sha]
        return verdict

    def _pin(self, model: str, tuned: dict[str, tuple[KernelState, KernelOutcome, str | None]],
             stored: dict[str, str], before: Verdict | None, ev: Callable[..., Any],
             stop_reason: str | None) -> Verdict | None:
        """Fix the launch configuration of kernels whose compiler pick varies between compiles.

        Where Inductor compiled several configurations of a kernel, it times them once at
        the first call and keeps the fastest of that one noisy race, so two compiles of one
        model can run different configurations (on the H200, 51 vs 83 us for one pooling
        kernel, 77 vs 88 us for one reduction). A kernel of that kind that nothing beat beyond
        the model gain is pinned to the fastest this run measured: its best candidate that
        was faster alone beyond noise, else the compiler's own pick of this compile (which
        every candidate tried failed to beat). Each is checked at full length alone; then the
        model with every pin and every stored version in force is timed, and the pins are
        stored only if that model is not slower beyond noise than without them (``before``,
        or the compiled model where nothing else is stored): a pin is a loss otherwise (on
        the H200 a group norm's pin passed alone at 1.000x and the model with it ran
        0.997x [0.996, 0.998]). Returns the model's verdict with the pins, None if none stored.
        """
        from ..store import accept_verdict

        if not self.pin or stop_reason or self.coder.stopped:
            return None
        chosen: dict[str, tuple[str, str, Verdict]] = {}
        for name, (state, result, _) in tuned.items():
            configs = state.info.launch.compiled_configs or 0
            if name in stored or configs < 2:
                continue
            if state.info.fingerprint in self.launch_fixed:  # every compile of the setting launches one already
                result.message += ("; not pinned: the stored compile setting records its launch configuration "
                                   "(compile.launch_configs), which every compile of it launches")
                continue
            if self.run_left() < 2 * state.estimate():
                result.message += "; not pinned: the run's budget is spent"
                break
            sha = self.near_miss(state)
            if sha is not None:
                origin = next(a.origin for a in state.attempts if a.sha256 == sha)
                v = self.bench.confirm(state, sha, f"{origin} (pin)", ev)
                k, m = v.kernel_timing, v.model_timing
                if v.status != "rejected" and k is not None and m is not None and above(k) and m.speedup >= 1.0:
                    chosen[name] = (origin, state.sources[sha], v)
                    continue
            compiler = sha256_text(state.original)
            state.sources[compiler] = state.original
            v = self.bench.confirm(state, compiler, "compiler (pin)", ev)
            m = v.model_timing
            if v.status != "rejected" and m is not None and not below(m):
                chosen[name] = ("compiler", state.original, v)
            else:
                result.message += "; not pinned: no configuration measured at least as fast as the compiler's pick"
        if not chosen:
            return None
        together = self.bench.model_check({**stored, **{n: text for n, (_, text, _) in chosen.items()}},
                                          "stored and pinned", ev)
        t, without = together.model_timing, before.model_timing if before is not None else None
        # No tolerance here (``below``, not the gate's ``slower``): a pin claims no gain, so one that
        # makes the model measurably slower is a loss, however small.
        if together.status == "rejected" or t is None or below(t, without if without is not None else 1.0):
            measured = timing_text(t) if t is not None else together.reason
            against = (f"{timing_text(without)} without them"
                       if without is not None else "the compiled model")
            for name in chosen:
                tuned[name][1].message += (f"; not pinned: the model with the pinned version(s) measured {measured}, "
                                           f"slower than {against}")
            ev("benchmarker", "pins-not-stored", kernels=sorted(chosen), reason=measured)
            return None
        pinned = False
        for name, (origin, text, verdict) in chosen.items():
            state, result, _ = tuned[name]
            configs = state.info.launch.compiled_configs or 0
            try:
                out = accept_verdict(self.store, model, name, text, verdict, allow_no_gain=True,
                                     provenance=self._provenance(origin, "pinned"),
                                     alternatives=self._alternatives(state.info), shape=self.shape)
            except StoreError as exc:
                result.message += f"; not pinned: {exc}"
                ev("store", "error", kernel=name, error=str(exc))
                continue
            ev("store", "pinned" if out.stored else "not-stored", kernel=name, origin=origin, message=out.message,
               version=out.record.version if out.record else None)
            if not self._in_store(model, name, result, out):
                continue
            timing = verdict.model_timing
            result.pinned = True
            result.best_origin, result.best_sha256 = origin, sha256_text(text)
            result.best_timing, result.best_kernel_timing = timing, verdict.kernel_timing
            result.message += (f"; pinned v{out.record.version} ({origin}, {timing.speedup:.3f}x): Inductor picks "  # type: ignore[union-attr]
                               f"among {configs} launch configurations by timing them at each compile, so its pick varies")
            stored[name] = text
            pinned = True
        return together if pinned else None

    def _provenance(self, origin: str, how: str | None = None) -> Any:
        """Who proposed a version this run stores: the candidate's origin, the backend, its spend so far."""
        from ..store import Provenance

        spend = self.coder.spend
        return Provenance(proposed_by=f"kernelopt tune ({origin}{', ' + how if how else ''})", agent=origin,
                          backend=self.coder.name, llm_model=self.coder.model,
                          cost_usd=round(spend.usd, 4) if spend.usd else None,
                          tokens=(spend.input_tokens + spend.output_tokens) or None)

    def _alternatives(self, info: Any) -> list[tuple[str, str]]:
        """(variant, source) of the harvested Inductor compiles of ``info``: what a stored version's recipe
        may start from (recipe.derive_recipe)."""
        from .harvest import fitting

        harvested = getattr(self.coder, "harvested", None)
        return [(alt.variant, alt.source) for alt in fitting(info, getattr(harvested, "kernels", []))]

    def _in_store(self, model: str, name: str, result: KernelOutcome, outcome: Any) -> bool:
        """Record a stored (or already active) version on the kernel's outcome; whether there is one."""
        if outcome.record is None or not (outcome.stored or outcome.active):
            return False
        result.stored_version = outcome.record.version
        folder = self.store.kernel_dir(model, self._folder(name))
        result.stored_file = str((folder / outcome.record.file).relative_to(self.store.root))
        result.stored_recipe = outcome.record.recipe.describe() if outcome.record.recipe is not None else None
        return True

    def _save_baseline(self, model: str, stored: dict[str, str], verdict: Verdict, ev: Callable[..., Any]) -> None:
        """kernels/<model>/model.json: the speedup of the model with every version in force (the gate's reference)."""
        from datetime import datetime, timezone

        from ..store import model_baseline

        if verdict.environment is None:
            return
        try:
            versions = {}
            for name in stored:
                active = self.store.active_file(model, self._folder(name))
                if active is not None:
                    versions[self._folder(name)] = active.record.version
            self.store.save_baseline(model, model_baseline(verdict, versions, datetime.now(timezone.utc)), self.shape)
        except StoreError as exc:
            ev("store", "error", error=f"model baseline not recorded: {exc}")
