"""The other agents' live JSON-lines files are read on from where the last ingest stopped
(issue 34, item 4): Codex rollouts, Copilot CLI events, Cursor agent transcripts, Qwen
Code chats, Pi and Droid sessions. After an ingest, the position sealed in the user's
state ends at the file's last whole line; grown, the file is read from there (from its
last turn, for a format whose entries are linked), and what is stored is exactly what one
ingest of the whole grown file stores; rewritten or truncated, it is read whole.

Each format's real sample (../shared/bench-data) is read in place and copied to tmp only
to be grown: the lines appended are the sample's own, with ids of their own, linked on
from its last entry where entries are linked, as the agent appends them."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memvault.ops.ingest import _position, ingest_file, with_ids
from memvault.text.transcripts import parse
from memvault.vault.vault import Vault
from test_ingest_prefixes import stored, vault_for

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data"
SESSIONS = DATA / "agents" / "agent-sessions"
SAMPLES = {
    "codex": DATA / "transcripts" / "codex" / "rollout-vibe-codex-0.39.jsonl",
    "copilot": SESSIONS / "copilot" / "small.jsonl",
    "cursor": SESSIONS / "cursor" / "small.jsonl",
    "qwen": SESSIONS / "qwen" / "019f0000-0000-7000-8000-000000000001.jsonl",
    "pi": SESSIONS / "pi" / "small.jsonl",
    "droid": SESSIONS / "droid" / "session_store_small.jsonl",
}
PARENT = {"qwen": ("uuid", "parentUuid"), "pi": ("id", "parentId"),
          "droid": ("id", "parentId")}
FIRST_LINES = {"codex": "session_meta", "copilot": "session.start", "pi": "session",
               "droid": "session_start"}

# Formats whose message ids are keyed digests of their words (Cursor's: see cursor.Said),
# which differ from user to user: compared across users without them.
KEYED = frozenset({"cursor"})

real_data = pytest.mark.skipif(not SESSIONS.is_dir(), reason=f"no samples in {SESSIONS}")


def _renamed(value: Any, suffix: str) -> Any:
    """Every id in a line given `suffix` (its links and tool call ids too), not the
    session's."""
    if isinstance(value, dict):
        return {k: f"{v}{suffix}" if isinstance(v, str) and k.lower().endswith(
                    ("id", "uuid")) and k not in ("sessionId", "session_id")
                else _renamed(v, suffix) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, suffix) for v in value]
    return value


def more_lines(fmt: str, raw: bytes, suffix: str) -> bytes:
    """The sample's lines again (not its session line), with ids of their own; a linked
    format's first one linked to the sample's last entry."""
    rows = [json.loads(line) for line in raw.splitlines() if line.strip()]
    rows = [r for r in rows if fmt not in FIRST_LINES or r.get("type") != FIRST_LINES[fmt]]
    out = [_renamed(r, suffix) for r in rows]
    if fmt in PARENT:
        key, parent = PARENT[fmt]
        last = next(r[key] for r in reversed(rows) if isinstance(r.get(key), str))
        old = {r[key] for r in rows if isinstance(r.get(key), str)}
        # The first appended entry whose parent is none of the appended: linked on.
        ours = {f"{k}-{suffix}" for k in old} | {r[key] for r in out if r.get(key)}
        root = next(r for r in out if r.get(parent) not in ours)
        root[parent] = last
    return b"".join(json.dumps(r).encode() + b"\n" for r in out)


def position(vault: Vault, path: Path, fmt: str) -> dict[str, Any] | None:
    key = vault.path_mark(b"\0".join([b"read-on", fmt.encode(),
                                      os.fsencode(path.resolve()), b"", b""]))
    return _position(vault, key)


def held(vault: Vault) -> set[tuple[Any, ...]]:
    """What the user holds, without the times of messages the file gives none (those get
    the moment they are stored)."""
    today = datetime.now(UTC).date().isoformat()
    return {r[:5] + r[6:] if str(r[5]).startswith(today) else r for r in stored(vault)}


