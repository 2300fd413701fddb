"""Progress of long work: rich's live bars on a terminal; on a log or a pipe, where rich's
live display prints nothing until the work ends, one plain line per task every few seconds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console

# A log stays readable (a line every few seconds) and a watcher sees movement well within a minute.
LINE_INTERVAL_S = 5.0


def progress_bars(description: str, console: Console):
    """A context manager with rich Progress's add_task / update / tasks for the command named
    `description` ("simulate", "plan", "sweep", ...)."""
    if not console.is_terminal:
        return LineProgress(console)
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    counter = TaskProgressColumn() if description == "simulate" else MofNCompleteColumn()
    rate = [TextColumn("{task.fields[rate]}")] if description == "plan" else []
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), counter, *rate,
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


def status_messages(first: str, console: Console, every_message: bool = False):
    """A context manager whose `update(message)` shows where long work without a count is
    (calibrate's kernels, execute's steps): rich's spinner on a terminal; elsewhere the message
    as a line, at most one every LINE_INTERVAL_S and the last one when the work ends, or each
    one (`every_message`: a few phases, whose lines must not depend on the machine's speed)."""
    if console.is_terminal:
        return console.status(first)
    return StatusLines(console, first, 0.0 if every_message else None)


class StatusLines:
    def __init__(self, console: Console, first: str, interval: float | None = None):
        self.console, self.interval = console, LINE_INTERVAL_S if interval is None else interval
        self.last, self.printed, self.unprinted = first, time.monotonic(), False
        self.console.print(first, highlight=False, markup=False, soft_wrap=True)

    def __enter__(self) -> "StatusLines":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None and self.unprinted:
            self.console.print(self.last, highlight=False, markup=False, soft_wrap=True)

    def update(self, message: str) -> None:
        self.last, self.unprinted = message, True
        if time.monotonic() - self.printed >= self.interval:
            self.console.print(message, highlight=False, markup=False, soft_wrap=True)
            self.printed, self.unprinted = time.monotonic(), False


@dataclass
class LineTask:
    description: str
    total: float | None
    fields: dict
    completed: float = 0.0
    started: float = field(default_factory=time.monotonic)
    printed: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        done = f"{self.completed:,.0f}"
        if self.total:
            done += f"/{self.total:,.0f} ({self.completed / self.total:.0%})"
        extra = "".join(f" {value}" for value in self.fields.values() if value)
        return f"{self.description}: {done}{extra}, {self.elapsed:.0f} s"


class LineProgress:
    """The subset of rich.progress.Progress that sim3d's commands use, as plain lines."""

    def __init__(self, console: Console, interval: float | None = None):
        self.console = console
        self.interval = LINE_INTERVAL_S if interval is None else interval
        self.tasks: list[LineTask] = []

    def __enter__(self) -> "LineProgress":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            for task in self.tasks:
                self._print(task)

    def add_task(self, description: str, total: float | None = None, **fields) -> int:
        self.tasks.append(LineTask(description, total, fields))
        self._print(self.tasks[-1])
        return len(self.tasks) - 1

    def update(self, task_id: int, *, advance: float | None = None, completed: float | None = None,
               total: float | None = None, **fields) -> None:
        task = self.tasks[task_id]
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if total is not None:
            task.total = total
        task.fields.update(fields)
        if time.monotonic() - task.printed >= self.interval:
            self._print(task)

    def _print(self, task: LineTask) -> None:
        task.printed = time.monotonic()
        self.console.print(task.line(), highlight=False, markup=False, soft_wrap=True)
