"""The generic `{"id"?, "role", "name"?, "content", "timestamp"?, "tags"?}` per
line. `name` is the speaker, as in OpenAI's chat format, `speaker` an alias (a string
of 1-128 characters without control characters); a line with a name and no role is
the user's.
Read strictly, since a person or a script wrote it: one bad line refuses the whole
file, naming the line (SPEC §6).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memvault.errors import DataError
from memvault.model.records import MAX_CONTENT, MAX_TAG, ROLES, NewMessage
from memvault.text.transcripts.base import (
    MAX_NAME,
    Format,
    Transcript,
    _clean_name,
    _encodable,
    _lines,
    _load,
    _time,
)

# The keys that say a line is meant as generic JSONL (the format then says what is wrong).
JSONL_SHAPE = frozenset({"role", "content"})
JSONL_FIELDS = ("id", "role", "name", "speaker", "content", "timestamp", "tags")


def _jsonl(text: str) -> Transcript:
    messages: list[NewMessage] = []
    ids: dict[str, int] = {}
    for number, line in _lines(text):
        where = f"line {number}"
        try:
            obj = _load(line)
        except ValueError:
            raise DataError(f"{where}: not valid JSON") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object with role and content")
        unknown = sorted(set(obj) - set(JSONL_FIELDS))
        if unknown:
            raise DataError(f"{where}: unknown field {unknown[0]!r} "
                            f"(fields: {', '.join(JSONL_FIELDS)})")
        role, content = obj.get("role"), obj.get("content")
        name = _jsonl_name(obj, where)
        if role is None and name is not None:
            role = "user"  # a chat's member: one of the people, not the assistant
        if not isinstance(role, str) or not role.strip():
            raise DataError(f"{where}: 'role' must be a non-empty string")
        if role not in ROLES:
            raise DataError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        if not isinstance(content, str) or not content.strip():
            raise DataError(f"{where}: 'content' must be a non-empty string")
        if not _encodable(content):
            raise DataError(f"{where}: 'content' is not valid Unicode")
        if len(content.encode()) > MAX_CONTENT:
            raise DataError(f"{where}: 'content' is larger than {MAX_CONTENT // 1024} KiB")
        mid = obj.get("id")
        if mid is not None:
            if not isinstance(mid, str) or not mid.strip() or not _encodable(mid):
                raise DataError(f"{where}: 'id' must be a non-empty string")
            if mid in ids:
                raise DataError(f"{where}: id {mid!r} is already used on line {ids[mid]}")
            ids[mid] = number
        stamp = obj.get("timestamp")
        created = None
        if stamp is not None:
            created = _time(stamp)
            if created is None:
                raise DataError(f"{where}: 'timestamp' must be an ISO-8601 date and time, "
                                "e.g. 2026-05-01T09:30:00Z")
        tags = obj.get("tags")
        if tags is None:
            tags = []
        if not isinstance(tags, list) or not all(_good_tag(t) for t in tags):
            raise DataError(f"{where}: 'tags' must be a list of tags of 1-{MAX_TAG} "
                            "characters without spaces")
        messages.append(NewMessage(content=content, role=role, message_id=mid,
                                   created_at=created, tags=[t.strip() for t in tags],
                                   name=name))
    return Transcript("jsonl", None, messages)  # none: an empty file, nothing to keep


def _jsonl_name(obj: dict[str, Any], where: str) -> str | None:
    """The speaker: `name` (OpenAI's chat format) or its alias `speaker`."""
    given = [key for key in ("name", "speaker") if obj.get(key) is not None]
    if len(given) == 2 and obj["name"] != obj["speaker"]:
        raise DataError(f"{where}: 'name' and 'speaker' are the same field: give one")
    if not given:
        return None
    name = obj[given[0]]
    if not isinstance(name, str) or not _clean_name(name):
        raise DataError(f"{where}: {given[0]!r} must be a string of 1-{MAX_NAME} characters "
                        "without control characters")
    return name.strip()



def _good_tag(tag: Any) -> bool:
    return (isinstance(tag, str) and 0 < len(tag.strip()) <= MAX_TAG and _encodable(tag)
            and not any(c.isspace() for c in tag.strip()))


def places(home: Path, env: Mapping[str, str]) -> list[Path]:
    return []  # a person's or a script's files: wherever they are put


FORMAT = Format("jsonl", "generic JSON lines", places, parse=_jsonl)
