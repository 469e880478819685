"""Where a record lives: one typed value, built and parsed here only.

A record is either in a whole-file document (CLAUDE.md, preferences.json) or on a line
of a session file (live under sessions/, compacted away under archive/), which starts
at a byte offset. The index keeps a location (sealed) for each record, so that a hit
or a lookup by id decrypts one line instead of the user's whole history.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from memvault.model.records import ARCHIVE, DOC_FILES, SESSIONS

LINE_SUFFIX = ".jsonl"
# The session name pattern (config.NAME_RE, which this layer cannot import).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def session_name(candidate: str) -> str:
    """A session id as a valid session name, the same whoever asks: a valid name is kept
    as it is (vaults keep their files); anything else (a path, `..`, NUL, control or
    non-ASCII characters, more than 64 characters) becomes a readable part and 12 hex
    digits of the SHA-256 of the whole id, so two ids share a name only if their hashes
    do. Plain, not keyed: a hook maps its agent's id before any key is read, and the
    format (vault-format.md, Names) is what existing vaults were named by."""
    if _NAME.fullmatch(candidate):
        return candidate
    safe = _UNSAFE.sub("-", candidate).strip("-.")[:40] or "session"
    # surrogatepass: an id decoded from JSON may hold a lone surrogate ("\ud800").
    digest = hashlib.sha256(candidate.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{safe}-{digest}" if safe[0].isalnum() else f"s-{digest}"


def session_file(session: str, archived: bool = False) -> str:
    """The relative path of a session's line file."""
    return f"{ARCHIVE if archived else SESSIONS}/{session}{LINE_SUFFIX}"


def session_of(relpath: str) -> str | None:
    """The session a line file holds; None for anything else."""
    folder, _, name = relpath.partition("/")
    if folder not in (SESSIONS, ARCHIVE) or not name.endswith(LINE_SUFFIX) or "/" in name:
        return None
    return name.removesuffix(LINE_SUFFIX)


@dataclass(frozen=True)
class Location:
    file: str  # a document name, or a line file's relative path
    offset: int | None = None  # where the record's line starts (line files only)

    @classmethod
    def doc(cls, name: str) -> Location:
        assert name in DOC_FILES, name
        return cls(name)

    @classmethod
    def line(cls, relpath: str, offset: int) -> Location:
        return cls(relpath, offset)

    @property
    def is_doc(self) -> bool:
        return self.offset is None

    @property
    def archived(self) -> bool:
        return self.file.startswith(ARCHIVE + "/")

    @property
    def session(self) -> str | None:
        return session_of(self.file)

    def __str__(self) -> str:
        return self.file if self.offset is None else f"{self.file}@{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Location | None:
        """The location a string names; None when it names none (an old or damaged
        index: the caller rebuilds it)."""
        if text in DOC_FILES:
            return cls(text)
        relpath, sep, offset = text.rpartition("@")
        if not sep or not offset.isdigit() or session_of(relpath) is None:
            return None
        return cls(relpath, int(offset))
