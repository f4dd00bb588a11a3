"""The candidate format: a self-contained Triton file that can stand in for a kernel.

A candidate is a plain Python file that imports only ``triton``, ``triton.language``
(and its ``math``/``extra.libdevice``) and ``math``. It defines an entry point

    def run(<the kernel's runtime arguments, in order>, *, stream=None): ...

called exactly as the compiled model calls the kernel it replaces: tensors for
pointer arguments, Python ints for sizes. ``run`` chooses the grid and launch
options and launches its ``@triton.jit`` function(s) on the current stream.

:func:`render_dump` writes a compiler kernel in this format (Inductor's helpers
inlined, its launch configuration and grid spelled out), so an unedited dump
reproduces the compiler's output bit for bit and editing a dump gives a candidate.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import linecache
import os
import re
import sys
import textwrap
import types
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import CandidateError, CaptureError, UsageError
from ..launch import fast_entry_point, set_stream
from ..records import KernelInfo

ENTRY_POINT = "run"
# Module names a kernel body may use, as Inductor imports them.
_KERNEL_GLOBALS = {"tl", "triton", "tl_math", "libdevice", "triton_helpers", "math"}


def find_kernel_def(source: str, name: str | None = None) -> ast.FunctionDef:
    """The ``@triton.jit`` function named ``name`` (or the last jit function) in ``source``."""
    tree = ast.parse(source)
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            if name is None or node.name == name:
                found = node
    if found is None:
        raise CaptureError(f"no @triton.jit function {name or ''} in kernel source".replace("  ", " "))
    return found


def _helper_name(name: str) -> str:
    """Inlined helpers keep their names unless they would shadow a Python builtin."""
    return f"{name}_" if hasattr(builtins, name) else name


def _helpers_source(names: set[str]) -> list[str]:
    """Source of Inductor's ``triton_helpers`` functions (and what they call), renamed for a dump."""
    import torch._inductor.runtime.triton_helpers as helpers
    try:
        from triton.runtime.jit import ConstexprFunction
    except ImportError:  # a Triton without compile-time helpers
        ConstexprFunction = ()

    ordered: list[str] = []
    constants: dict[str, str] = {}
    pending = sorted(names)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        obj = getattr(helpers, name, None)
        fn = getattr(obj, "fn", None)
        if fn is None:
            raise CaptureError(f"Inductor helper triton_helpers.{name} is not a Triton function; cannot inline it")
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                value = getattr(helpers, node.id, None)
                if node.id == "math":
                    node.id = "tl_math"  # triton_helpers imports tl.math as `math`
                elif getattr(value, "fn", None) is not None and node.id != name:
                    pending.append(node.id)
                    node.id = _helper_name(node.id)
                elif value is not None and hasattr(value, "value") and node.id not in _KERNEL_GLOBALS:
                    constants[node.id] = f"{node.id} = tl.constexpr({value.value!r})"
        func = tree.body[0]
        assert isinstance(func, ast.FunctionDef)
        func.name = _helper_name(name)
        # Triton's compile-time helpers (``_log2``, which Inductor's sort borrows) stay
        # compile-time: as @triton.jit their arguments would become tensors.
        decorator = "triton.constexpr_function" if isinstance(obj, ConstexprFunction) else "triton.jit"
        func.decorator_list = [ast.parse(decorator, mode="eval").body]
        ordered.append(ast.unparse(tree))
    # Callees were appended after callers; Python resolves globals at call time, but
    # reading top-down is easier with callees first.
    return [*constants.values(), *reversed(ordered)]


