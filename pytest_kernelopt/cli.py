"""The ``kernelopt`` command line.

Exit codes (a contract, documented in the README):
    0  success (verify/accept: the candidate is correct, or accepted)
    1  verify/accept: the candidate was rejected
    2  bad input: missing file, not a problem file, unknown kernel, bad option
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Sequence

from .errors import KerneloptError

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default=None,
                   help="where to run (default: [tool.kernelopt] device, else auto: cuda if present, else cpu interpreter mode)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelopt", description="Find, verify and keep faster Triton kernels for torch.compile'd models.")
    sub = parser.add_subparsers(dest="command", required=True)

    k = sub.add_parser("kernels", help="list the Triton kernels and extern calls of a compiled problem")
    k.add_argument("problem", type=Path)
    _add_device(k)
    k.add_argument("--json", action="store_true", help="print a JSON list of kernels and extern calls")
    k.add_argument("--dump", type=Path, metavar="DIR", help="write each Triton kernel to DIR/<kernel>.py in candidate format")

    v = sub.add_parser("verify", help="run the verification cascade on a candidate kernel")
    _add_candidate_args(v)

    a = sub.add_parser("accept", help="verify a candidate and store it as the next version of the kernel")
    _add_candidate_args(a)
    a.add_argument("--allow-no-gain", action="store_true", help="on a GPU, store a correct candidate that is not faster")
    a.add_argument("--proposed-by", default="human", help="provenance recorded in the manifest (default: human)")
    return parser


def _add_candidate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", type=Path)
    p.add_argument("--kernel", required=True, help="name of the compiler kernel to replace (see `kernelopt kernels`)")
    p.add_argument("--candidate", required=True, type=Path, help="candidate file (see README: candidate format)")
    _add_device(p)
    p.add_argument("--seeds", type=int, default=3, help="input seeds for the kernel and model stages (default 3)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the isolated worker may take (default 300)")
    p.add_argument("--allow-reduced-precision", action="store_true",
                   help="accept candidates that compute in fp16/bf16/TF32 where the compiler kernel did not")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
    try:
        if args.command == "kernels":
            return cmd_kernels(args)
        if args.command in ("verify", "accept"):
            from .commands import cmd_verify_or_accept

            return cmd_verify_or_accept(args)
    except KerneloptError as exc:
        print(f"kernelopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kernelopt: interrupted", file=sys.stderr)
        return 130
    return EXIT_USAGE


def _device(args: argparse.Namespace) -> str:
    from .config import load_config, resolve_device

    return resolve_device(args.device or load_config().device)


def cmd_kernels(args: argparse.Namespace) -> int:
    from .problem import load_problem

    problem = load_problem(args.problem)  # bad file: exit 2 before torch compiles anything
    device = _device(args)
    from .capture import compile_problem

    compiled = compile_problem(problem, device)
    summary = compiled.summary()
    if args.dump:
        from .candidate import write_dumps

        paths = write_dumps(summary.kernels, problem.id, args.dump)
        if not args.json:
            print(f"wrote {len(paths)} candidate file(s) to {args.dump}", file=sys.stderr)
    if args.json:
        import json

        rows = [k.model_dump(exclude={"source"}) for k in summary.kernels] + [e.model_dump() for e in summary.externs]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from .report import kernels_table, print_table

    print_table(kernels_table(summary))
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
