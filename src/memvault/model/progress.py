"""What long work tells whoever watches it: how much there is, how much is done, how
much of it is stored for good.

An operation takes a `Progress` and calls it once per unit of work it counts (a file, a
transcript, a user, a batch of bytes read), never once per record, so that a run nobody
watches pays a method call per unit and formats nothing. A surface decides what to make
of it: the CLI draws a bar on a terminal and, when the run is interrupted, says what
was kept; a hook or the MCP server passes nothing (NO_PROGRESS).

`keep` is the promise an interruption relies on: it is called only once what it counts
is durable (its transaction ended), so "3 of 8 kept" is true whenever the run stops.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, total: int | None, unit: str) -> None:
        """A stage of `total` units (None: not known) begins; `unit` names them
        ("files", "transcripts", "users", "bytes"). Counts of a previous stage end."""

    def advance(self, n: int = 1) -> None:
        """`n` more units were worked through."""

    def keep(self, n: int = 1) -> None:
        """`n` more units are stored for good: an interruption from here on keeps
        them."""

    def note(self, label: str) -> None:
        """What is being worked on now (a user's name), or a running figure
        ("1,200 messages archived"); shown beside the bar."""


class NoProgress:
    """Nobody watches: every call does nothing."""

    def start(self, total: int | None, unit: str) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def keep(self, n: int = 1) -> None:
        pass

    def note(self, label: str) -> None:
        pass


NO_PROGRESS: Progress = NoProgress()
