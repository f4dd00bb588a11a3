"""The run directory of one tuning run: ``trace.jsonl``, ``run.json`` and every candidate tried.

    <runs>/<run_id>/
        run.json                      RunRecord: per problem and kernel, what came of it
        trace.jsonl                   one TraceEvent per line, appended and flushed as it happens
        profile/<model>.json          ModelProfile
        candidates/<model>/<kernel>/<NNN>-<sha12>.py   the exact bytes each attempt verified

``run.json`` is rewritten atomically after every kernel, so a crash or Ctrl-C leaves
the record of everything finished; the trace keeps each step up to the moment of
the interruption.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..records import at_shape, dump_json, load_json
from ..store.files import atomic_write
from .records import ModelProfile, RunRecord, TraceEvent

RUN_FILE = "run.json"
TRACE_FILE = "trace.jsonl"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


class RunDir:
    """Writes one run's files; every write is complete on disk when the call returns."""

    def __init__(self, root: Path, record: RunRecord):
        self.root = Path(root)
        self.record = record
        self._t0 = time.monotonic()
        self._count = 0
        try:
            self.root.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise UsageError(f"{self.root}: a run directory of that name exists already") from None
        except OSError as exc:
            raise UsageError(f"{self.root}: cannot create the run directory ({exc.strerror or exc})") from exc
        self._trace = (self.root / TRACE_FILE).open("a", encoding="utf-8")
        self.save()

    @classmethod
    def create(cls, runs: Path, record: RunRecord) -> RunDir:
        """A fresh folder under ``runs`` named after the run id (suffixed if taken)."""
        root = Path(runs) / record.run_id
        n = 1
        while root.exists():
            n += 1
            root = Path(runs) / f"{record.run_id}-{n}"
        if root.name != record.run_id:
            record.run_id = root.name
        return cls(root, record)

    def event(self, role: str, event: str, *, model: str | None = None, kernel: str | None = None,
              **data: Any) -> TraceEvent:
        entry = TraceEvent(t=round(time.monotonic() - self._t0, 3), role=role, event=event, model=model,
                           kernel=kernel, data=data)
        self.append(entry)
        return entry

    def append(self, event: TraceEvent) -> None:
        """Write an event recorded elsewhere (a ``--workers`` process), keeping its time."""
        self._trace.write(event.model_dump_json() + "\n")
        self._trace.flush()

    def save_candidate(self, model: str, kernel: str, sha256: str, source: str, shape: str | None = None) -> str:
        """Store an attempt's exact bytes, under ``candidates/<model>/<kernel>[@<shape>]/`` (the kernel's store folder
        name: a problem's declared shapes each have their own); returns the path relative to the run directory."""
        self._count += 1
        rel = Path("candidates") / model / at_shape(kernel, shape) / f"{self._count:03d}-{sha256[:12]}.py"
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source.encode("utf-8"))
        return str(rel)

    def save_profile(self, profile: ModelProfile, shape: str | None = None) -> None:
        """``profile/<model>[@<shape>].json``: each declared shape's own."""
        atomic_write(self.root / "profile" / f"{at_shape(profile.model, shape)}.json", dump_json(profile))

    def save(self) -> None:
        atomic_write(self.root / RUN_FILE, dump_json(self.record))

    def close(self) -> None:
        self.save()
        self._trace.close()


def load_run(root: Path) -> tuple[RunRecord, list[TraceEvent]]:
    """A run directory's record and trace (reports are rendered from these two)."""
    root = Path(root)
    path = root / RUN_FILE
    if not path.is_file():
        raise UsageError(f"{root}: not a tuning run directory (no {RUN_FILE})")
    record = load_json(RunRecord, path)
    events = []
    trace = root / TRACE_FILE
    lines = trace.read_text(encoding="utf-8").splitlines() if trace.is_file() else []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(TraceEvent.model_validate(json.loads(line)))
        except (ValueError, TypeError) as exc:
            if n == len(lines):  # a run killed mid-write leaves at most one partial last line
                break
            raise UsageError(f"{trace}:{n}: not a trace event ({exc})") from exc
    return record, events
