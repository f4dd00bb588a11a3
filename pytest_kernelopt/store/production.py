"""Tuned kernels in production: compile with Inductor, then run the committed versions.

A ``torch.compile`` backend that compiles each graph with Inductor exactly as the
default backend does and then, for every Triton kernel of the graph, looks up the
active version committed under ``kernels/<model>/<kernel>/``. A version is used
only when its manifest's fingerprint equals the fingerprint of the kernel Inductor
generated now (the same rule as the gate) and the manifest records a passing
verification of the version's bytes against that same compiler kernel (what
``accept`` writes from the verdict): it replaces the kernel global of the
graph's wrapper module, as :mod:`pytest_kernelopt.capture.swap` does in the verifier.
The fingerprint covers what the kernel was compiled for (argument dtypes, constants, device:
``capture.kernel_fingerprint``), and the version runs only at the launches its evidence records
(:class:`VerifiedLaunches`: the shapes, strides and dtypes the kernel stage checked it at); at any
other launch the compiler's kernel runs, said once. ``model.json``'s compile setting likewise
applies only to graphs whose inputs it was verified at.

Nothing is verified, timed or tuned here: that is the gate's job, done before the
files were committed. What is checked at load is cheap and local: the sha256
recorded at accept, the static check of the candidate language, and that the file
loads. Whatever fails (a stale kernel, a version with no recorded verification at this
fingerprint, a missing or edited file, a file outside the language, one that does not load) leaves the compiler's kernel in place with one
:class:`KerneloptWarning` naming the model, the kernel, the file and the cause;
a tuned kernel never makes a model fail to compile. A version whose evidence records the other pass
(``training``: verified in a training step, looked up by an inference compile, a ``no_grad`` validation
pass, or the reverse) is not stale when its compiler kernel differs (a training forward saves what its
backward reads): the compiler's kernel runs, said in the record (the start-up line, :func:`status`) and once
at INFO, not warned.

Kernels are named as capture names them (the wrapper's kernel global, with ``__bwd`` in a training
step's backward graph; from the second graph on, a name already used by an earlier graph gets
``__g<graph>``), so
graphs are numbered in the order Dynamo first compiles their frames; a recompile
(a new input shape with ``dynamic=False``) keeps its frame's number. Training compiles (a forward
graph with its backward) are numbered apart from inference compiles, as capture numbers a training
problem, which compiles only its step: a model called under ``no_grad`` first (a validation pass
before training) gets the same training names as one that only trains.

This module imports neither the agents, nor git, nor the verifier's worker.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from ..errors import UsageError
from .kernel_store import KernelStore

__all__ = ["BACKEND_NAME", "KerneloptBackend", "KerneloptWarning", "ProductionKernel", "ProductionStatus",
           "VerifiedLaunches", "backend", "compile", "kernelopt_backend", "status"]

BACKEND_NAME = "kernelopt"
# Why a committed kernel does not run in a graph compiled with symbolic sizes, and the two ways out.
DYNAMIC_SHAPES = (
    "dynamic shapes: Dynamo compiled this graph with symbolic sizes (torch.compile does so once a second input "
    "shape arrives, unless dynamic=False, and the new graph then serves every shape, the first one included), "
    "and no committed version was verified for the kernel that compile generates; compile with dynamic=False "
    "to run each declared shape's version, or mark the sizes that vary dynamic in the problem's get_inputs() "
    "(torch._dynamo.mark_dynamic), so that tune and the gate verify the dynamic-shape kernel, and compile with "
    "dynamic=True")

# Keys of torch.compile(..., backend="kernelopt", options={...}) read by the backend;
# every other key is an Inductor option.
_OWN_OPTIONS = ("model", "kernels_dir", "quiet")

log = logging.getLogger(__name__)


class KerneloptWarning(UserWarning):
    """A committed kernel was not used; the compiler's kernel runs instead."""


# ``ProductionKernel.why`` where the store holds nothing for the kernel (the start-up line counts these).
NOTHING_COMMITTED = "nothing committed"


@dataclass
class ProductionKernel:
    """One Triton kernel of a compiled graph and what runs for it."""

    name: str
    graph: int
    # Of the compiler's kernel; computed only where something is committed for the kernel.
    fingerprint: str | None
    runs: Literal["committed", "compiler"]
    version: int | None = None
    file: Path | None = None
    # Why the compiler's kernel runs although something is committed (None: nothing committed).
    reason: str | None = None
    # The same in a few words, for the start-up line: "nothing committed", "no active version",
    # "stale", "not verified", "fails the static check", "does not load", "edited file", ...
    why: str | None = None
    module: ModuleType | None = field(default=None, repr=False)
    attr: str = ""
    # The store folder of the version that runs: ``name``, or ``name@<shape>`` for a problem with SHAPES.
    folder: str | None = None
    # Compiled as part of a training step (forward with backward): graphs numbered apart from inference ones.
    training: bool = False


