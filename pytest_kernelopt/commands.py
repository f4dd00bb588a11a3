"""``kernelopt verify`` and ``kernelopt accept``: the cascade from the command line."""

from __future__ import annotations

import argparse
import sys

from .errors import UsageError
from .records import Verdict

EXIT_OK, EXIT_REJECTED = 0, 1


def verdict_lines(verdict: Verdict) -> list[str]:
    """One line per stage, then the verdict."""
    marks = {True: "pass", False: "FAIL", None: "skip"}
    lines = [f"{s.name:<7} {marks[s.passed]:<4} {s.seconds:6.1f}s  {s.detail}" for s in verdict.stages]
    tail = f"verdict: {verdict.status}"
    if verdict.reason:
        tail += f" ({verdict.reason})"
    lines.append(tail)
    return lines


def _check_args(args: argparse.Namespace) -> None:
    if not args.candidate.is_file():
        raise UsageError(f"{args.candidate}: no such candidate file")
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")


def cmd_verify_or_accept(args: argparse.Namespace) -> int:
    from .cascade import CascadeOptions, verify
    from .cli import _device
    from .problem import load_problem

    _check_args(args)
    load_problem(args.problem)  # a bad problem file is exit 2 before any worker starts
    device = _device(args)
    options = CascadeOptions(seeds=args.seeds, timeout=args.timeout, allow_reduced_precision=args.allow_reduced_precision)
    if not args.json:
        print(f"verifying {args.candidate} as {args.kernel} of {args.problem.stem} on {device} ...", file=sys.stderr)
    verdict = verify(args.problem, args.kernel, args.candidate, device, options)
    if args.command == "verify":
        print(verdict.model_dump_json(indent=2) if args.json else "\n".join(verdict_lines(verdict)))
        return EXIT_REJECTED if verdict.status == "rejected" else EXIT_OK
    from .store import accept_verdict

    record, message = accept_verdict(args.problem, args.kernel, args.candidate, verdict,
                                     allow_no_gain=args.allow_no_gain, proposed_by=args.proposed_by)
    if args.json:
        import json

        out = json.loads(verdict.model_dump_json())
        out["stored"] = record.model_dump(mode="json") if record else None
        out["message"] = message
        print(json.dumps(out, indent=2))
    else:
        print("\n".join([*verdict_lines(verdict), message]))
    return EXIT_OK if record is not None else EXIT_REJECTED