def unnamed(records: set[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(r[:2] + r[3:] for r in records)


def whole(path: Path, user: str) -> set[tuple[Any, ...]]:
    """What one ingest of the file as it is now stores (a copy at the same name)."""
    copy = path.parent / user / path.name
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    v = vault_for(user)
    ingest_file(v, copy)
    return held(v)


@real_data
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_grown_file_is_read_from_where_it_was_read_to(vault: Vault, tmp_path: Path,
                                                        fmt: str) -> None:
    raw = SAMPLES[fmt].read_bytes()
    path = tmp_path / SAMPLES[fmt].name
    path.write_bytes(raw)
    v = vault_for(f"r{fmt}")
    first = ingest_file(v, path)
    assert first.format == fmt and first.messages_added > 0
    at = position(v, path, fmt)
    assert at is not None and at["end"] == len(raw)  # read to its last whole line
    again = ingest_file(v, path)  # unchanged: nothing read, nothing stored
    assert (again.messages_added, again.messages_skipped) == (0, first.messages_added)

    more = more_lines(fmt, raw, "-2")
    with path.open("ab") as fh:  # the same file, grown as the agent appends
        fh.write(more + b'{"torn": ')
    grown = ingest_file(v, path)
    assert grown.messages_added > 0
    now = position(v, path, fmt)
    assert now is not None and now["end"] == len(raw) + len(more)  # not the torn line
    # The read started where the last one said: at its end; at its last turn, where
    # entries are linked; among its last lines, where a Codex record waits for its twin.
    if fmt in PARENT:
        assert PARENT[fmt][0] in json.loads(raw[at["pin"]:raw.index(b"\n", at["pin"])])
    elif fmt == "codex":
        assert at["pin"] >= sum(map(len, raw.splitlines(keepends=True)[:-64]))
    else:
        assert at["pin"] == len(raw)
    assert at["pin"] > 0 and now["pin"] > at["pin"]
    with path.open("ab") as fh:
        fh.write(b'"the torn line, now whole"}\n')
    ingest_file(v, path)
    path.write_bytes(raw + more)  # the torn line gone: another file (inode), read whole
    ingest_file(v, path)
    if fmt in KEYED:  # ids keyed by each user's key: compared without them
        assert unnamed(held(v)) == unnamed(whole(path, f"r{fmt}w"))
    else:
        assert held(v) == whole(path, f"r{fmt}w")


@real_data
@pytest.mark.parametrize("change", ["rewritten", "truncated"])
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_file_changed_other_than_by_appending_is_read_whole(
        vault: Vault, tmp_path: Path, fmt: str, change: str) -> None:
    raw = SAMPLES[fmt].read_bytes()
    path = tmp_path / SAMPLES[fmt].name
    path.write_bytes(raw)
    user = f"c{fmt}{change[0]}"
    v = vault_for(user)
    ingest_file(v, path)
    before = held(v)
    more = more_lines(fmt, raw, "-3")
    lines = raw.splitlines(keepends=True)
    with path.open("r+b") as fh:  # in place: the same inode
        if change == "rewritten":  # other lines where the ones read were, then more
            fh.write(lines[0] + more + more_lines(fmt, raw, "-4"))
        else:  # cut to its first line, then other lines
            fh.write(lines[0] + more)
        fh.truncate()
    ingest_file(v, path)
    got = held(v)
    assert {r[2] for r in before} <= {r[2] for r in got}  # nothing lost
    # The file as it is now, read whole: every message it holds is there (a line's id
    # seen before with other words is that message grown: stored with the new words).
    said = {(r[1], r[-1]) for r in got}
    assert {(r[1], r[-1]) for r in whole(path, f"{user}w")} <= said
    at = position(v, path, fmt)
    assert at is not None and at["end"] == path.stat().st_size


class Bytes:
    """A progress that counts the bytes an ingest says it read."""

    def __init__(self) -> None:
        self.read = 0
        self.unit = ""

    def start(self, total: int | None, unit: str) -> None:
        self.unit = unit

    def advance(self, n: int = 1) -> None:
        self.read += n if self.unit == "bytes" else 0

    def keep(self, n: int = 1) -> None:
        pass

    def note(self, label: str) -> None:
        pass


def cursor_line(role: str, text: str) -> bytes:
    if role == "user":
        text = f"<user_query>\n{text}\n</user_query>"
    return json.dumps({"role": role, "message": {"content": [
        {"type": "text", "text": text}]}}).encode() + b"\n"


def test_a_grown_cursor_transcript_reads_only_what_was_appended(vault: Vault,
                                                                tmp_path: Path) -> None:
    # A Cursor message is named by its words, its user turn and the how-manyth time said
    # in it (cursor.Said), so that its chat store names it alike. Before, a grown
    # transcript was read again from its start to count what was said before; now the
    # count is kept with the position, and the read starts where the last one ended.
    agent = "0c0ffee0-1111-4222-8333-444455556666"
    path = tmp_path / "projects" / "p" / "agent-transcripts" / agent / f"{agent}.jsonl"
    path.parent.mkdir(parents=True)
    said = [("user", "Fix the build."), ("assistant", "Running the tests."),
            ("assistant", "Still red."), ("assistant", "Running the tests."),
            ("user", "thanks"), ("assistant", "Anything else?")]
    said += [("assistant" if n % 2 else "user", f"padding {n} " * 20) for n in range(200)]
    said += [("user", "Try again."), ("assistant", "Running the tests.")]
    path.write_bytes(b"".join(cursor_line(*m) for m in said))
    v = vault_for("rcursor-on")
    first = ingest_file(v, path)
    assert first.messages_added == len(said)
    # The turn read last goes on: the same words again in it, and in turns of their own.
    more = [("assistant", "Running the tests."), ("assistant", "Still red."),
            ("user", "thanks"), ("assistant", "Running the tests."), ("user", "thanks")]
    appended = b"".join(cursor_line(*m) for m in more) + b'{"role": "us'  # torn: later
    with path.open("ab") as fh:
        fh.write(appended)
    seen = Bytes()
    grown = ingest_file(v, path, progress=seen)
    assert seen.read == len(appended) - len(b'{"role": "us')  # the appended lines alone
    assert grown.messages_added == len(more)
    # Each stored as a read of the whole file names it: the same ids, each message once.
    whole_text = path.read_bytes()[:path.read_bytes().rindex(b"\n") + 1].decode()
    ids = {m.message_id for m in with_ids(v, parse(whole_text, "cursor").messages)}
    assert len(ids) == len(said) + len(more)
    assert {r[2] for r in stored(v)} == ids
    at = position(v, path, "cursor")
    assert at is not None and at["pin"] == at["end"] == len(whole_text.encode())
    # What is kept to name the next message is the last turn's, not the file's.
    assert at["said"]["turns"] == 105 and sum(at["said"]["times"].values()) == 1