class KerneloptBackend:
    """A ``torch.compile`` backend for one model: Inductor, with the committed kernels swapped in.

    ``torch.compile(model, backend=KerneloptBackend("softmax_rows"), mode=..., options=...)``:
    ``mode`` and ``options`` are Inductor's (torch passes them to the backend).
    The compile settings recorded in the model's ``model.json`` (``compile``: a name from
    ``capture/variants.py``, chosen by ``kernelopt tune``) apply first, under ``mode`` and ``options``,
    to the graphs whose inputs they were verified at.
    ``kernels`` lists every Triton kernel compiled so far and what runs for it;
    ``startup_seconds`` is the time spent beyond Inductor's compile (fingerprints,
    reading and hashing files, the static check, loading). Each compiled graph prints one
    line on stderr saying which of its kernels come from the store (see :func:`status`);
    ``quiet=True`` (or ``KERNELOPT_QUIET=1``) keeps it silent.
    """

    def __init__(self, model: str, kernels_dir: str | Path | None = None, *, mode: str | None = None,
                 options: dict[str, Any] | None = None, quiet: bool = False):
        if not isinstance(model, str) or not model:
            raise UsageError(f"kernelopt backend: the model id must be a non-empty string, not {model!r}")
        self.model = model
        self.kernels_dir = _kernels_path(kernels_dir)
        self.store = KernelStore(self.kernels_dir)
        self.store.model_dir(model)  # a model id that cannot name a folder is a StoreError naming it
        self.mode = mode
        self.options = dict(options or {})
        self.kernels: list[ProductionKernel] = []
        # model.json's compile setting as each compile applied it: the setting's name, or None where
        # Inductor's defaults compiled the graph (nothing stored, or not verified at its inputs).
        self.settings_applied: list[str | None] = []
        # That setting's launch configurations (model.json's ``compile.launch_configs``): kernels launched at
        # their recorded point (raced no more), and the recorded ones that could not be (why, one line each).
        self.launches_fixed = 0
        self.launches_refused: list[str] = []
        self.startup_seconds = 0.0
        # Graphs are numbered per kind of compile (True: a training step's forward and backward graphs).
        self._graph_base: dict[tuple[bool, Any], int] = {}  # (training, Dynamo frame) -> number of its first graph
        # (training, graph number) -> its kernels' base names (latest compile)
        self._graph_kernels: dict[tuple[bool, int], set[str]] = {}
        # id(compiler kernel) -> (it, its fingerprint), for the graph being installed (cleared for the next)
        self._fingerprints: dict[int, tuple[Any, str]] = {}
        self._backward_graphs: set[int] = set()  # numbers of training steps' backward graphs
        self._next_graph: dict[bool, int] = {False: 0, True: 0}
        self._warned: set[str] = set()
        self._symbolic = False  # the graph being installed was compiled with symbolic sizes (dynamic shapes)
        self._device = "cpu"  # the device type the graph being installed runs on (its inputs')
        self._lock = threading.Lock()
        self.quiet = quiet
        _BACKENDS.append(self)

    def __repr__(self) -> str:
        return f"KerneloptBackend(model={self.model!r}, kernels_dir={str(self.kernels_dir)!r})"

    def __call__(self, gm: Any, example_inputs: Any, *, mode: str | None = None,
                 options: dict[str, Any] | None = None) -> Any:
        from torch._inductor.compile_fx import compile_fx

        from ..capture.compiled import _record_wrapper_modules

        from ..capture.variants import compiling

        patches = _inductor_patches(mode or self.mode, {**self.options, **(options or {})})
        # model.json's compile settings first (its kernels are that compile's); the caller's on top.
        variant, configs = self._variant(example_inputs)
        with self._lock:
            self.settings_applied.append(variant)
        from ..capture.training import backward_compiled_with_forward, is_backward_wrapper

        # A training graph's backward compiles here too, not on its first backward call (after this
        # returns): its kernels are looked up like the forward's (capture/training.py).
        with compiling(variant) as chosen, _record_wrapper_modules() as loaded, backward_compiled_with_forward():
            compiled = compile_fx(gm, example_inputs, config_patches={**chosen, **patches} or None)
        # Wrapper modules define ``call``; kernel modules do not (as in capture).
        graphs = [m for m in loaded if callable(getattr(m, "call", None)) and getattr(m, "__file__", None)]
        started = time.perf_counter()
        with self._lock:
            self._symbolic = _symbolic_sizes(example_inputs)
            self._device = _device_of(example_inputs, self._device)
            sources = [_wrapper_source(m) for m in graphs]
            training = any(is_backward_wrapper(text) for text in sources if text is not None)
            first = self._first_graph(len(graphs), training)
            for offset, (module, text) in enumerate(zip(graphs, sources)):
                before = len(self.kernels)
                self._install(module, text, first + offset, training, configs)
                self._announce(first + offset, self.kernels[before:])
            self.startup_seconds += time.perf_counter() - started
        return compiled

    def _announce(self, graph: int, kernels: list[ProductionKernel]) -> None:
        """The start-up line of one compiled graph, on stderr (INFO log, too)."""
        line = status_line(self.model, self.kernels_dir, graph, kernels)
        log.info("%s", line)
        if not self.quiet and os.environ.get("KERNELOPT_QUIET", "") in ("", "0"):
            print(line, file=sys.stderr, flush=True)

    # --- graphs and names ----------------------------------------------------------

    def _first_graph(self, count: int, training: bool) -> int:
        """Number of the first of ``count`` graphs compiled now, among the graphs of the same kind (training or
        inference): recompiles keep their frame's numbers."""
        frame = _frame_key()
        if frame is None:  # called outside Dynamo: a new graph every call
            frame = object()
        key = (training, frame)
        if key not in self._graph_base:
            self._graph_base[key] = self._next_graph[training]
            self._next_graph[training] += max(count, 1)
        return self._graph_base[key]

    def _name(self, attr: str, graph: int, training: bool) -> str:
        """Capture's name of kernel global ``attr`` of ``graph`` (``__bwd`` in a backward graph, then ``__g<graph>``
        when an earlier graph of the same kind has that name)."""
        from ..capture.training import kernel_base_name

        base = kernel_base_name(attr, training and graph in self._backward_graphs)
        earlier = any(base in names for (t, g), names in self._graph_kernels.items() if t == training and g < graph)
        return f"{base}__g{graph}" if earlier else base

    # --- one graph -----------------------------------------------------------------

    def _install(self, module: ModuleType, source: str | None, graph: int, training: bool,
                 configs: dict[str, dict[str, int]] | None = None) -> None:
        from ..capture.compiled import _KERNEL_DEF

        self._fingerprints.clear()  # not to hold an earlier graph's kernels
        if source is None:
            self._warn(f"kernelopt: model {self.model}: cannot read Inductor's wrapper {module.__file__}; "
                       f"the compiler's kernels of graph {graph} are used")
            return
        kernels = [(attr, fn) for attr, fn in _KERNEL_DEF.findall(source)
                   if hasattr(getattr(module, attr, None), "triton_meta")]
        from ..capture.training import is_backward_wrapper, kernel_base_name

        backward = is_backward_wrapper(source)
        if backward:
            self._backward_graphs.add(graph)
        self._graph_kernels[(training, graph)] = {kernel_base_name(attr, backward) for attr, _ in kernels}
        if not kernels and "cpp_fused" in source and self._committed():
            self._warn(f"kernelopt: model {self.model}: Inductor generated C++ kernels for graph {graph}, not Triton, "
                       f"so the committed kernels in {self.store.model_dir(self.model)} are not used (on a CPU, call "
                       "pytest_kernelopt.interpret.enable() before anything imports triton)")
        if kernels and not self.store.root.joinpath(self.model).is_dir():
            self._warn(f"kernelopt: model {self.model}: no tuned kernels in {self.store.root} "
                       f"(no folder {self.model}/); the compiler's kernels are used")
        for attr, function in kernels:
            compiler_kernel = getattr(module, attr)
            if configs:
                self._fix_launch(module, attr, function, configs)
            try:
                record = self._lookup(module, attr, function, graph, training)
            except Exception as exc:  # a bug of ours must not stop the model: the compiler's kernel runs
                setattr(module, attr, compiler_kernel)
                record = self._fallback(
                    ProductionKernel(self._name(attr, graph, training), graph, None, "compiler", module=module,
                                     attr=attr, training=training),
                    None, f"kernelopt failed to check it ({type(exc).__name__}: {exc})")
            self.kernels.append(record)

    def _variant(self, example_inputs: Any) -> tuple[str | None, dict[str, dict[str, int]] | None]:
        """``model.json``'s compile setting for a graph with these inputs and its recorded launch configurations:
        the setting (one per declared shape of a problem with SHAPES, ``compile_at``) verified at these inputs (a
        graph the verifier compiled under it); elsewhere, or for a setting that cannot be used, the defaults
        compile, said once. (None, None): the defaults."""
        from ..capture import launch_key, launch_signature, signature_key
        from .manifest import verified_elsewhere

        try:
            choices = self.store.compile_choices(self.model)
        except Exception as exc:  # noqa: BLE001 - an unknown name or a broken model.json: the defaults, said once
            self._warn(f"kernelopt: model {self.model}: {exc}; Inductor's default settings are used")
            return None, None
        if not choices:
            return None, None
        training = _training_graph(example_inputs)
        key = launch_key(example_inputs)
        device = _device_of(example_inputs, self._device)
        said: list[str] = []
        for choice in choices:
            where = (f"kernelopt: model {self.model}: {self.store.model_dir(self.model) / 'model.json'}: "
                     f"compile {choice.variant!r}")
            if choice.graphs is None:
                said.append(f"{where} records no graph inputs it was verified at (written before kernelopt recorded "
                            f"them; `kernelopt tune` verifies it again and records them)")
                continue
            try:
                listed = {signature_key(g) for g in choice.graphs}
            except ValueError as exc:  # an entry capture never writes (model.json is data from a repository)
                said.append(f"{where}: compile.graphs holds an entry that is no graph's inputs ({exc}); not used")
                continue
            if key not in listed:
                continue
            elsewhere = verified_elsewhere(choice.environment, device)
            if elsewhere is not None:  # as for a version: what a gate here checked is this environment's
                said.append(f"{where} is not verified here: {elsewhere} (`kernelopt tune` here verifies it and "
                            f"records it)")
                continue
            if bool(choice.training) != training:
                checked = "a training step" if choice.training else "inference"
                said.append(f"{where} was verified in {checked}, and this graph is "
                            f"{'a training step' if training else 'inference'}"
                            f"{' (for inference, call the model under torch.no_grad())' if training else ''}")
                continue
            return choice.variant, choice.launch_configs
        if not said:
            shown = launch_signature(example_inputs)
            text = ", ".join(shown[:8]) + (f", ... ({len(shown)} inputs)" if len(shown) > 8 else "")
            names = ", ".join(sorted({repr(c.variant) for c in choices}))
            said.append(f"kernelopt: model {self.model}: {self.store.model_dir(self.model) / 'model.json'}: compile "
                        f"{names} was not verified at this graph's inputs ({text})")
        for line in said:
            self._warn(f"{line}; Inductor's default settings compile this graph")
        return None, None

    def _fingerprint(self, module: ModuleType, attr: str, function: str) -> str:
        """The fingerprint of compiler kernel ``attr`` (capture.kernel_fingerprint), computed once per kernel
        object: the launch fix and the lookup of a committed version both ask (a few ms each)."""
        from ..capture import kernel_fingerprint, read_kernel_source

        compiler_kernel = getattr(module, attr)
        known = self._fingerprints.get(id(compiler_kernel))
        if known is None or known[0] is not compiler_kernel:
            known = (compiler_kernel, kernel_fingerprint(compiler_kernel, read_kernel_source(compiler_kernel, module,
                                                                                             attr), function))
            self._fingerprints[id(compiler_kernel)] = known
        return known[1]

    def _fix_launch(self, module: ModuleType, attr: str, function: str, configs: dict[str, dict[str, int]]) -> None:
        """The compiler kernel ``attr`` launches the point model.json records for its fingerprint, if any
        (capture/launch_configs.py); one that cannot is said once and races as Inductor does."""
        from ..capture.launch_configs import fix

        compiler_kernel = getattr(module, attr)
        try:
            point = configs.get(self._fingerprint(module, attr, function))
            if point is None:
                return  # not recorded: Inductor's race
            why = fix(compiler_kernel, point)
        except Exception as exc:  # noqa: BLE001 - our reading of Inductor's output failed: its race runs
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            self.launches_fixed += 1
            return
        self.launches_refused.append(f"{function}: {why}")
        self._warn(f"kernelopt: model {self.model}: {self.store.model_dir(self.model) / 'model.json'}: the launch "
                   f"configuration recorded for {function} is not used ({why}); Inductor races its configurations")

    def _committed(self) -> bool:
        try:
            return bool(self.store.kernel_names(self.model))
        except Exception:  # noqa: BLE001 - a store we cannot even list: nothing to say here
            return False

    def _folders(self, name: str) -> list[str]:
        """The store folders that may hold versions of compiler kernel ``name``: ``name/`` and, for a problem with
        SHAPES, every ``name@<shape>/`` (capture/shapes.py), in that order."""
        folders = [name] if self.store.kernel_dir(self.model, name).is_dir() else []
        model_dir = self.store.model_dir(self.model)
        if model_dir.is_dir():
            folders += sorted(p.name for p in model_dir.iterdir() if p.is_dir() and p.name.startswith(f"{name}@"))
        return folders

    def _lookup(self, module: ModuleType, attr: str, function: str, graph: int, training: bool) -> ProductionKernel:
        name = self._name(attr, graph, training)
        record = ProductionKernel(name=name, graph=graph, fingerprint=None, runs="compiler", module=module, attr=attr,
                                  training=training)
        try:
            folders = self._folders(name)
            if not folders:
                record.why = NOTHING_COMMITTED
                return record  # nothing committed: no need for a fingerprint (a few ms per kernel)
            if len(folders) > 1:  # one version per declared shape: the one verified for this compiler kernel
                return self._lookup_shapes(record, folders, module, attr, function)
            folder = folders[0]
            active = self.store.active_file(self.model, folder)
        except Exception as exc:  # StoreError names the file: missing, edited, a broken manifest
            return self._fallback(record, None, str(exc))
        record.folder = folder
        if active is None:
            record.why = "no active version" if self.store.kernel_dir(self.model, folder).joinpath(
                "manifest.json").is_file() else NOTHING_COMMITTED
            return record  # committed versions, none active
        try:
            record.fingerprint = self._fingerprint(module, attr, function)
        except Exception as exc:  # our reading of Inductor's output failed: never the model's problem
            return self._fallback(record, active.path,
                                  f"cannot read the compiler's kernel ({type(exc).__name__}: {exc})")
        record.version, record.file = active.record.version, active.path
        older = active.manifest.old_fingerprints()
        if older is not None:  # its fingerprint would not tell a float16 compile from a bfloat16 one
            return self._fallback(record, active.path, f"stale: {older}")
        if active.manifest.fingerprint != record.fingerprint:
            if _other_pass(active.record, training):  # a validation pass of a model tuned for training, or the reverse
                return self._quiet_fallback(record, active.path, _pass_why(active.record), (
                    f"v{active.record.version} was verified in {_pass(not training)} against compiler kernel "
                    f"{active.manifest.fingerprint}; this {_compile_of(training)}'s kernel is another "
                    f"({record.fingerprint}), so the compiler's code runs (nothing is stale)"))
            if self._symbolic:
                return self._fallback(record, active.path, DYNAMIC_SHAPES)
            return self._fallback(record, active.path, (
                f"stale: it replaces compiler kernel {active.manifest.fingerprint}, but the compiler now generates "
                f"{record.fingerprint} (another input shape, dtype, device, torch version or model change); "
                "`kernelopt refresh` carries it over to the new kernel"))
        return self._swap_in(record, [active])

    def _lookup_shapes(self, record: ProductionKernel, folders: list[str], module: ModuleType, attr: str,
                       function: str) -> ProductionKernel:
        """A kernel with a folder per declared shape: every active version whose manifest replaces exactly the
        compiler kernel generated now (``dynamic=False`` recompiles at batch 8 and at batch 64 get different
        ones); none: the compiler's kernel (an undeclared shape), said once."""
        try:
            record.fingerprint = self._fingerprint(module, attr, function)
        except Exception as exc:  # our reading of Inductor's output failed: never the model's problem
            return self._fallback(record, None, f"cannot read the compiler's kernel ({type(exc).__name__}: {exc})")
        matching, seen, other = [], [], []
        for folder in folders:
            try:
                active = self.store.active_file(self.model, folder)
            except Exception as exc:  # a broken folder of another shape must not hide this one's version
                seen.append(f"{folder} ({_short_why(str(exc))})")
                continue
            if active is None:
                seen.append(f"{folder} (no active version)")
            elif active.manifest.old_fingerprints() is None and active.manifest.fingerprint == record.fingerprint:
                matching.append(active)
            elif active.manifest.old_fingerprints() is None and _other_pass(active.record, record.training):
                other.append(active)
            else:
                seen.append(f"{folder} (replaces {active.manifest.fingerprint})")
        if not matching and other and all(s.endswith("(no active version)") for s in seen):
            return self._quiet_fallback(record, self.store.model_dir(self.model), _pass_why(other[0].record), (
                f"the versions of {', '.join(a.manifest.kernel for a in other)} were verified in "
                f"{_pass(not record.training)}; this {_compile_of(record.training)}'s kernel is another "
                f"({record.fingerprint}), so the compiler's code runs (nothing is stale)"))
        seen += [f"{a.manifest.kernel} (replaces {a.manifest.fingerprint}, {_pass_why(a.record)})" for a in other]
        if not matching and self._symbolic:
            return self._fallback(record, self.store.model_dir(self.model), DYNAMIC_SHAPES)
        if not matching:
            return self._fallback(record, self.store.model_dir(self.model), (
                f"stale: no committed version replaces the compiler kernel generated now ({record.fingerprint}): "
                f"{', '.join(seen)} (an input shape the problem does not declare, or a changed dtype, device, torch "
                "version or model)"))
        record.folder = matching[0].manifest.kernel
        record.version, record.file = matching[0].record.version, matching[0].path
        return self._swap_in(record, matching)

    def _swap_in(self, record: ProductionKernel, actives: list[Any]) -> ProductionKernel:
        """Check each of ``actives`` (versions whose manifest replaces ``record``'s compiler kernel) as production
        does and swap in those that pass, each run only at the launches it was verified at. The first is the one
        the record names; if it fails a check, the compiler's kernel runs (said once)."""
        compiler_kernel = getattr(record.module, record.attr)
        routes: dict[Any, Any] = {}
        first: Any = None
        for k, active in enumerate(actives):
            loaded = self._checked(record, active, compiler_kernel)
            if isinstance(loaded, str):
                if k == 0:
                    return self._fallback(record, active.path, loaded)
                self._warn(f"kernelopt: {self.model}/{active.manifest.kernel}: {active.path}: {loaded}; the "
                           f"compiler's kernel is used at its launches", active.path)
                continue
            replacement, verified = loaded
            first = first or replacement
            for key in verified:
                routes.setdefault(key, replacement)
        setattr(record.module, record.attr, VerifiedLaunches(
            first, compiler_kernel, frozenset(routes), lambda key, args: self._unverified_launch(record, args),
            routes=routes if len(actives) > 1 else None))
        record.runs = "committed"
        log.info("kernelopt: %s/%s: running %s (v%d)", self.model, record.name, record.file, record.version)
        return record

    def _checked(self, record: ProductionKernel, active: Any, compiler_kernel: Any) -> tuple[Any, frozenset[Any]] | str:
        """The version loaded and the launches it was verified at, or why it cannot run."""
        from ..candidate import CandidateKernel, load_candidate_source
        from ..capture import signature_key
        from ..verify.limits import size_problem
        from ..verify.static import check_candidate
        from .manifest import verified_elsewhere

        # The manifest must record a passing verification of these bytes against this very
        # compiler kernel: a fingerprint edited by hand (or a version written outside accept)
        # would otherwise run code no cascade ever checked at this shape.
        unverified = active.record.unverified_reason(record.fingerprint)
        if unverified is not None:
            return f"not verified: {unverified}"
        elsewhere = verified_elsewhere(active.record.evidence.environment, self._device)
        if elsewhere is not None:  # what the gate here checked is this environment's: nothing else runs
            return (f"not verified here: v{active.record.version}: {elsewhere}; `kernelopt refresh` verifies it "
                    "here and records it")
        try:  # the launches it was verified at; a manifest is data, so an entry we would not write is refused
            verified = frozenset(signature_key(s) for s in active.record.evidence.launches or ())
        except ValueError as exc:
            return f"not verified: v{active.record.version}'s launches: {exc}"
        too_big = size_problem(active.source, str(active.path))  # the static check's cost grows with the size
        if too_big:
            return too_big
        report = check_candidate(active.source, entry_args=_runtime_args(compiler_kernel))
        if not report.ok:
            return "fails the static check: " + "; ".join(report.problems[:3])
        try:
            loaded = load_candidate_source(active.source, str(active.path), sha256=active.record.sha256)
            return CandidateKernel(loaded, label=str(active.path)), verified
        except Exception as exc:
            return f"does not load: {exc}"

    def _unverified_launch(self, record: ProductionKernel, args: tuple[Any, ...]) -> None:
        from ..capture import launch_signature

        self._warn(f"kernelopt: {self.model}/{record.name}: v{record.version} ({record.file}) was not verified at "
                   f"this launch ({', '.join(launch_signature(args))}); the compiler's kernel runs at it",
                   record.file)

    def _fallback(self, record: ProductionKernel, path: Path | None, cause: str) -> ProductionKernel:
        record.runs, record.reason, record.why = "compiler", cause, _short_why(cause)
        where = f"{self.model}/{record.name}"
        file = f"{path}: " if path is not None and str(path) not in cause else ""
        self._warn(f"kernelopt: {where}: {file}{cause}; the compiler's kernel is used", path)
        return record

    def _quiet_fallback(self, record: ProductionKernel, path: Path | None, why: str, cause: str) -> ProductionKernel:
        """The compiler's kernel runs where nothing is wrong with the store (the stored versions are of the other
        pass): said in the record (the start-up line, :func:`status`) and once at INFO, never as a warning."""
        record.runs, record.reason, record.why = "compiler", cause, why
        message = f"kernelopt: {self.model}/{record.name}: {f'{path}: ' if path is not None else ''}{cause}"
        if message not in self._warned:
            self._warned.add(message)
            log.info("%s", message)
        return record

    def _warn(self, message: str, where: Path | None = None) -> None:
        if message not in self._warned:  # once per backend, however often the graph recompiles
            self._warned.add(message)
            # Located at the file in question: the caller's frame is deep inside Dynamo.
            warnings.warn_explicit(message, KerneloptWarning, str(where or self.kernels_dir), 0)