def render_dump(info: KernelInfo, model_id: str) -> str:
    """The compiler kernel ``info`` as a candidate file."""
    source = info.source
    func = find_kernel_def(source, info.function)
    lines = source.splitlines()
    body = "\n".join(lines[func.lineno - 1 : func.end_lineno])
    # Other @triton.jit functions of Inductor's kernel module (scan combine functions).
    local_fns = [
        node for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node is not func and node.name != func.name
        and any("jit" in ast.unparse(d) for d in node.decorator_list)
    ]
    local_src = ["\n".join(lines[n.lineno - 1 : n.end_lineno]) for n in local_fns]
    params = {a.arg for a in func.args.args}
    nodes = [n for stmt in func.body for n in ast.walk(stmt)]  # not the decorators
    assigned = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loads = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unknown = sorted(loads - params - assigned - _KERNEL_GLOBALS - set(dir(builtins)) - {n.name for n in local_fns})
    if unknown:
        raise CaptureError(f"kernel {info.name} uses module-level names {unknown}; it cannot be dumped")
    helper_names = set(re.findall(r"\btriton_helpers\.(\w+)", "\n".join([body, *local_src])))
    body, *local_src = [re.sub(r"\btriton_helpers\.(\w+)", lambda m: _helper_name(m.group(1)), text)
                        for text in (body, *local_src)]
    helpers = _helpers_source(helper_names) if helper_names else []

    kernel = func.name
    runtime = [a.name for a in info.args]
    launch = info.launch
    written = ", ".join(f"{a.name} (in place: elements it does not store keep their values)" if a.kept else a.name
                        for a in info.args if a.written) or "none"
    signature = ", ".join(runtime)
    call = ", ".join([*runtime, *(f"{k}={k}" for k in launch.kwargs)])
    opts = {}
    if launch.num_warps is not None:
        opts["num_warps"] = launch.num_warps
    if launch.num_stages is not None:
        opts["num_stages"] = launch.num_stages
    opts.update(launch.options)
    launch_opts = "".join(f", {k}={v!r}" for k, v in opts.items())
    out = [
        f'"""kernelopt candidate: `{info.name}` of model `{model_id}`.',
        "",
        f"Dumped from the kernel Inductor generated (fingerprint {info.fingerprint}).",
        *_configs_note(launch.compiled_configs),
        f"Entry point: `{ENTRY_POINT}({signature})`, called as the compiled model calls",
        f"the kernel. It writes: {written}. Edit the kernel, the grid or the launch",
        "options; keep the entry point's arguments.",
        '"""',
        "import triton",
        "import triton.language as tl",
        "from triton.language import math as tl_math",
        "from triton.language.extra import libdevice",
        "",
    ]
    for helper in helpers:
        out += ["", helper, ""]
    for text in local_src:
        out += ["", "@triton.jit", text, ""]
    out += [
        "",
        "@triton.jit",
        body,
        "",
        "",
        f"def {ENTRY_POINT}({signature}, *, stream=None):",
        f'    """Launch `{kernel}` with the configuration Inductor chose."""',
    ]
    out += [f"    {k} = {v}" for k, v in launch.kwargs.items()]
    out += [f"    {line}" for line in launch.grid_prefix]
    out += [f"    grid = ({', '.join(launch.grid)})", f"    {kernel}[grid]({call}{launch_opts})", ""]
    text = "\n".join(out)
    ast.parse(text)  # a dump that does not parse is our bug, not the user's
    return text


def _configs_note(compiled: int | None) -> list[str]:
    if compiled and compiled > 1:
        return [f"Inductor compiled {compiled} launch configurations, benchmarked them on the first run and",
                "launched the one below; this dump reproduces that launch."]
    return []


