"""One way to print a timing: a speedup with its 95% interval, a time with its interval.

``1.234x [1.200, 1.268]`` everywhere a speedup is shown with its interval (the tuner's
messages, reports, pull requests, ``kernelopt bench``); ``1.234x (95% CI [1.200, 1.268])``
where a sentence names the interval (the gate's failures). Numbers only: no records. And the
one rule for names a user copies out of a table (:func:`unbroken`): printed whole, and one way to print a
table (:func:`print_whole`) so that no column is cut to an ellipsis.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol


class _Speedup(Protocol):
    @property
    def speedup(self) -> float: ...
    @property
    def ci_low(self) -> float: ...
    @property
    def ci_high(self) -> float: ...


def interval(low: float, high: float, digits: int = 3) -> str:
    """``[low, high]`` with ``digits`` decimals."""
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def speedup_text(value: float, low: float | None = None, high: float | None = None, *, label: bool = False) -> str:
    """``1.234x``; with its interval ``1.234x [1.200, 1.268]``; ``label``: ``1.234x (95% CI [1.200, 1.268])``."""
    text = f"{value:.3f}x"
    if low is None or high is None:
        return text
    return f"{text} (95% CI {interval(low, high)})" if label else f"{text} {interval(low, high)}"


def timing_text(t: _Speedup, *, label: bool = False) -> str:
    """:func:`speedup_text` of a timing (a :class:`~.stats.SpeedEstimate` or the record it becomes)."""
    return speedup_text(t.speedup, t.ci_low, t.ci_high, label=label)


def time_text(median: float, low: float, high: float, digits: int = 1) -> str:
    """A median time and its interval, in the caller's unit: ``12.3 [12.0, 12.5]``."""
    return f"{median:.{digits}f} {interval(low, high, digits)}"


def unbroken(names: list[str]) -> dict[str, Any]:
    """A rich table column's options for names a user copies into a command (kernel names run to 90
    characters): never wrapped, cut or folded; the other columns give way."""
    return {"no_wrap": True, "min_width": max(map(len, names), default=0)}


def print_whole(table: Any, console: Any = None, *, log_width: int = 200) -> Any:
    """Print a rich ``table`` on ``console`` (default: the terminal at its width, a log at ``log_width``),
    on a wider console where the table needs more (:func:`least_width`): rich narrows columns to fit the
    console, and a training step's kernel names (140 characters) once left the others one character wide.
    Returns the console used, for the lines after the table."""
    from rich.console import Console

    terminal = console is None and sys.stdout.isatty()
    if console is None:
        console = Console() if terminal else Console(width=log_width)
    needed = least_width(table)
    if needed > console.width and terminal:  # wider than the terminal: a row a paragraph, not lines it wraps
        print_rows(table, console)
        return console
    if needed > console.width:  # Console.print(width=...) cannot exceed the console's own width
        console = Console(file=console.file, width=needed)
    console.print(table)
    return console


def print_rows(table: Any, console: Any) -> None:
    """A rich ``table`` too wide for the terminal, one row at a time: its first cell on a line of its own, then
    each other non-empty cell on a line as ``column: value`` (a table wider than the terminal breaks every
    line of it in the middle). Lines are not broken by rich: a name longer than the terminal is still one
    line to copy."""
    from rich.text import Text

    if table.title:
        console.print(Text(str(table.title), style="bold"), soft_wrap=True)
    headers = [str(column.header) for column in table.columns]
    cells = [[str(cell) for cell in column.cells] for column in table.columns]
    for row in zip(*cells):
        console.print(Text(row[0], style="bold"), soft_wrap=True)
        for header, value in zip(headers[1:], row[1:]):
            if value.strip() not in ("", "-"):
                console.print(Text(f"  {header}: {value}"), soft_wrap=True)


def least_width(table: Any) -> int:
    """The narrowest a rich ``table`` prints with no cell cut to an ellipsis: a ``no_wrap`` column as wide as
    its widest line, any other as its longest word, plus padding and borders. (Rich's own measure counts
    ``no_wrap`` columns narrower than their cells.)"""
    width = 1  # the left border
    for column in table.columns:
        lines = [line for text in (column.header, *column.cells) for line in str(text).splitlines()]
        if column.no_wrap:
            least = max(map(len, lines), default=0)
        else:
            least = max((len(word) for line in lines for word in line.split()), default=0)
        width += max(least, column.min_width or 0) + 2 * table.padding[1] + 1  # padding each side, a border
    return width