class VerifiedLaunches:
    """A committed version in place of a compiler kernel, run only at the launches it was verified at.

    ``verified``: :func:`~pytest_kernelopt.capture.signature_key` of each launch recorded in its evidence.
    At any other launch (another batch of a dynamic-shape kernel, other strides) the compiler's kernel
    runs and ``unverified(key, args)`` is called the first time that launch is seen. The check is one
    tuple built and looked up per launch (about 3 us for four arguments on the 2-core CPU machine).
    """

    # Unverified launches said once each, up to this many (a dynamic batch size could make one per call).
    SAID = 64

    def __init__(self, committed: Any, compiler: Any, verified: frozenset[Any], unverified: Any,
                 routes: dict[Any, Any] | None = None):
        from ..capture import launch_key

        self.committed, self.compiler, self.verified, self.unverified = committed, compiler, verified, unverified
        # Several versions of one compiler kernel (one per declared shape, e.g. a dynamic-shape kernel): each
        # launch runs the version verified at it.
        self.routes = routes
        self._key = launch_key
        self.unverified_seen: set[Any] = set()
        self.runs = {"committed": 0, "compiler": 0}  # launches of each, for tests and debugging

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        key = self._key(args)
        if key in self.verified:
            self.runs["committed"] += 1
            chosen = self.committed if self.routes is None else self.routes[key]
            return chosen.run(*args, stream=stream, **kwargs)
        if key not in self.unverified_seen and len(self.unverified_seen) < self.SAID:
            self.unverified_seen.add(key)
            self.unverified(key, args)
        self.runs["compiler"] += 1
        return self.compiler.run(*args, stream=stream, **kwargs)

    def __repr__(self) -> str:
        return f"VerifiedLaunches({self.committed!r}, {len(self.verified)} verified launch(es))"


