"""Progress bars for long commands (migrations, copies, archives), drawn by rich on stderr.

Imported only by commands that run long work, so `import mnemostore` never loads rich. Bars
are drawn only on a terminal; elsewhere (a pipe, a log file, `--quiet`) nothing is shown.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as Bars
from rich.text import Text

from ..migrations.progress import Progress, Silent


class RateColumn(ProgressColumn):
    """Items per second of a task (records, mostly)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f}/s", style="progress.data.speed")


class RichProgress:
    """`migrations.progress.Progress` as one rich bar per stage; use it as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self._bars = Bars(TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), RateColumn(),
                          TimeElapsedColumn(), console=console or Console(stderr=True))
        self._task: TaskID | None = None

    def __enter__(self) -> RichProgress:
        self._bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._bars.stop()

    def begin(self, label: str, total: int | None) -> None:
        if self._task is not None:
            self.end()
        self._task = self._bars.add_task(label, total=total)

    def advance(self, count: int) -> None:
        if self._task is not None:
            self._bars.advance(self._task, count)

    def end(self) -> None:
        if self._task is None:
            return
        done = next(task.completed for task in self._bars.tasks if task.id == self._task)
        self._bars.update(self._task, total=done, completed=done)
        self._task = None


@contextmanager
def progress_bar(quiet: bool = False) -> Iterator[Progress]:
    """A rich progress bar on stderr if it is a terminal and not `quiet`, else silence."""
    console = None if quiet else Console(stderr=True)
    if console is None or not console.is_terminal:
        yield Silent()
        return
    with RichProgress(console) as bar:
        yield bar
