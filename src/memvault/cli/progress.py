"""Progress as the command line shows it: a bar on stderr when stderr is a terminal, and
after Ctrl-C one line that says what was kept.

A `Tracker` is the operations' `Progress` (memvault.model.progress). It always counts
(a few integer additions a file, a user or a batch), so that an interrupted run can say
what it kept even with `--json` or in a pipe; it draws only when `Output.progress` found
a terminal to draw on, and only then imports rich.progress. Counting never calls into
rich: the bar is drawn from the counts when a stage starts, when the work ends, and by
rich's own refresh a few times a second in between.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memvault.text.sanitize import for_terminal

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress as Bar

# What an interrupted run says when its command gave no words of its own.
PLAIN = "stopped; every write mem finished is kept, and none is left half done"


class Tracker:
    """Counts units of work (and those kept) for the interruption's message; draws them
    as a bar on `console` when there is one."""

    def __init__(self, label: str, console: Console | None,
                 interrupted: Callable[[Tracker], str] | None = None) -> None:
        self.label = label
        self.total: int | None = None
        self.unit = ""
        self.done = 0
        self.kept = 0
        self.stages = 0  # how many stages began (a command may say which it was in)
        self.noted = ""
        self._interrupted = interrupted
        self._console = console
        self._bar: Bar | None = None
        self.drew = False  # a bar was on the terminal

    # --- the operations' Progress: counting only; the bar reads the counts ----------------

    def start(self, total: int | None, unit: str) -> None:
        self.total, self.unit, self.done = total, unit, 0
        self.stages += 1
        if self._console is not None:
            self._draw()

    def advance(self, n: int = 1) -> None:
        self.done += n

    def keep(self, n: int = 1) -> None:
        self.kept += n

    def note(self, label: str) -> None:
        self.noted = label

    # --- what the command line does with it ------------------------------------------------

    def interrupted(self) -> str:
        """The line an interruption prints (after "interrupted: ")."""
        return self._interrupted(self) if self._interrupted else PLAIN

    def close(self) -> None:
        """Draw the last counts, then take the bar away (it leaves nothing behind on the
        terminal: the command's own summary follows)."""
        if self._bar is None:
            return
        bar, self._bar = self._bar, None
        try:
            bar.refresh()
        finally:
            bar.stop()

    def count(self) -> str:
        """The counts as the bar shows them."""
        if self.unit == "bytes":
            done = _size(self.done)
            return f"{done} of {_size(self.total)}" if self.total is not None else done
        if self.total is None:
            return f"{self.done:,} {self.unit}"
        return f"{self.done:,}/{self.total:,} {self.unit}"

    def _draw(self) -> None:
        """Draw now (a stage begins). In between, rich redraws a few times a second from
        the counts as they are: counting costs no call into rich."""
        if self._bar is None:
            assert self._console is not None
            self._bar = _bar(self, self._console)
            self._bar.start()
            self.drew = True
        self._bar.refresh()


def _bar(tracker: Tracker, console: Console) -> Bar:
    """A rich Progress whose one task shows `tracker`: its label, a bar of done over
    total, the counts, the time spent, and the note. No redirection of stdout: data goes
    there while the bar is up (an export to a file, JSON at the end), and must never be
    routed to stderr."""
    from rich.progress import BarColumn, Progress, ProgressColumn, Task, TimeElapsedColumn
    from rich.table import Column
    from rich.text import Text

    class Counts(BarColumn):
        def render(self, task: Task) -> Any:
            task.completed, task.total = tracker.done, tracker.total
            return super().render(task)

    class Words(ProgressColumn):
        def __init__(self, words: Callable[[], str]) -> None:
            # One line whatever the terminal's width: a long note is cut, never wrapped.
            super().__init__(Column(no_wrap=True, overflow="ellipsis"))
            self.words = words

        def render(self, task: Task) -> Text:
            return Text(for_terminal(self.words()), no_wrap=True, overflow="ellipsis")

    bar = Progress(Words(lambda: tracker.label), Counts(bar_width=24), Words(tracker.count),
                   TimeElapsedColumn(), Words(lambda: tracker.noted), console=console,
                   transient=True, redirect_stdout=False, redirect_stderr=False,
                   refresh_per_second=4)
    bar.add_task(tracker.label, total=None)
    return bar


def _size(n: int | None) -> str:
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# The tracker of the command running now: the error boundary words an interruption
# from it. One command runs per process, so one slot is enough.
_active: list[Tracker] = []


def activate(tracker: Tracker) -> None:
    _active[:] = [tracker]


def deactivate(tracker: Tracker) -> None:
    if _active and _active[0] is tracker:
        _active.clear()


def interrupted_line() -> str:
    """What the boundary prints after Ctrl-C: what the command kept, and that running it
    again resumes."""
    text = _active[0].interrupted() if _active else PLAIN
    return "interrupted: " + text


def say(line: str, stream: Any = None) -> None:
    """One line on stderr, without Rich (the bar may have been torn down half-way). On a
    terminal it starts a line of its own: the terminal echoed ^C where the cursor was
    (a bar, when there was one, took its line away with it)."""
    out = stream or sys.stderr
    fresh = "" if (_active and _active[0].drew) or not out.isatty() else "\n"
    out.write(fresh + "mem: " + for_terminal(line.replace("\n", " ")) + "\n")
    out.flush()