def _pass(training: bool | None) -> str:
    return "the training step" if training else "inference"


def _compile_of(training: bool) -> str:
    return "training step's compile" if training else "inference compile"


def _other_pass(version: Any, training: bool) -> bool:
    """Whether ``version`` (a manifest's VersionRecord) was verified in the other pass than a compile of
    ``training``'s: its evidence records the pass (None, not recorded: it is not known to be)."""
    recorded = version.evidence.training
    return recorded is not None and recorded != training


def _pass_why(version: Any) -> str:
    """The start-up line's few words for a version stored for the other pass."""
    return f"stored for {_pass(version.evidence.training)}"


def _symbolic_sizes(example_inputs: Any) -> bool:
    """Whether Dynamo compiled the graph with symbolic sizes: a size or stride of an input, or an input itself,
    is a SymInt (dynamic shapes: ``dynamic=True``, ``mark_dynamic``, or torch.compile's default recompiling
    with them once a second input shape arrives)."""
    import torch

    symbolic = (torch.SymInt, torch.SymFloat)
    for x in example_inputs:
        if isinstance(x, symbolic):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(n, symbolic) for n in (*x.shape, *x.stride())):
            return True
    return False


def _short_why(cause: str) -> str:
    """A few words for a fallback's cause (the warning has it all)."""
    for prefix in ("stale", "dynamic shapes", "not verified", "fails the static check", "does not load"):
        if cause.startswith(prefix):
            return prefix
    if cause.startswith("cannot read the compiler"):
        return "compiler kernel unreadable"
    if cause.startswith("kernelopt failed"):
        return "check failed"
    if "sha256" in cause:
        return "edited file"
    if "missing" in cause:
        return "missing file"
    return "broken store"


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when inside it (``kernels/``), else absolute."""
    try:
        return f"{path.relative_to(Path.cwd()).as_posix()}/"
    except ValueError:
        return f"{path}/"


def _wrapper_source(module: ModuleType) -> str | None:
    """The text of an Inductor wrapper module (None: it cannot be read; the graph keeps the compiler's kernels)."""
    try:
        return Path(module.__file__).read_text()  # type: ignore[arg-type]
    except OSError:
        return None


def status_line(model: str, kernels_dir: Path, graph: int | None, kernels: list[ProductionKernel]) -> str:
    """``kernelopt: softmax_rows: 1 of 3 Triton kernels from kernels/ (triton_per_fused_0 v2); 2 compiler
    kernels: triton_poi_fused_1 (stale), 1 with nothing committed``; ``graph`` is named when it is not the first."""
    where = f"{model}" + (f" graph {graph}" if graph else "")
    if not kernels:
        return f"kernelopt: {where}: no Triton kernels to swap (Inductor generated none for this graph)"
    ours = [k for k in kernels if k.runs == "committed"]
    theirs = [k for k in kernels if k.runs != "committed"]
    text = f"kernelopt: {where}: {len(ours)} of {len(kernels)} Triton kernel{'s' if len(kernels) != 1 else ''} " \
           f"from {_shown(kernels_dir)}"
    if ours:
        text += " (" + ", ".join(f"{k.folder or k.name} v{k.version}" for k in ours) + ")"
    if theirs:
        # Kernels with a reason (stale, edited file, ...) by name; those with nothing committed counted: a
        # training step's 16 names once filled the line (``status(model).kernels`` lists them all).
        said = [k for k in theirs if k.why and k.why != NOTHING_COMMITTED]
        bare = len(theirs) - len(said)
        text += f"; {len(theirs)} compiler kernel{'s' if len(theirs) != 1 else ''}"
        if said:
            text += ": " + ", ".join(f"{k.name} ({k.why})" for k in said)
        if bare:
            text += f", {bare} with {NOTHING_COMMITTED}" if said else f" ({NOTHING_COMMITTED})"
    return text


@dataclass
class ProductionStatus:
    """What :func:`status` answers: every Triton kernel compiled so far for ``model`` and what runs for it.

    ``str(status)`` gives one line per compiled graph, as printed at start-up.
    """

    model: str
    kernels_dir: Path
    kernels: list[ProductionKernel]
    graphs: int = 0  # graphs compiled so far, with Triton kernels or without

    @property
    def committed(self) -> list[ProductionKernel]:
        return [k for k in self.kernels if k.runs == "committed"]

    def lines(self) -> list[str]:
        if not self.kernels and self.graphs:
            return [f"kernelopt: {self.model}: {self.graphs} graph{'s' if self.graphs != 1 else ''} compiled, with no "
                    "Triton kernel (Inductor generated none: C++ kernels on a CPU unless "
                    "pytest_kernelopt.interpret.enable() ran before anything imported triton, or library calls only)"]
        if not self.kernels:
            return [f"kernelopt: {self.model}: nothing compiled yet (call the model once; torch.compile compiles "
                    "on the first call)"]
        # Inference graphs first, then training ones (numbered apart), each kind in graph order.
        graphs = sorted({(k.training, k.graph) for k in self.kernels})
        # A recompile (another input shape) appends records for its graph: the latest ones count.
        latest = {(k.training, k.graph, k.name): k for k in self.kernels}
        lines = [status_line(self.model, self.kernels_dir, g, [k for (kt, kg, _), k in latest.items()
                                                               if (kt, kg) == (t, g)])
                 for t, g in graphs]
        try:
            from ..capture.shapes import split_name
            from ..capture.training import BACKWARD_SUFFIX

            names = {k.name for k in self.kernels}  # a folder per shape (name@b64) belongs to its kernel
            unused = [n for n in KernelStore(self.kernels_dir).kernel_names(self.model)
                      if split_name(n)[0] not in names]
        except Exception:  # noqa: BLE001 - a store we cannot list: the warnings said why
            unused = []
        # A backward kernel runs only in a training step: with none compiled (a validation pass), not a mismatch.
        backward = [n for n in unused if BACKWARD_SUFFIX in n] if not any(k.training for k in self.kernels) else []
        unused = [n for n in unused if n not in backward]
        if backward:
            lines.append(f"kernelopt: {self.model}: committed in {_shown(self.kernels_dir)} for the training step's "
                         f"backward, which this process has not compiled: {', '.join(backward)}")
        if unused:
            lines.append(f"kernelopt: {self.model}: committed in {_shown(self.kernels_dir)} but not generated by the "
                         f"compiler here: {', '.join(unused)} (another input shape, device or torch version?)")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())


