"""Write limits for what a model may change on its own: an agent's session, and the
summariser of a compaction run.

A model that reads poisoned text (a web page, a file, a tool's output) may be steered
into storing instructions, replacing good memories or erasing them. An agent's tools
therefore get a budget per session (the MCP server's `mcp:` settings): at most 20 stores,
5 supersedes and 5 deletes by default. A compaction summariser reads whole sessions, the
same poisoned text included, and proposes facts: at most 3 preferences, instructions and
corrections from one summary and 20 for one user in one run are kept by default (the
`compaction:` settings). A user at the keyboard (`mem add`, `mem forget`) has none of
these limits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from memvault.config import CompactionConfig, Settings
from memvault.errors import Refused
from memvault.model.records import BEHAVIORAL_TYPES

KINDS = ("stores", "supersedes", "deletes")


@dataclass(frozen=True)
class Limits:
    stores: int = 20
    supersedes: int = 5
    deletes: int = 5
    # The largest tool result, in characters of JSON: well under the 10,000 tokens at
    # which Claude Code warns, and far from its limit, past which it writes the result
    # (decrypted memory) to a file.
    result_chars: int = 8000

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The `mcp:` settings, resolved and checked by config.py."""
        values = settings.mcp
        return cls(stores=values["max_stores"], supersedes=values["max_supersedes"],
                   deletes=values["max_deletes"], result_chars=values["max_result_chars"])


class Budget:
    """What is left of a session's limits. Safe to share between threads: tool calls
    may run at once."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._used = dict.fromkeys(KINDS, 0)
        self._lock = threading.Lock()

    def left(self, kind: str) -> int:
        with self._lock:
            return int(getattr(self.limits, kind)) - self._used[kind]

    @contextmanager
    def spend(self, *kinds: str) -> Iterator[None]:
        """Take one of each kind for the block; given back when the block fails (nothing
        was written). Refused (exit 77) when any kind is spent."""
        with self._lock:
            for kind in kinds:
                limit = int(getattr(self.limits, kind))
                if self._used[kind] >= limit:
                    raise Refused(
                        f"refused: this session has used its {limit} {kind}; the limit guards "
                        "memory against a session steered by what it read. Ask the user to "
                        "make further changes with the mem command", field=kind)
            for kind in kinds:
                self._used[kind] += 1
        try:
            yield
        except BaseException:
            self.refund(*kinds)
            raise

    def take(self, kind: str) -> None:
        """Count one of `kind` spent by a write that has happened (a store that turned
        out to replace a memory)."""
        with self._lock:
            self._used[kind] += 1

    def refund(self, *kinds: str) -> None:
        with self._lock:
            for kind in kinds:
                self._used[kind] = max(0, self._used[kind] - 1)


class FactAllowance:
    """What a compaction run may still add to one user from summarisers: behavioural
    facts (preference, instruction, correction) up to `per_summary` from one summary
    and `per_run` in all. What is over is dropped and counted (`dropped`); other facts
    are not limited here."""

    def __init__(self, per_summary: int, per_run: int) -> None:
        self.per_summary = per_summary
        self.left = per_run
        self.dropped = 0

    @classmethod
    def from_config(cls, cfg: CompactionConfig) -> FactAllowance:
        return cls(cfg.max_behavioral_facts_per_summary, cfg.max_behavioral_facts_per_run)

    def admit(self, kinds: Sequence[str]) -> list[bool]:
        """For one summary's facts (their types, in the order proposed, each already
        new): which are kept. The first ones proposed are kept."""
        kept: list[bool] = []
        taken = 0
        for kind in kinds:
            if kind not in BEHAVIORAL_TYPES:
                kept.append(True)
            elif taken < self.per_summary and self.left > 0:
                taken += 1
                self.left -= 1
                kept.append(True)
            else:
                self.dropped += 1
                kept.append(False)
        return kept
