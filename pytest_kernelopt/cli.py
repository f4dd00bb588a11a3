"""The ``kernelopt`` command line.

One module of about 660 lines on purpose: the parser and one short handler per subcommand
(each hands over to its stage: capture, verify, store, agents, benchmark, runs.gate_result,
gitops), so the whole command surface, with its exit codes, reads in one place.

Exit codes (a contract, documented in docs/cli.md):
    0  success (verify: every candidate correct or accepted; accept: stored, or already stored)
    1  verify/accept: a candidate was rejected (accept: or correct but not stored)
       tune --open-pr/publish: a kernel's branch or pull request was refused or failed
    2  bad input (missing file, not a problem file, unknown kernel, bad option or setting), or
       the verifier itself could not judge (not enough GPU memory, its worker failed to open
       the problem); one line ``kernelopt: error: ...`` on stderr
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, NoReturn, Sequence

from .errors import KerneloptError, Terminated, UsageError
from .capture.variants import MODEL_VARIANTS, VARIANTS
from .config import kernels_folder, runs_folder
from .settings import FIELDS, add_arguments, positive_seconds, validate

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2

SETTINGS_HELP = ("Settings come from [tool.kernelopt] in the nearest pyproject.toml above the problem file "
                 "(or --config); options given here win.")


class _Parser(argparse.ArgumentParser):
    """argparse with the documented one-line error and exit code 2; a misspelt option or command
    gets the nearest real one, and an unknown option is reported by its subcommand's parser (whose
    ``--help`` lists the options), not by the top-level one."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = self._subcommand_parser(parsed) or self
            owner.error(f"unrecognized arguments: {' '.join(extras)}{_did_you_mean(extras, owner)}")
        return parsed

    def _subcommand_parser(self, parsed: argparse.Namespace) -> _Parser | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                name = getattr(parsed, action.dest, None)
                return action.choices.get(name) if name is not None else None
        return None

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: '([^']*)'", message)
        if wrong:  # a misspelt subcommand or choice
            choices = [str(c) for a in self._actions if a.choices for c in a.choices]
            message += "".join(f"; did you mean {c!r}?" for c in difflib.get_close_matches(wrong[1], choices, n=1))
        print(f"kernelopt: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _did_you_mean(words: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """``; did you mean --open-pr?`` for the first unknown option close to one of ``parser``'s."""
    known = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    for word in words:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
            if close:
                return f"; did you mean {close[0]}?"
    return ""


def _modes(text: str) -> list[str]:
    from .benchmark import parse_modes

    try:
        return parse_modes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _optimizer(text: str) -> str:
    # Imported here, not when the parser is built: bench's modules load for bench alone.
    from .benchmark.records import OPTIMIZERS

    if text not in OPTIMIZERS:
        raise argparse.ArgumentTypeError(f"unknown optimizer {text!r} (known: {', '.join(OPTIMIZERS)})")
    return text


def build_parser(*, backend_flags: bool = True) -> argparse.ArgumentParser:
    """The whole command line; ``backend_flags=False`` leaves out tune's flags of the agent backends (``main``
    does for a command line that is not tune's: listing them imports every backend's module)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("pytest-kernelopt")
    except PackageNotFoundError:  # running from a checkout that is not installed
        own = "unknown"
    parser = _Parser(prog="kernelopt", description="Find, verify and keep faster Triton kernels for torch.compile'd "
                                                   "models.", epilog=SETTINGS_HELP)
    parser.add_argument("--version", action="version", version=f"kernelopt {own}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    k = sub.add_parser("kernels", help="list the Triton kernels and extern calls of a compiled problem",
                       epilog=SETTINGS_HELP)
    _add_problem(k)
    k.add_argument("--json", action="store_true", help="print a JSON list of kernels and extern calls")
    k.add_argument("--dump", type=Path, metavar="DIR", help="write each Triton kernel to DIR/<kernel>.py in candidate format")

    b = sub.add_parser("bench", help="time eager, torch.compile modes and the committed kernels side by side, "
                                     "with correctness against float64 (one child process per problem)",
                       epilog=SETTINGS_HELP)
    b.add_argument("problems", type=Path, nargs="+", metavar="PROBLEM", help="KernelBench-format problem file(s)")
    b.add_argument("--modes", type=_modes, default="eager,default,max-autotune-no-cudagraphs,kernelopt",
                   help="comma-separated, default included: eager, default, max-autotune-no-cudagraphs, kernelopt "
                        "(default: all four)")
    b.add_argument("--json", type=Path, metavar="OUT", help="write every figure to OUT (JSON)")
    add_arguments(b, ["device", "kernels_dir", "config"], notes={"device": "; cpu: no timings"}, helps={
        "kernels_dir": "the kernel store of the kernelopt mode (default: [tool.kernelopt] kernels_dir of each "
                       "problem's project)"})
    b.add_argument("--seconds", type=positive_seconds, default=3.0, metavar="S",
                   help="target seconds of interleaved timing per problem (default 3)")
    b.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                   help="seconds one problem may take in all (default: no limit)")
    b.add_argument("--optimizer", type=_optimizer, default=None, metavar="sgd|adam",
                   help="training problems: time a torch.optim step (SGD or Adam, torch's defaults) after the "
                        "backward, inside every mode's step (default: none)")

    v = sub.add_parser("verify", help="run the verification cascade on candidate kernels (one session)",
                       epilog=SETTINGS_HELP)
    _add_candidate_args(v, several=True)

    a = sub.add_parser("accept", help="verify a candidate and store it as the next version of the kernel",
                       epilog=SETTINGS_HELP)
    _add_candidate_args(a, several=False)
    a.add_argument("--allow-no-gain", action="store_true", help="on a GPU, store a correct candidate that is not faster")
    a.add_argument("--proposed-by", default="human", help="provenance recorded in the manifest (default: human)")
    add_arguments(a, ["kernels_dir"])

    r = sub.add_parser("report", help="render the report of a tuning run from its run directory (run.json, "
                                      "trace.jsonl), or draw the gate's history file (--history)")
    r.add_argument("run_dir", type=Path, nargs="?", metavar="RUN_DIR", help="the run directory `kernelopt tune` wrote")
    r.add_argument("--history", type=Path, metavar="FILE",
                   help="draw the history file of pytest --kernelopt-history (one line per model over commits) as "
                        "history.png, with history.md beside it, in --out (default: FILE's folder)")
    r.add_argument("--format", choices=["md", "html"], default="md", help="report.md (default) or report.html")
    r.add_argument("--out", type=Path, metavar="DIR", help="where to write the report and speedup.png "
                                                          "(default: RUN_DIR)")
    r.add_argument("--templates", type=Path, metavar="DIR",
                   help="your templates folder (default: templates/ beside the nearest pyproject.toml above the "
                        "current folder, if any); its files override the bundled ones of the same name")
    add_arguments(r, ["kernels_dir"], helps={"kernels_dir": "the kernel store the run wrote into, for the diffs "
                                                            "(default: the one run.json records)"})
    t = sub.add_parser("tune", help="let agents propose faster kernels; keep what the cascade accepts",
                       epilog=SETTINGS_HELP)
    t.add_argument("problems", type=Path, nargs="+", metavar="PROBLEM", help="KernelBench-format problem file(s)")
    add_arguments(t, ["agent"])
    if backend_flags:
        _add_backend_options(t)
    add_arguments(t, ["budget_s", "run_budget_s"])
    t.add_argument("--kernel", action="append", default=None, metavar="NAME",
                   help="tune only this kernel (repeatable; default: every kernel above --min-share)")
    add_arguments(t, ["min_share", "seeds", "seed", "timeout", "device", "config", "kernels_dir"])
    t.add_argument("--runs-dir", type=Path, metavar="DIR",
                   help="where run directories go (default: .kernelopt/runs in the problems' project)")
    t.add_argument("--compile-variants", type=_compile_variants, default=None, metavar="NAMES",
                   help="the model-level compile settings tried before the kernel search, comma-separated (default "
                        "on a GPU: " + ",".join(MODEL_VARIANTS) + "; none on a CPU); none: keep model.json's; the "
                        "catalogue: " + ", ".join(VARIANTS))
    t.add_argument("--no-ncu", action="store_true", help="do not run Nsight Compute (roofline estimate only)")
    t.add_argument("--no-pin", action="store_true",
                   help="store only what beats the compiler by the model gain; by default a kernel whose compiler "
                        "pick varies between compiles (Inductor timed several configurations) is pinned to the "
                        "fastest configuration the run measured")
    t.add_argument("--json", action="store_true", help="print the run record (run.json) on stdout")
    t.add_argument("--workers", type=int, default=1, metavar="N",
                   help="tune in N processes, each on a GPU of its own (CUDA_VISIBLE_DEVICES), problems spread "
                        "over them; at most one per visible GPU (default 1)")
    add_arguments(t, ["shard"])
    t.add_argument("--open-pr", action="store_true",
                   help="after the run, push a branch kernelopt/<model>/<kernel> per faster kernel and open or update "
                        "its pull request (GITHUB_TOKEN; without one, print where to open it)")
    add_arguments(t, ["base", "remote"], prefix="with --open-pr: ")

    rf = sub.add_parser("refresh", help="after a compiler upgrade (or a changed model): replay each stale kernel's "
                                        "recipe on the new compiler kernel, store what the cascade passes, retire "
                                        "the rest", epilog=SETTINGS_HELP)
    rf.add_argument("problems", type=Path, nargs="*", metavar="PROBLEM",
                    help="problem file(s) (default: [tool.kernelopt] problems of the current project)")
    add_arguments(rf, ["device", "config", "kernels_dir"])
    rf.add_argument("--runs-dir", type=Path, metavar="DIR",
                    help="where the run directory goes (default: .kernelopt/runs in the problems' project); "
                         "`kernelopt publish` takes it")
    add_arguments(rf, ["seeds", "seed", "timeout"])
    rf.add_argument("--json", action="store_true", help="print the refresh record (refresh.json) on stdout")

    pub = sub.add_parser("publish", help="push the branches and open or update the pull requests of a finished tuning "
                                         "run (what `tune --open-pr` does at its end), e.g. from a CI artifact; "
                                         "refuses a run whose stored files changed since")
    pub.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory `kernelopt tune` wrote")
    add_arguments(pub, ["kernels_dir"], helps={
        "kernels_dir": "the kernel store holding the run's versions (default: the one run.json records when it lies "
                       "in this repository, else [tool.kernelopt] kernels_dir of the current project)"})
    add_arguments(pub, ["base", "remote"])
    pub.add_argument("--json", action="store_true", help="print what was published per kernel as JSON on stdout")

    m = sub.add_parser("merge", help="combine the --kernelopt-json results of a gate's shards into one table and "
                                     "one result; exit 1 when an item failed")
    m.add_argument("results", type=Path, nargs="+", metavar="SHARD.json",
                   help="the result of each shard (pytest --kernelopt --kernelopt-shard K/N --kernelopt-json ...)")
    m.add_argument("--json", type=Path, metavar="OUT", help="write the merged result to OUT")
    m.add_argument("--report", type=Path, metavar="PATH",
                   help="write the merged gate report (Markdown, as --kernelopt-report) to PATH, e.g. for "
                        "$GITHUB_STEP_SUMMARY")
    m.add_argument("--history", type=Path, metavar="FILE",
                   help="append the merged run's model times to the history file FILE (as --kernelopt-history)")
    c = sub.add_parser("comment", help="post the gate's result as one comment on the pull request (base and head "
                                       "time per model, failures), updating that comment on later runs")
    c.add_argument("result", type=Path, metavar="RESULT.json",
                   help="the gate's result (pytest --kernelopt --kernelopt-json, or kernelopt merge --json)")
    c.add_argument("--repo", metavar="OWNER/NAME", help="the repository (default: $GITHUB_REPOSITORY)")
    c.add_argument("--pr", type=_pull_request, metavar="N",
                   help="the pull request (default: the one of the workflow's event, $GITHUB_EVENT_PATH)")
    c.add_argument("--author", default="github-actions[bot]", metavar="LOGIN",
                   help="only a comment by LOGIN is updated (default: github-actions[bot], the workflow token's; "
                        "give the account of your token when it is another)")
    c.add_argument("--templates", type=Path, metavar="DIR",
                   help="your templates folder (default: templates/ beside the nearest pyproject.toml above the "
                        "current folder, if any); its gate_comment.md.j2 overrides the bundled one")
    c.add_argument("--print", action="store_true", dest="print_only",
                   help="print the comment's Markdown instead of posting it (no token needed)")
    return parser


def _pull_request(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a pull request number: {text!r}")
    return int(text)


def _add_problem(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", type=Path, help="a KernelBench-format problem file (class Model, get_inputs, "
                                              "get_init_inputs)")
    p.add_argument("--shape", metavar="NAME", help="a shape the problem declares (SHAPES, docs/problems.md); "
                                                   "verify and accept need it when it declares several")
    add_arguments(p, ["device", "config"])


def _add_candidate_args(p: argparse.ArgumentParser, several: bool) -> None:
    _add_problem(p)
    p.add_argument("--kernel", required=True, help="name of the compiler kernel to replace (see `kernelopt kernels`)")
    p.add_argument("--candidate", required=True, type=Path, nargs="+" if several else None, metavar="FILE",
                   help="candidate file(s) (see docs/candidate-language.md)" if several else
                        "candidate file (see docs/candidate-language.md)")
    add_arguments(p, ["seeds", "seed", "timeout", "allow_reduced_precision"])
    p.add_argument("--json", action="store_true",
                   help="print the verdict as JSON (verify with several candidates: a list)")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The backends' flags cost about 0.3 s of imports (the agents' records, measured 2026-12-05): only a
    # command line that may be tune's pays for them.
    args = build_parser(backend_flags="tune" in argv).parse_args(argv)
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
    with _sigterm_as_interrupt():
        return _run(args)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While a command runs, SIGTERM stops it as Ctrl-C does (:class:`~.errors.Terminated`): a tune keeps and
    summarises what finished, its workers and verifier processes are stopped, exit 130. Only from the main thread
    and only where SIGTERM still has its default action (a host program's own handler is left alone)."""
    import signal
    import threading

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "kernels":
            return cmd_kernels(args)
        if args.command == "merge":
            return cmd_merge(args)
        if args.command == "comment":
            return cmd_comment(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "publish":
            return cmd_publish(args)
        if args.command == "refresh":
            return cmd_refresh(args)
        return cmd_verify_or_accept(args)
    except KerneloptError as exc:
        print(f"kernelopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(f"kernelopt: {_interrupt_word(exc)}", file=sys.stderr)
        return 130


def _interrupt_word(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def _settings(args: argparse.Namespace) -> Any:
    from .config import config_for_problem

    return config_for_problem(args.problem, config=args.config)


def _device(args: argparse.Namespace, settings: Any) -> str:
    from .config import resolve_device

    return resolve_device(args.device or settings.device)


def cmd_kernels(args: argparse.Namespace) -> int:
    from .capture.problem import load_problem

    problem = load_problem(args.problem, shape=args.shape)  # bad file: exit 2 before torch compiles anything
    settings = _settings(args)
    device = _device(args, settings)
    from .capture import compile_problem
    from .store import KernelStore

    store = KernelStore(settings.kernels_path)
    # A problem with SHAPES: every declared shape (or the one --shape names), each compiled at its inputs.
    shapes = [problem.shape] if args.shape or not problem.shapes else list(problem.shapes)
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        # Under model.json's compile settings at the shape: the kernels verify, accept and the gate refer to.
        variant, configs = store.compile_variant(problem.id, shape), store.launch_configs(problem.id, shape)
        at = problem.at(shape) if shape is not None else problem
        compiled = compile_problem(at, device, variant=variant, launch_configs=configs)  # a failing model: one line
        summary = compiled.summary()
        if shape == shapes[0]:
            print(f"settings: {settings.describe(None)}", file=sys.stderr)
        if variant is not None:
            print(f"compiled{f' at shape {shape}' if shape is not None else ''} as {variant!r} (model.json's compile "
                  f"settings)" + (f", {compiled.launches_fixed} kernel(s) at its recorded launch configurations"
                                  if configs else ""), file=sys.stderr)
        if shape == shapes[0]:
            for why in compiled.launches_refused:
                print(f"warning: a recorded launch configuration is not used (the kernel races as Inductor does): "
                      f"{why}", file=sys.stderr)
            if compiled.draws is not None:
                from .capture.compiled import random_draws_error

                print(f"warning: {random_draws_error(problem, compiled.draws)} (verify, accept, tune and bench refuse "
                      "it, and the gate fails it where kernels are committed)", file=sys.stderr)
        if args.dump:
            from .candidate import write_dumps

            folder = args.dump / shape if len(shapes) > 1 and shape is not None else args.dump
            paths = write_dumps(summary.kernels, problem.id, folder)
            if not args.json:
                print(f"wrote {len(paths)} candidate file(s) to {folder.resolve()}", file=sys.stderr)
        if args.json:
            extra = {"shape": shape} if shape is not None else {}
            rows += [{**k.model_dump(exclude={"source"}), **extra} for k in summary.kernels]
            rows += [{**e.model_dump(), **extra} for e in summary.externs]
            continue
        from .report import kernels_table, print_table

        if shape is not None:
            print(f"shape {shape} ({_overrides(at.shapes[shape])}): stored as kernels/{problem.id}/<kernel>@{shape}/, "
                  f"--shape {shape} for verify and accept", file=sys.stderr)
        print_table(kernels_table(summary, shape))
        if not summary.kernels:
            targets = sorted({e.target for e in summary.externs})
            print(f"{problem.id}: no Triton kernels: Inductor generated none"
                  + (f"; the model runs {len(summary.externs)} extern call(s) ({', '.join(targets)}), which kernelopt "
                     "leaves alone" if targets else ""), file=sys.stderr)
        if compiled.graph_breaks:
            print(f"{problem.id}: Dynamo broke the model's graph ({'; '.join(compiled.graph_breaks)}): the code past a "
                  "break is compiled as another graph or runs eagerly, and Inductor generates no kernel for what runs "
                  "eagerly (TORCH_LOGS=graph_breaks shows where)", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
    return EXIT_OK


def _overrides(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in overrides.items()) or "the file's own globals"


def _shape_for(args: argparse.Namespace, problem: Any) -> Any:
    """The problem at ``--shape``; a problem with several SHAPES needs one (the error lists them)."""
    if args.shape is None and len(problem.shapes) > 1:
        raise UsageError(f"{problem.path}: declares {len(problem.shapes)} shapes ({', '.join(problem.shapes)}); "
                         f"name one with --shape (a version is verified and stored per shape)")
    return problem.at(args.shape) if args.shape is not None or problem.shapes else problem


def cmd_bench(args: argparse.Namespace) -> int:
    """Exit 0: the bench ran (error rows and incorrect modes are reported, not gated); 2: bad input, or
    every problem failed."""
    from . import benchmark
    from .config import config_for_problem, resolve_device

    for path in args.problems:  # a missing file is bad input; anything wrong inside one is its error row
        if not path.is_file() or path.suffix != ".py":
            raise UsageError(f"{path}: {'not a .py file' if path.is_file() else 'no such file'}")
    settings = [config_for_problem(p, config=args.config) for p in args.problems]
    requested = args.device or settings[0].device
    # Interpreter mode needs no torch in this process; the children resolve the device themselves.
    device = "cpu" if requested == "cpu" else resolve_device(requested)
    print(f"settings: {settings[0].describe(args.kernels_dir)}", file=sys.stderr)
    from .capture.shapes import declared_names

    # A row group per (problem, declared shape); a SHAPES the text does not show: the child benches its first.
    jobs = [benchmark.BenchJob(problem=str(p.resolve()), modes=args.modes, device=device, seconds=args.seconds,
                               kernels_dir=str(kernels_folder(s, args.kernels_dir)), shape=shape,
                               optimizer=args.optimizer)
            for p, s in zip(args.problems, settings) for shape in (declared_names(p) or (None,))]
    result = benchmark.run_bench(jobs, benchmark.BenchSettings(modes=args.modes, device=requested,
                                                               seconds=args.seconds, timeout=args.timeout,
                                                               optimizer=args.optimizer))
    benchmark.print_bench(result)
    if args.json:
        benchmark.write_json(result, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    return EXIT_USAGE if len(result.failed) == len(result.problems) else EXIT_OK


def verdict_lines(verdict: Any) -> list[str]:
    """One line per stage, then the verdict."""
    marks = {True: "pass", False: "FAIL", None: "skip"}
    width = max([6, *(len(s.name) for s in verdict.stages)]) + 1  # the stages' names, aligned
    lines = [f"{s.name:<{width}} {marks[s.passed]:<4} {s.seconds:6.1f}s  {s.detail}" for s in verdict.stages]
    if verdict.reference == "eager":
        lines.append(f"note: judged against the fp32 eager model, not float64 ({verdict.reference_note})")
    tail = f"verdict: {verdict.status}"
    failed = next((s for s in verdict.stages if s.passed is False), None)
    if verdict.status == "rejected" and failed is not None:  # its reason is that stage's line: said once
        tail += f" at {failed.name} (the FAIL line above)"
    elif verdict.reason:
        tail += f" ({verdict.reason})"
    if verdict.status == "rejected" and getattr(verdict, "seed", None) is not None:
        tail += f" [inputs from seed {verdict.seed}: reproduce with --seed {verdict.seed}]"
    lines.append(tail)
    return lines


def _compile_variants(text: str) -> list[str]:
    """``--compile-variants``: names from the catalogue (capture/variants.py), or none."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown compile variant(s) {', '.join(unknown) or repr(text)} "
                                         f"(known: {', '.join(VARIANTS)}; or none)")
    return names


def _verify_options(args: argparse.Namespace, *, exact: bool = False) -> Any:
    """The verifier's options of a subcommand (verify, accept, tune, refresh), from its flags: built here alone.
    ``exact``: a --seed reproduces a run (``verify``); elsewhere it only adds its seeds to fresh ones."""
    from pydantic import ValidationError

    from .verify.options import VerifyOptions

    try:
        return VerifyOptions(seeds=args.seeds, seed=args.seed, timeout=args.timeout, exact=exact,
                             allow_reduced_precision=getattr(args, "allow_reduced_precision", False))
    except ValidationError as exc:
        raise UsageError(f"bad option: {exc.errors()[0]['msg']}") from exc


def cmd_verify_or_accept(args: argparse.Namespace) -> int:
    from .verify import read_candidate
    from .verify.worker import WorkerProcess

    candidates = args.candidate if isinstance(args.candidate, list) else [args.candidate]
    sources = [read_candidate(c) for c in candidates]  # read once: these bytes run and are stored
    # The session's worker, started now: it imports torch and Inductor while this process loads the problem.
    # What starting it says (no namespaces here) is said when the session opens, not before a bad input's error.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        worker = WorkerProcess()
    try:
        return _verify_or_accept(args, sources, worker, said)
    finally:
        worker.close()  # unused (a bad problem file, bytes already stored), or already closed by the session


def _verify_or_accept(args: argparse.Namespace, sources: list[Any], worker: Any,
                      said: list[warnings.WarningMessage]) -> int:
    from .capture.problem import load_problem
    from .verify import VerifySession

    problem = _shape_for(args, load_problem(args.problem))  # a bad problem file is exit 2 before any check runs
    settings = _settings(args)
    device = _device(args, settings)
    # verify reproduces a --seed exactly; accept stores a kernel, so its --seed only adds seeds.
    options = _verify_options(args, exact=args.command == "verify")
    from .store import KernelStore

    store = KernelStore(kernels_folder(settings, getattr(args, "kernels_dir", None)))
    variant = store.compile_variant(problem.id, problem.shape)  # model.json's compile settings at the shape: its
    configs = store.launch_configs(problem.id, problem.shape)  # kernels are that compile's, at these launches
    if args.command == "accept":  # a name the store cannot hold: say so before the verification runs
        store.kernel_dir(problem.id, problem.store_name(args.kernel))
        # The same bytes, stored and verified before: the answer is known without the cascade.
        known = store.already_stored(problem.id, problem.store_name(args.kernel), sources[0].source)
        if known is not None:
            if args.json:
                print(json.dumps({"status": None, "stored": None, "message": known.message,
                                  "version": known.record.version if known.record else None,
                                  "active": known.active}, indent=2))
            else:
                print(known.message)
            return EXIT_OK if known.active else EXIT_REJECTED
    say = (lambda text: None) if args.json else (lambda text: print(text, file=sys.stderr))
    say(f"settings: {settings.describe(getattr(args, 'kernels_dir', None))}")
    verdicts = []
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    with VerifySession(problem.path, device, options, progress=say, variant=variant, shape=problem.shape,
                       worker=worker, launch_configs=configs) as session:
        for source in sources:
            at = f" at shape {problem.shape}" if problem.shape else ""
            say(f"verifying {source.label} as {args.kernel} of {problem.id}{at} on {device} ...")
            verdicts.append(session.verify(args.kernel, source))
            if not args.json and args.command == "verify":
                print("\n".join(verdict_lines(verdicts[-1])), flush=True)
    if args.command == "verify":
        if args.json:
            extra = {"shape": problem.shape} if problem.shape else {}  # the declared shape verified at
            payload = [{**json.loads(v.model_dump_json()), **extra} for v in verdicts]
            print(json.dumps(payload if len(payload) > 1 else payload[0], indent=2))
        return EXIT_REJECTED if any(v.status == "rejected" for v in verdicts) else EXIT_OK
    return _accept(args, settings, problem.id, verdicts[0], problem.shape)


def _accept(args: argparse.Namespace, settings: Any, model: str, verdict: Any, shape: str | None = None) -> int:
    from .store import KernelStore, Provenance, accept_verdict

    store = KernelStore(kernels_folder(settings, args.kernels_dir))
    outcome = accept_verdict(store, model, args.kernel, verdict.verified_source, verdict, allow_no_gain=args.allow_no_gain,
                             provenance=Provenance(proposed_by=args.proposed_by), shape=shape)
    if args.json:
        out = json.loads(verdict.model_dump_json())
        if shape:
            out["shape"] = shape
        out["stored"] = outcome.record.model_dump(mode="json") if outcome.stored and outcome.record else None
        out["message"] = outcome.message
        print(json.dumps(out, indent=2))
    else:
        # A rejection's reason is the FAIL line of verdict_lines; outcome.message repeats it for other callers.
        print("\n".join([*verdict_lines(verdict), "not stored" if verdict.status == "rejected" else outcome.message]))
    if outcome.stored or (outcome.record is not None and outcome.active):
        return EXIT_OK  # stored now, or these very bytes are already the active version
    return EXIT_REJECTED


def cmd_report(args: argparse.Namespace) -> int:
    from .report import write_report
    from .templates import project_templates

    if args.run_dir is None and args.history is None:
        raise UsageError("report: give RUN_DIR (a tuning run's report), --history FILE (the gate's history chart), "
                         "or both")
    templates = args.templates if args.templates is not None else project_templates()
    if args.history is not None:
        from .report.history import write_history_report

        page, chart, note = write_history_report(args.history, args.out, templates)
        print(f"wrote {page}")
        print(f"wrote {chart}" if chart else note)
    if args.run_dir is None:
        return EXIT_OK
    files = write_report(args.run_dir, args.out, fmt=args.format, templates_dir=templates,
                         kernels_dir=args.kernels_dir)
    print(f"wrote {files.report}")
    print(f"wrote {files.chart}" if files.chart else files.chart_note)
    return EXIT_OK


def cmd_tune(args: argparse.Namespace) -> int:
    """Exit 0: the run finished (whether or not anything faster was found); 2: bad input, or a
    problem that could not be tuned (the others still were); 130: interrupted (what was stored stays)."""
    from .agents import TuneOptions, tune
    from .agents.backends import chosen_options
    from .agents.progress import RichUI
    from .config import config_for_problem, resolve_device
    from .capture.problem import load_problem
    from .store import KernelStore

    try:
        validate("min_share", args.min_share)  # the field's bounds
    except ValueError:
        raise UsageError(f"--min-share must be between 0 and 1, not {args.min_share}") from None
    if not args.open_pr and (args.base is not None or args.remote != FIELDS["remote"].default):
        raise UsageError("--base and --remote apply to --open-pr only: without it tune pushes nothing (add --open-pr, "
                         "or run `kernelopt publish RUN_DIR --base BRANCH` after the run)")
    problems = [load_problem(p).path for p in args.problems]  # every file checked before any work
    settings = [config_for_problem(p, config=args.config) for p in problems]
    if args.kernels_dir is None and len({s.kernels_path for s in settings}) > 1:
        raise UsageError("the problems belong to projects with different kernel stores; tune them separately "
                         "or pass --kernels-dir")
    agent_options = chosen_options(args.agent, _backend_flags_given(args))
    device = resolve_device(args.device or settings[0].device)
    store = KernelStore(kernels_folder(settings[0], args.kernels_dir))
    runs = runs_folder(settings[0], args.runs_dir)
    if args.open_pr:  # a repository the pull requests cannot come from: say so before any tuning
        from .gitops import PublishError, check_repository

        try:
            check_repository(settings[0].root, args.remote, store.root, base=args.base)
        except PublishError as exc:
            raise UsageError(f"--open-pr: {exc}") from None
    if args.shard is not None:
        from .shard import parse_shard, shard_of

        try:
            shard = parse_shard(args.shard)
        except UsageError as exc:
            raise UsageError(f"--shard {exc}") from None
        mine = [p for p in problems if shard_of(p.stem, shard.count) == shard.index]
        print(f"shard {shard}: {len(mine)} of {len(problems)} problem(s): {', '.join(p.stem for p in mine) or 'none'}",
              file=sys.stderr)
        problems = mine
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, not {args.workers}")
    # Tune stores kernels: a --seed only adds its seeds to fresh ones (never exact).
    options = TuneOptions(device=device, budget_s=args.budget_s, run_budget_s=args.run_budget_s,
                          verify=_verify_options(args),
                          min_share=args.min_share, kernels=args.kernel, ncu=not args.no_ncu, pin=not args.no_pin,
                          compile_variants=args.compile_variants)
    with RichUI(quiet=args.json) as ui:
        ui.message(f"settings: {settings[0].describe(args.kernels_dir)}")
        if device != "cuda":
            ui.message("interpreter mode: candidates are checked for correctness only; speed is not measured and "
                       "nothing is stored as faster")
            ui.message(f"budget: {args.budget_s:g} s of checks per kernel (--budget-s); in interpreter mode one "
                       "candidate's checks take tens of seconds, so only a few candidates fit: raise --budget-s to "
                       "try more")
        stopped_by = "interrupted"
        try:
            if args.workers > 1:
                from .agents.multi_gpu import tune_workers

                record = tune_workers(problems, options, args.workers, runs, agent=args.agent,
                                      agent_options=agent_options, kernels_dir=store.root, say=ui.message)
            else:
                record = tune(problems, options, agent=args.agent, agent_options=agent_options, store=store,
                              runs_dir=runs, ui=ui)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the summary of what finished, then exit 130
            interrupted = getattr(exc, "kernelopt_record", None)
            if interrupted is None:
                raise
            record = interrupted
            stopped_by = _interrupt_word(exc)
    if args.json:
        print(record.model_dump_json(indent=2))
    else:
        from .agents.progress import print_tune_table

        print_tune_table(record)
        print(f"run directory: {Path(runs) / record.run_id}")
        if (device != "cuda" and not any(k.stored_version for p in record.problems for k in p.kernels)
                and any(p.error is None for p in record.problems)):  # where every problem failed, its error says why
            correct = [a.file for p in record.problems for k in p.kernels for a in k.history
                       if a.status in ("correct", "accepted") and a.file]
            print(_nothing_stored(Path(runs) / record.run_id, correct))
    if record.interrupted:
        print(f"kernelopt: {stopped_by}", file=sys.stderr)
        return 130
    published_ok = _publish(args, Path(runs) / record.run_id, settings[0].root) if args.open_pr else True
    return EXIT_USAGE if any(p.error for p in record.problems) else EXIT_OK if published_ok else EXIT_REJECTED


# A backend's flags keep their values under this prefix: they may share no name with tune's own options.
_BACKEND_DEST = "backend_option_"


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    """Every registered backend's flags (``--model``, ``--max-usd`` ...), from the options each declares; which
    of them the chosen backend takes is checked after parsing (:func:`_backend_flags_given`)."""
    from .agents import backends  # here, not at the top: it imports the agents (see main)

    for flag, options in backends.option_flags().items():
        kwargs: dict[str, Any] = {"action": "store_true"} if options[0].switch else {"metavar": options[0].metavar}
        try:
            parser.add_argument(flag, dest=_BACKEND_DEST + options[0].name, default=None,
                                help="; ".join(o.help for o in options).replace("%", "%%"), **kwargs)
        except argparse.ArgumentError:
            raise TypeError(f"agent backend {options[0].backend!r} declares {flag}, already an option of "
                            f"`{parser.prog}`") from None


def _backend_flags_given(args: argparse.Namespace) -> dict[str, Any]:
    """{flag: its text (True for a switch)} of the backend flags on the command line."""
    from .agents.backends import flag_of

    return {flag_of(dest.removeprefix(_BACKEND_DEST)): value for dest, value in vars(args).items()
            if dest.startswith(_BACKEND_DEST) and value is not None}


def _nothing_stored(run_dir: Path, correct: list[str]) -> str:
    """The last line of a tune on a CPU: it stored nothing, and what does store a kernel there (``correct``: the
    run's candidate files judged correct, relative to ``run_dir``; the hint names their folder only if any)."""
    return ("nothing stored: interpreter mode measures no speed, so tune keeps no kernel; `kernelopt accept "
            "PROBLEM.py --kernel NAME --candidate FILE` verifies a candidate and stores it when correct (no speed "
            "comparison on a CPU)" + (f", e.g. one of the {len(correct)} judged correct in {run_dir / 'candidates'}"
                                      if correct else ""))


def _publish(args: argparse.Namespace, run_dir: Path, project: Path) -> bool:
    """``tune --open-pr``: branches and pull requests for what the run stored; False when one was
    refused or failed (each says why on its own line)."""
    from .gitops import publish_run

    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    results = publish_run(run_dir, project, base=args.base, remote=args.remote, open_pr=True, progress=say)
    return all(r.ok for r in results)


def cmd_publish(args: argparse.Namespace) -> int:
    """Exit 0: every kernel published (or nothing to publish); 1: one was refused or failed (each says
    why on its own line); 2: bad input, a repository it cannot publish from (the checks of
    ``tune --open-pr``), or a run whose stored files changed since the run (naming the file)."""
    from dataclasses import asdict

    from .runs.trace import load_run
    from .config import load_config
    from .gitops import PublishError, check_repository, publish_run, store_for_run

    record, _ = load_run(args.run_dir)  # not a run directory: exit 2 before git is touched
    settings = load_config()
    try:
        top = check_repository(settings.root, args.remote)
        store = store_for_run(args.run_dir, top, args.kernels_dir, settings.kernels_path)
        check_repository(top, args.remote, store, base=args.base)
    except PublishError as exc:
        raise UsageError(f"publish: {exc}") from None
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    say(f"publishing run {record.run_id} from the kernel store {store.relative_to(top).as_posix() or '.'}")
    results = publish_run(args.run_dir, top, base=args.base, remote=args.remote, open_pr=True, progress=say,
                          kernels_dir=store)
    if args.json:
        print(json.dumps({"run_id": record.run_id, "kernels_dir": store.relative_to(top).as_posix(),
                          "results": [{**asdict(r), "ok": r.ok} for r in results]}, indent=2))
    return EXIT_OK if all(r.ok for r in results) else EXIT_REJECTED


def cmd_refresh(args: argparse.Namespace) -> int:
    """Exit 0: every stale kernel was handled (refreshed, retired, or reported not refreshable and retired);
    2: bad input, or a problem that could not be refreshed (a file that fails to import, compile failure, broken
    store, the verifier's own failure; the other problems still were); 130: interrupted (what was stored or retired stays)."""
    from .config import config_for_problem, load_config, resolve_device
    from .capture.problem import load_problem
    from .agents.refresh import ProblemRefresh, refresh
    from .report.terminal import refresh_table
    from .errors import ProblemError
    from .report import print_table
    from .store import KernelStore

    paths = args.problems
    if not paths:
        project = config_for_problem(args.config, config=args.config) if args.config else load_config()
        paths = project.problem_files()
        if not paths and project.problems:  # configured, but a typo or a moved folder: name the patterns
            raise UsageError(f"no problem files given, and the problems of {project.source} [tool.kernelopt] match "
                             f"none: {', '.join(map(repr, project.unmatched()))} matched nothing under {project.root}")
        if not paths:
            raise UsageError(f"no problem files given and none configured ({project.describe(None)}): pass "
                             f"PROBLEM.py or set problems in [tool.kernelopt]")
        for pattern in project.unmatched():
            print(f"note: {pattern!r} of [tool.kernelopt] problems matched no problem file", file=sys.stderr)
    # A file that fails to load is its own error row; the others are still refreshed (as in bench and the gate).
    problems, failed = [], []
    for p in paths:
        try:
            problems.append(load_problem(p).path)  # a problem with SHAPES: refreshed per declared shape
        except ProblemError as exc:
            failed.append(ProblemRefresh(model=Path(p).stem, problem=str(Path(p).resolve()), error=str(exc)))
    if not problems:  # nothing to go on with: one error line
        raise UsageError("; ".join(str(f.error) for f in failed))
    for f in failed:
        print(f"kernelopt: error: {f.error} (not refreshed; the other problems are)", file=sys.stderr)
    settings = [config_for_problem(p, config=args.config) for p in problems]
    if args.kernels_dir is None and len({s.kernels_path for s in settings}) > 1:
        raise UsageError("the problems belong to projects with different kernel stores; refresh them separately "
                         "or pass --kernels-dir")
    device = resolve_device(args.device or settings[0].device)
    store = KernelStore(kernels_folder(settings[0], args.kernels_dir))
    runs = runs_folder(settings[0], args.runs_dir)

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    say(f"settings: {settings[0].describe(args.kernels_dir)}")
    if device != "cuda":
        say("interpreter mode: replayed kernels are checked for correctness only; speed is not measured, so a "
            "correct one is stored without a speed comparison")
    record = refresh(problems, store, device, _verify_options(args), runs_dir=runs, say=say, failed=failed)
    if args.json:
        print(record.model_dump_json(indent=2))
    else:
        print_table(refresh_table(record))
        print(f"run directory: {record.run_dir} (`kernelopt publish` opens the pull requests)")
    errors = [p for p in record.problems if p.error]
    if errors:  # after the others were refreshed: say which were not, then exit 2
        print(f"kernelopt: error: {len(errors)} problem(s) not refreshed: {', '.join(p.problem for p in errors)}",
              file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_merge(args: argparse.Namespace) -> int:
    from .errors import MergeError
    from .runs import gate_result as results
    from .gate.output import summary_lines
    from .report.untrusted import plain

    try:
        merged = results.merge([(str(path), results.read(path)) for path in args.results])
    except MergeError as exc:  # it quotes the result files (node ids, names): escaped like a candidate's text
        raise MergeError(plain(str(exc), lines=False)) from None
    print("\n".join(summary_lines(merged)))
    if args.json:
        results.write(merged, args.json)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.report:
        from .report.gate import write_gate_report
        from .templates import project_templates

        write_gate_report(merged, args.report, project_templates())
        print(f"wrote {args.report}", file=sys.stderr)
    if args.history:
        from .gitops.history import append_history

        print(append_history(merged, args.history, Path.cwd()), file=sys.stderr)
    return EXIT_REJECTED if merged.failed else EXIT_OK


def cmd_comment(args: argparse.Namespace) -> int:
    """Exit 0: the comment was created or updated (or printed); 2: bad input, or GitHub refused (one line saying
    what to fix: the token, its permissions, the repository or pull request)."""
    from .runs import gate_result as results
    from .gitops.comment import comment_body, post_comment
    from .templates import project_templates

    result = results.read(args.result)
    templates = args.templates if args.templates is not None else project_templates()
    if args.print_only:
        print(comment_body(result, templates), end="")
        return EXIT_OK
    posted = post_comment(result, repo=args.repo, pr=args.pr, author=args.author or None, templates_dir=templates)
    print(f"{posted.action} comment {posted.id}{f': {posted.url}' if posted.url else ''}")
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