# Every backend made in this process, for status("model id"); a few per model at most.
_BACKENDS: list[KerneloptBackend] = []


def status(model: Any) -> ProductionStatus:
    """Which kernels of a model compiled by :func:`compile` (or a backend, or a model id) come from the
    store and which are the compiler's, and why: ``print(pytest_kernelopt.status(compiled))``."""
    found: KerneloptBackend | None
    if isinstance(model, KerneloptBackend):
        found = model
    elif isinstance(model, str):
        found = next((b for b in reversed(_BACKENDS) if b.model == model), None)
        if found is None:
            raise UsageError(f"kernelopt status: no kernelopt backend for model {model!r} in this process")
    else:
        found = getattr(model, "_kernelopt_backend", None)
        options = _compiled_options(model) if found is None else None
        if options is not None:  # torch.compile(model, backend="kernelopt", options={"model": ...})
            found = _backend_of_options(options)
        if found is None:
            raise UsageError("kernelopt status: pass what pytest_kernelopt.compile() or torch.compile(..., "
                             "backend=\"kernelopt\") returned, its backend or the model id, not "
                             f"{type(model).__name__}")
    return ProductionStatus(found.model, found.kernels_dir, list(found.kernels), len(found._graph_kernels))


def _frame_key() -> Any:
    """The Python frame Dynamo is compiling, by its code: the same for a recompile, after
    ``torch._dynamo.reset()`` (which renumbers frames) and for a graph-break resume function
    (which Dynamo regenerates with the same name, line and bytecode)."""
    try:  # the translator of the frame being compiled (thread-local; torch 2.13, and long before)
        from torch._dynamo.symbolic_convert import InstructionTranslator

        code = InstructionTranslator.current_tx().f_code
        return (code.co_filename, code.co_firstlineno, code.co_name, code.co_code)
    except Exception:
        from torch._guards import CompileContext

        frame = getattr(CompileContext.current_compile_id(), "frame_id", None)
        return None if frame is None else ("frame", frame)


