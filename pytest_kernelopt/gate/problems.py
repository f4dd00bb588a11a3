"""The problem files the gate checks: found from the options or ``[tool.kernelopt]``, compiled once each."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import KerneloptError, UsageError
from .torch_warnings import internal_warnings_ignored


@dataclass
class Problem:
    """One problem file, and (after :func:`compile_once`) its Triton kernels' records."""

    path: Path
    id: str  # the kernel store's model id: the file's stem (kernels/<id>/)
    # Each Triton kernel's record (name, fingerprint, arguments); the live compiled model is
    # not kept: its worker compiles the problem again (see compile_once).
    infos: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # why its items fail without being checked
    kernels: list[str] = field(default_factory=list)
    loaded: bool = False
    variant: str | None = None  # model.json's compile settings (capture/variants.py), None: the defaults
    launch_configs: dict[str, dict[str, int]] | None = None  # recorded with them (capture/launch_configs.py)
    # A problem file with SHAPES: one Problem per declared shape (``shape`` set, compiled at its inputs), each
    # with its own items; the file's own Problem then has no kernels of its own.
    shape: str | None = None
    shapes: list[Problem] = field(default_factory=list)
    declared: list[str] = field(default_factory=list)  # the shapes the file declares ([]: no SHAPES)
    training: bool = False  # the file declares a training step (TRAINING = True)

    def owns(self, folder: str) -> bool:
        """Whether a store folder of the model is this part's to report when the compiler does not generate
        its kernel: one of its shape, and, for the first part, one of a shape the file does not declare (a
        plain folder of a file that now declares SHAPES, or the reverse)."""
        from ..capture.shapes import split_name

        shape = split_name(folder)[1]
        first = self.declared[0] if self.declared else None
        return shape == self.shape or (shape not in self.declared and self.shape == first)

    @property
    def key(self) -> tuple[Path, str | None]:
        """What its verification session and its items are counted by: the file and the shape."""
        return self.path, self.shape

    def store_name(self, kernel: str) -> str:
        """The kernel store folder of ``kernel`` at this shape (``<kernel>@<shape>``, capture/shapes.py)."""
        from ..capture.shapes import store_name

        return store_name(kernel, self.shape)

    @property
    def parts(self) -> list[Problem]:
        """What gets items: each declared shape, or the problem itself."""
        return self.shapes or [self]

    def info(self, kernel: str) -> Any:
        """The record (``records.KernelInfo``) of the Triton kernel ``kernel``, as compiled at collection."""
        return self.infos[kernel]


def find_problems(globs: list[str] | None, settings: Any, rootpath: Path) -> dict[Path, Problem]:
    """The configured problem files by resolved path; none, or two sharing a store folder, is a UsageError."""
    files = settings.problem_files(globs)
    if not files:
        if not globs and settings.source is None:  # nothing configured: say what to do
            from ..config import find_pyproject

            found = find_pyproject(rootpath)
            if found is None:
                raise UsageError(f"no pyproject.toml found above {rootpath}; pass problem files "
                                 "(--kernelopt-problems 'models/*.py') or create one with [tool.kernelopt] "
                                 "problems = [...]")
            raise UsageError(f"{found} has no [tool.kernelopt] table; pass problem files "
                             "(--kernelopt-problems 'models/*.py') or add [tool.kernelopt] problems = [...]")
        where = "--kernelopt-problems" if globs else f"[tool.kernelopt] problems of {settings.source}"
        raise UsageError(f"{where} matches no problem files: {', '.join(map(repr, settings.unmatched(globs)))} "
                         f"matched nothing under {settings.root}")

    def rel(path: Path) -> str:
        return os.path.relpath(path, rootpath)

    by_id: dict[str, Path] = {}
    for path in files:
        if path.stem in by_id:  # their kernels would share kernels/<stem>/
            raise UsageError(f"problem files {rel(by_id[path.stem])} and {rel(path)} have the same "
                             f"name {path.stem!r}, so their kernels would share "
                             f"{rel(settings.kernels_path / path.stem)}/: rename one")
        by_id[path.stem] = path
    return {path: Problem(path=path, id=path.stem) for path in files}


def compile_once(problem: Problem, device: str, store: Any) -> Problem:
    """Compile the problem once, under ``model.json``'s compile settings, to know its kernels (each xdist
    worker does this); an error is kept, not raised. A ``model.json`` that gives no usable setting (broken,
    or a name this version does not know) fails the model item, naming it; the kernels are the default
    compile's then.

    Only the kernels' records are kept: the compiled model, its weights and inputs and Inductor's
    caches are released before the next problem compiles (:func:`release_memory`), so collecting
    many full-size problems holds no device memory in this process while their workers verify.
    """
    from ..capture import compile_problem
    from ..capture.problem import load_problem
    from ..capture.training import is_training

    if not problem.loaded:
        problem.loaded = True
        try:
            loaded = load_problem(problem.path)
        except KerneloptError as exc:
            problem.error = str(exc)
            return problem
        # Each declared shape is compiled at its own inputs and gated on its own; undeclared ones are not gated.
        declared = list(loaded.shapes)
        problem.declared = declared
        problem.training = is_training(loaded)
        problem.shapes = [Problem(path=problem.path, id=problem.id, loaded=True, shape=shape, declared=declared,
                                  training=problem.training) for shape in declared]
        for part in problem.parts:
            try:  # model.json's compile settings at the part's shape
                part.variant = store.compile_variant(problem.id, part.shape)
                part.launch_configs = store.launch_configs(problem.id, part.shape) if part.variant is not None else None
            except KerneloptError:
                part.variant = part.launch_configs = None
            try:
                with internal_warnings_ignored():
                    at = loaded.at(part.shape) if part.shape is not None else loaded
                    compiled = compile_problem(at, device, variant=part.variant, launch_configs=part.launch_configs)
                part.infos = {name: handle.info for name, handle in compiled.kernels.items()}
                part.kernels = list(part.infos)
                del compiled
            except KerneloptError as exc:
                part.error = str(exc)
            finally:
                release_memory(device)
    return problem


def release_memory(device: str) -> None:
    """Give back what compiling and running a model left in this process: Dynamo's caches (the last
    compile's graphs and guards), unreachable objects, and on a GPU the blocks torch's caching
    allocator keeps reserved after the tensors died (other processes, such as the verification
    workers, cannot use them otherwise)."""
    import gc

    import torch
    import torch._dynamo

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