def write_dumps(infos: list[KernelInfo], model_id: str, folder: Path) -> list[Path]:
    """Write each kernel to ``folder/<kernel>.py``; a folder that cannot be written is bad input."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--dump {folder}: exists and is not a folder")
    paths = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for info in infos:
            path = folder / f"{info.name}.py"
            path.write_text(render_dump(info, model_id))
            paths.append(path)
    except OSError as exc:
        raise UsageError(f"--dump {folder}: cannot write ({exc.strerror or exc})") from exc
    return paths


# --- loading ---------------------------------------------------------------------------

def load_candidate_source(source: str, label: str, sha256: str | None = None) -> ModuleType:
    """A fresh module made from exactly ``source``: compiled from the text, never imported.

    Nothing goes through the import system, so no ``__pycache__`` beside a candidate
    (or anywhere) can run instead of the bytes that were checked. Triton reads a jit
    function's source again (``inspect``/``linecache``); the text is registered there
    under a name unique to its hash, which no file on disk can shadow, and before the
    module is handed out every such reading is checked to give the very function that
    was compiled here (:func:`_rereads_agree`). This runs on every path that runs a
    candidate: the verifier's worker, the gate, the production loader.
    """
    # Lazily: verify.static is standard library only, but importing it runs verify/__init__.py,
    # whose stages import this module.
    from ..verify.limits import size_problem
    from ..verify.static import text_problems

    digest = sha256 or hashlib.sha256(source.encode()).hexdigest()
    if hashlib.sha256(source.encode()).hexdigest() != digest:
        raise CandidateError(f"{label}: the source does not match its recorded sha256")
    too_big = size_problem(source, label)
    if too_big:
        raise CandidateError(too_big)
    ambiguous = text_problems(source)
    if ambiguous:
        line, why = ambiguous[0]
        raise CandidateError(f"{label}: line {line}: {why}")
    stem = re.sub(r"\W", "_", Path(label).stem)[:40]
    name = f"kernelopt_candidate_{stem}_{digest[:12]}"
    filename = f"<kernelopt-candidate {digest}>"
    # Split where the parser splits (text_problems left no character on which
    # str.splitlines would disagree), so line N is the same line for every reader.
    lines = source.splitlines(keepends=True)
    # mtime None: linecache.checkcache() never drops the entry (there is no file to check).
    linecache.cache[filename] = (len(source), None, lines, filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module  # Triton resolves a jit function's globals through its module
    try:
        tree = ast.parse(source, filename)
        code = compile(tree, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the candidate passed the static stage first
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CandidateError(f"{label}: loading failed: {type(exc).__name__}: {exc}") from exc
    try:
        _rereads_agree(module, tree, label)
    except CandidateError:
        sys.modules.pop(name, None)
        raise
    if not callable(getattr(module, ENTRY_POINT, None)):
        raise CandidateError(f"{label}: no entry point `{ENTRY_POINT}(...)`")
    return module


def _rereads_agree(module: ModuleType, tree: ast.Module, label: str) -> None:
    """Every text Triton will compile a function of ``module`` from parses to the tree that
    was compiled (and checked); raises CandidateError naming the reader otherwise.

    The readers (triton 3.6/3.7): ``inspect.getsourcelines`` (decorators included);
    ``JITFunction.src``, what the GPU compiler parses; and the interpreter's re-read,
    which starts at the last line beginning with ``def``. The interpreter's rewrite is
    then done here, once, so the function that runs is fixed before any candidate code
    has run. A reader whose text differs in comments or blank lines only is fine.
    """
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
            continue
        obj: Any = module.__dict__.get(node.name)  # whatever the module binds; probed with getattr below
        for _ in range(8):  # a wrapper (autotuner, heuristics) around the Triton function
            inner = getattr(obj, "fn", None)
            if inner is None or inspect.isfunction(inner):
                break
            obj = inner
        fn = getattr(obj, "fn", None)
        if fn is None:
            continue  # not a Triton function object: nothing re-reads it
        bare = ast.Module(body=[ast.FunctionDef(**{**{f: getattr(node, f) for f in node._fields}, "decorator_list": []})],
                          type_ignores=[])
        expected_bare, expected_full = _shape(bare), _shape(ast.Module(body=[node], type_ignores=[]))
        first_line = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as exc:
            raise CandidateError(f"{label}: Triton cannot read the source of '{node.name}' ({exc})") from exc
        texts = {"inspect.getsourcelines": ("".join(lines), expected_full)}
        src = getattr(obj, "src", None) if not hasattr(obj, "rewriter") else None
        if isinstance(src, str):
            texts["JITFunction.src"] = (src, expected_bare)
        rewriter = getattr(obj, "rewriter", None)
        if rewriter is not None:  # TRITON_INTERPRET=1: the interpreter's own reading
            find_def = getattr(rewriter, "_find_def", None)
            def_line = find_def(lines) if callable(find_def) else _last_def_line(lines)
            texts["the interpreter's re-read"] = ("".join(lines[max(def_line, 1) - 1:]), expected_bare)
        if start != first_line:
            raise CandidateError(f"{label}: '{node.name}': inspect places it at line {start}, the parser at "
                                 f"line {first_line}; Triton would read other source than was checked")
        for reader, (text, expected) in texts.items():
            if _shape(textwrap.dedent(text)) != expected:
                raise CandidateError(f"{label}: '{node.name}': {reader} gives other source than was checked; "
                                     "Triton would compile text the static stage never saw")
        if rewriter is not None and callable(getattr(obj, "rewrite", None)):
            obj.rewrite()  # cached by Triton per function: the checked reading is the one kept


def _shape(tree_or_text: Any) -> str | None:
    """The tree without positions (None: the text does not parse)."""
    tree = tree_or_text
    if isinstance(tree_or_text, str):
        try:
            tree = ast.parse(tree_or_text)
        except (SyntaxError, ValueError):
            return None
    return ast.dump(tree, include_attributes=False)


def _last_def_line(lines: list[str]) -> int:
    """The interpreter's rule where its helper is not there to ask (1-based; 0: none)."""
    found = 0
    for i, line in enumerate(lines):
        if line.strip().startswith("def "):
            found = i + 1
    return found


def load_candidate(path: str | Path, source: str | None = None) -> ModuleType:
    """Load a candidate file (or ``source`` under that path's name) as a fresh module."""
    path = Path(path)
    if source is None:
        try:
            source = path.read_text()
        except OSError as exc:
            raise CandidateError(f"{path}: cannot read ({exc.strerror})") from exc
    return load_candidate_source(source, str(path))


class CandidateKernel:
    """Adapter with the ``.run(*args, stream=...)`` call convention of an Inductor kernel.

    On a GPU the entry point launches through :mod:`pytest_kernelopt.launch` (Triton's
    cached kernel, called directly on the model's stream) so that a candidate pays
    no more launch overhead than Inductor's own launcher.
    """

    def __init__(self, module: ModuleType, label: str):
        self.module = module
        self.label = label
        entry = getattr(module, ENTRY_POINT)
        self._fast = False
        try:
            import torch

            if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":

                entry, self._fast = fast_entry_point(module, entry), True
        except ImportError:
            pass
        self._run = entry

    def run(self, *args: Any, stream: Any = None, **_: Any) -> Any:
        if not self._fast:
            return self._run(*args, stream=stream)
        previous = set_stream(stream)
        try:
            return self._run(*args, stream=stream)
        finally:
            set_stream(previous)

    def __repr__(self) -> str:
        return f"CandidateKernel({self.label})"