def _runtime_args(compiler_kernel: Any) -> list[str]:
    """The kernel's runtime arguments (the candidate's ``run`` signature): its arguments but the tuned constants."""
    configs = getattr(compiler_kernel, "configs", None) or [
        launcher.config for launcher in getattr(compiler_kernel, "launchers", None) or []]
    constants = {key for cfg in configs for key in cfg.kwargs}
    return [a for a in compiler_kernel.fn.arg_names if a not in constants]


def _inductor_patches(mode: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """Inductor config patches for ``mode`` and ``options``, as torch.compile's Inductor backend makes them."""
    patches: dict[str, Any] = {}
    if mode and mode != "default":
        from torch._inductor import list_mode_options

        patches.update(list_mode_options(mode))
    patches.update({key.replace("-", "_"): value for key, value in options.items() if key not in _OWN_OPTIONS})
    return patches


def _kernels_path(kernels_dir: str | Path | None) -> Path:
    """``kernels_dir`` (relative: to the current folder), or ``[tool.kernelopt] kernels_dir`` of the current project."""
    from ..config import kernels_folder

    return kernels_folder(None, kernels_dir)


def model_id_of(model: Any) -> str:
    """The stem of the file defining ``model``'s class (or function): a problem file's id."""
    target = model if inspect.isfunction(model) or inspect.ismethod(model) else type(model)
    try:
        path = inspect.getfile(target)
    except (TypeError, OSError):
        path = ""
    if not path or path.startswith("<"):
        raise UsageError(f"cannot tell the model id of {type(model).__name__} (it is not defined in a file); "
                         f"pass model_id=")
    return Path(path).stem


# --- entry points ------------------------------------------------------------------------

def backend(model: str, kernels_dir: str | Path | None = None, *, quiet: bool = False) -> KerneloptBackend:
    """A backend for ``torch.compile(m, backend=...)`` that runs ``model``'s committed kernels."""
    return KerneloptBackend(model, kernels_dir, quiet=quiet)


def compile(model: Any, kernels_dir: str | Path | None = None, *, model_id: str | None = None, quiet: bool = False,
            **torch_compile_kwargs: Any) -> Any:
    """``torch.compile(model, **torch_compile_kwargs)`` with the committed kernels of ``model_id``.

    ``model_id`` defaults to the stem of the file that defines the model's class;
    ``kernels_dir`` to ``[tool.kernelopt] kernels_dir`` of the current folder's project.
    ``quiet``: no start-up line on stderr. :func:`status` of the result says what runs.
    """
    import torch

    if "backend" in torch_compile_kwargs:
        raise UsageError("pytest_kernelopt.compile() chooses the backend; pass Inductor's mode= or options= instead")
    chosen = KerneloptBackend(model_id or model_id_of(model), kernels_dir, quiet=quiet)
    compiled = torch.compile(model, backend=chosen, **torch_compile_kwargs)
    try:
        object.__setattr__(compiled, "_kernelopt_backend", chosen)  # for status(compiled)
    except (AttributeError, TypeError):  # an object that takes no attributes: status(model id) still works
        pass
    return compiled


# torch.compile(model, backend="kernelopt", options=...) calls the registered function for
# every graph with the *same* options dict: one backend (graph numbers, warnings) per dict.
_BY_OPTIONS: dict[int, tuple[dict[str, Any], KerneloptBackend]] = {}
_BY_OPTIONS_LOCK = threading.Lock()


def kernelopt_backend(gm: Any, example_inputs: Any, *, mode: str | None = None,
                      options: dict[str, Any] | None = None) -> Any:
    """The backend registered as ``"kernelopt"`` (entry point group ``torch_dynamo_backends``).

    ``torch.compile(model, backend="kernelopt", options={"model": "softmax_rows", "kernels_dir": "kernels"})``;
    the other keys of ``options`` are Inductor's.
    """
    if not options or not options.get("model"):
        raise UsageError('backend "kernelopt" needs the model id: torch.compile(model, backend="kernelopt", '
                         'options={"model": "<id>"}), or use pytest_kernelopt.compile(model)')
    return _backend_of_options(options)(gm, example_inputs, mode=mode, options=options)


def _backend_of_options(options: dict[str, Any]) -> KerneloptBackend:
    """The one backend of this ``options`` dict, made on first use (by a compile, or by :func:`status`)."""
    with _BY_OPTIONS_LOCK:
        kept = _BY_OPTIONS.get(id(options))
        if kept is None or kept[0] is not options:
            # Keep the dict alive with its backend so that its id is never reused.
            kept = _BY_OPTIONS[id(options)] = (options, KerneloptBackend(options["model"], options.get("kernels_dir"),
                                                                          quiet=bool(options.get("quiet", False))))
    return kept[1]


def _compiled_options(model: Any) -> dict[str, Any] | None:
    """The ``options`` dict of ``torch.compile(model, backend="kernelopt", options=...)``, or None. torch keeps
    it on the backend wrapper behind the compiled module (``_TorchCompileWrapper.kwargs``, reached through
    ``dynamo_ctx.callback._torchdynamo_orig_backend``; torch 2.11 to 2.13): followed, not assumed."""
    wrapper = getattr(getattr(model, "dynamo_ctx", None), "callback", None)
    for _ in range(8):  # a few wrappers deep (ConvertFrame, WrapBackendDebug, _TorchCompileWrapper)
        if wrapper is None:
            return None
        options = (getattr(wrapper, "kwargs", None) or {}).get("options") if \
            getattr(wrapper, "compiler_name", None) == "kernelopt" else None
        if isinstance(options, dict) and options.get("model"):
            return options
        wrapper = getattr(wrapper, "_torchdynamo_orig_backend", None)
    return None


def _device_of(example_inputs: Any, default: str) -> str:
    """The device type of a graph's tensor inputs ("cuda", "cpu"); ``default`` where it has none."""
    for x in example_inputs:
        device = getattr(x, "device", None)
        if device is not None and getattr(device, "type", None):
            return str(device.type)
    return default


def _training_graph(example_inputs: Any) -> bool:
    """Whether Dynamo hands over a graph of a training step: grad mode on and an input (a weight, lifted) that
    requires grad, so AOTAutograd compiles a forward that saves for a backward, and the backward."""
    import torch

    return torch.is_grad_enabled() and any(getattr(x, "requires_grad", False) for x in example_inputs)
