"""The record model of SPEC §3: types, categories, where each type lives, limits, ids, times."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from memvault.errors import DataError, UsageError

TYPES = ("fact", "preference", "instruction", "correction", "context", "pattern",
         "summary", "message")
CATEGORIES = ("conversation", "work_pattern", "preference", "learned_context")
BEHAVIORAL_TYPES = frozenset({"preference", "instruction", "correction"})
ROLES = ("user", "assistant", "system", "tool", "summary")
# The agents a session's messages can come from: the transcript formats' names (all but
# generic JSON lines, which anything writes). A record's `agent` is one of these or None.
AGENTS = ("claude-code", "codex", "gemini", "opencode", "cursor", "copilot", "qwen",
          "aider", "cline", "pi", "droid", "goose", "crush", "amp")

# Where each type is stored, and its category.
CLAUDE_MD = "CLAUDE.md"
PREFERENCES = "preferences.json"
SESSIONS = "sessions"
ARCHIVE = "archive"
DOC_FILES = (CLAUDE_MD, PREFERENCES)
TYPE_HOME: dict[str, tuple[str, str]] = {
    "fact": (CLAUDE_MD, "learned_context"),
    "context": (CLAUDE_MD, "learned_context"),
    "pattern": (CLAUDE_MD, "work_pattern"),
    "summary": (CLAUDE_MD, "learned_context"),
    "preference": (PREFERENCES, "preference"),
    "instruction": (PREFERENCES, "preference"),
    "correction": (PREFERENCES, "preference"),
    "message": (SESSIONS, "conversation"),
}

# The channel of a fact a compaction summariser proposed: its provenance, which puts it
# below what the user stated. A fact stored before it had one is known by its
# `compacted_from`, which nothing else sets on a record other than a summary.
COMPACTION_CHANNEL = "compaction"

# Limits on what one record may hold.
MAX_CONTENT = 256 * 1024
MAX_TAG = 64
PREF_KEY_MAX = 128
# Turns on each side of a message whose words help find it (indexed as its context).
CONTEXT_NEIGHBOURS = 2


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    """Parse ISO-8601 (a bare date means midnight UTC); naive times are taken as UTC.

    UsageError for anything else, and for a time UTC cannot hold (year 1 at +01:00,
    9999-12-31T23:00-14:00): every caller compares it or takes its timestamp, in UTC."""
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except (ValueError, TypeError):
        raise UsageError(f"invalid date or time {value!r}: use ISO-8601, "
                         "e.g. 2026-05-01") from None
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    try:
        dt.astimezone(UTC)
    except OverflowError:
        raise UsageError(f"date or time {value!r} is out of range: in UTC it falls before "
                         "year 1 or after 9999", out_of_range=True) from None
    return dt


@functools.lru_cache(maxsize=4096)
def normalise_time(value: str) -> str:
    """An ISO-8601 time as mem stores it: UTC, microseconds, a trailing Z (so that times
    sort as strings). UsageError when it is not a time. Memoised: an ingest meets each
    message's time three times (giving it an id, planning before the lock and under it)."""
    try:
        dt = parse_time(value).astimezone(UTC)
    except OverflowError:  # a valid time that UTC cannot hold (year 1 at +01:00)
        raise UsageError(f"time {value!r} is out of range") from None
    return dt.isoformat(timespec="microseconds").replace("+00:00", "Z")


