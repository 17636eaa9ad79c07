"""The columns of the run's live progress bar (:class:`spotwise.control.runner.RunProgress`), sized to the
terminal (issue 29): at 80 columns a line holds the bar, steps, loss, workers, virtual time and cost
without being cut; wider terminals also get the wall time.  A total that is an estimate (the on-demand
baseline's steps for a number of samples) reads ``~187`` and grows to the steps done, never ``199/187``.
"""

from __future__ import annotations

from typing import Any

#: below this width the compact columns (no wall clock, a short bar) are used
COMPACT_BELOW = 100


def progress_columns(width: int, *, label: str = "training", estimated: bool = False) -> list[Any]:
    """The rich progress columns for a console ``width`` columns wide."""
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn

    total = "~{task.total}" if estimated else "{task.total}"
    steps = TextColumn("{task.completed}/" + total + " steps")
    if width >= COMPACT_BELOW:
        return [TextColumn(f"[bold]{label}"), BarColumn(), steps, TextColumn("loss {task.fields[loss]}"),
                TextColumn("workers {task.fields[active]}"), TextColumn("virtual {task.fields[vt]}"),
                TextColumn("cost ${task.fields[cost]}"), TimeElapsedColumn()]
    # label + steps + loss + workers + virtual + cost take ~68 columns; the bar gets what is left
    return [TextColumn(f"[bold]{label}"), BarColumn(bar_width=max(4, min(40, width - 72))), steps,
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[active]} workers"),
            TextColumn("{task.fields[vt]} virtual"), TextColumn("${task.fields[cost]}")]


def grown_total(total: float | None, completed: int, estimated: bool) -> float | None:
    """An estimated total never reads below the steps done (it becomes the count done)."""
    if estimated and total is not None and completed > total:
        return completed  # an int: the bar reads 199/~199, not 199/~199.0
    return total


__all__ = ["COMPACT_BELOW", "grown_total", "progress_columns"]