def uuid7() -> str:
    """A UUIDv7 (RFC 9562): 48-bit millisecond time, then random bits; sorts by creation."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76 | ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    h = f"{value:032x}"  # uuid.UUID's own formatting, without building one (per message)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def born(memory_id: str) -> str:
    """When a record was first stored, as now_iso() writes times: the millisecond its
    UUIDv7 id carries (given on the machine that stored it, kept everywhere after). An
    id of another form (imported from elsewhere) has no time: "", before any other."""
    if len(memory_id) != 36 or memory_id[14] != "7":
        return ""
    try:
        ms = int(memory_id[:8] + memory_id[9:13], 16)
    except ValueError:
        return ""
    at = datetime.fromtimestamp(ms / 1000, UTC)
    return at.isoformat(timespec="microseconds").replace("+00:00", "Z")


def check_type(kind: str) -> str:
    if kind not in TYPES:
        raise UsageError(f"unknown type {kind!r}: choose one of {', '.join(TYPES)}",
                         field="type")
    return kind


def check_category(category: str) -> str:
    if category not in CATEGORIES:
        raise UsageError(
            f"unknown category {category!r}: choose one of {', '.join(CATEGORIES)}",
            field="category")
    return category


def clean_tags(tags: list[str]) -> list[str]:
    out: list[str] = []
    for tag in tags:
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG or any(c.isspace() for c in tag):
            raise UsageError(f"invalid tag {tag!r}: 1-{MAX_TAG} characters, no spaces",
                             field="tag")
        if tag not in out:
            out.append(tag)
    return out


def check_pref_key(key: str) -> None:
    if not key or len(key) > PREF_KEY_MAX or any(c.isspace() for c in key):
        raise UsageError(f"invalid preference key {key!r}: 1-{PREF_KEY_MAX} characters, "
                         "no spaces")


@dataclass
class Record:
    memory_id: str
    org_id: str
    user_id: str
    type: str
    content: str
    content_hash: str
    category: str = ""
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    session_id: str | None = None
    message_id: str | None = None
    channel: str | None = None
    role: str | None = None
    name: str | None = None  # the speaker's name, for a message of a multi-party chat
    # The agent a session's message came from (its transcript format's name, "codex");
    # None for a typed memory and for generic JSON lines.
    agent: str | None = None
    supersedes: str | None = None
    compacted_from: list[str] = field(default_factory=list)
    span: list[str] | None = None  # a summary's first and last message times
    created_at: str = ""
    updated_at: str = ""
    key_version: int = 1
    # Derived when read, never stored in the record: the user's state keeps which
    # record supersedes which, so one write is enough to supersede an entry elsewhere.
    superseded_by: str | None = None
    archived: bool = False

    @property
    def behavioral(self) -> bool:
        return self.type in BEHAVIORAL_TYPES

    @property
    def inferred(self) -> bool:
        """Proposed by a compaction summariser, not stated by the user (or their agent)."""
        return self.channel == COMPACTION_CHANNEL or (
            self.type != "summary" and bool(self.compacted_from))

    @property
    def home(self) -> str:
        return TYPE_HOME[self.type][0]

    def stored(self) -> dict[str, Any]:
        """The fields written inside the envelope (by hand: asdict's deep copy is slow).
        A speaker's name, the agent and a summary's span are written only when there is
        one, so records without stay byte for byte as earlier releases wrote them."""
        values = self.__dict__
        doc = {name: values[name] for name in _STORED}
        for optional in ("name", "agent", "span"):
            if doc[optional] is None:
                del doc[optional]
        return doc

    def to_dict(self) -> dict[str, Any]:
        """The public shape (show, list, export): stored fields plus derived ones."""
        doc = asdict(self)
        doc["behavioral"] = self.behavioral
        return doc

    @classmethod
    def from_stored(cls, doc: Any) -> Record:
        if not isinstance(doc, dict):
            raise DataError("record is not an object")
        if doc.keys() >= _ALWAYS:
            # As stored() writes it (only the fields it may leave out, None then, can
            # be missing): given by position, not matched by name (a pull or a scan
            # makes a record a line); a field not known is left out either way.
            field_of: Callable[[str], Any] = doc.get
            record = cls(*map(field_of, _STORED))
        else:
            try:
                record = cls(**{k: v for k, v in doc.items() if k in _KNOWN})
            except TypeError as exc:
                raise DataError(f"record is missing fields: {exc}") from None
        if record.type not in TYPES or not isinstance(record.content, str):
            raise DataError("record has an unknown type or no content")
        if record.agent is not None and not isinstance(record.agent, str):
            record.agent = None  # read tolerantly: a malformed provenance is no provenance
        return record


_STORED = tuple(f.name for f in fields(Record) if f.name not in ("superseded_by", "archived"))
_KNOWN = frozenset(_STORED)
_ALWAYS = _KNOWN - {"name", "agent", "span"}  # what stored() writes whatever they hold
assert _STORED == tuple(f.name for f in fields(Record))[:len(_STORED)]  # positions
assert all(f.default is None for f in fields(Record) if f.name in _KNOWN - _ALWAYS)


@dataclass
class NewMessage:
    """One transcript message on its way in (ingest, benchmarks)."""

    content: str
    role: str = "user"
    message_id: str | None = None
    created_at: str | None = None
    tags: list[str] = field(default_factory=list)
    channel: str | None = None
    name: str | None = None  # who spoke, when the role alone does not say (a chat's members)

    def evolve(self, **changes: Any) -> NewMessage:
        """A copy with `changes`: dataclasses.replace, at a fraction of its cost (an
        ingest copies each message a few times on its way in); the message itself when
        they change nothing."""
        values = self.__dict__
        if all(values[name] == value for name, value in changes.items()):
            return self
        copy = object.__new__(NewMessage)
        copy.__dict__ = {**self.__dict__, **changes}
        return copy


@dataclass
class Filters:
    """The filters shared by `list`, `search` and `forget` (SPEC §5)."""

    types: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)  # all must match
    session: str | None = None
    agent: str | None = None
    after: datetime | None = None
    before: datetime | None = None
    include_archive: bool = False
    include_superseded: bool = False
    limit: int = 10

    def __post_init__(self) -> None:
        for kind in self.types:
            check_type(kind)
        for category in self.categories:
            check_category(category)
        if self.agent is not None and self.agent not in AGENTS:
            raise UsageError(f"unknown agent {self.agent!r}: choose one of "
                             f"{', '.join(AGENTS)}", field="agent")
        if self.limit < 1:
            raise UsageError("limit must be at least 1", field="limit")

    def matches(self, record: Record) -> bool:
        if self.types and record.type not in self.types:
            return False
        if self.categories and record.category not in self.categories:
            return False
        if self.tags and not set(self.tags) <= set(record.tags):
            return False
        if self.session is not None and record.session_id != self.session:
            return False
        if self.agent is not None and record.agent != self.agent:
            return False
        if record.archived and not self.include_archive:
            return False
        if record.superseded_by and not self.include_superseded:
            return False
        if self.after or self.before:
            created = parse_time(record.created_at)
            if self.after and created < self.after:
                return False
            if self.before and created >= self.before:
                return False
        return True


# How compaction sizes active memory without decrypting it (the doctor estimates the same).
LINE_OVERHEAD = 330  # bytes of a stored message's fields beside its content
BYTES_PER_TOKEN = 4
