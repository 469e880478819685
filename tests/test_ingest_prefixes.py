"""A live transcript ingested part by part stores what one ingest of the whole stores
(SPEC §6: "re-ingesting a transcript, or a longer version of it, adds only the messages
not yet stored"). PreCompact, then SessionEnd, then the periodic scan read the same file
as it grows: cut at any line, inside a line or inside a character, in one step or in
several, the vault ends up with the same messages, each once, in the same sessions.

The real sessions are ../shared/bench-data/transcripts (see its README); a subagent's
file beside a Claude Code session is cut at the same moment as the session."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.errors import DataError, NotTranscript
from memvault.ops.ingest import ingest_file, scan_dir
from memvault.ops.portability import export
from memvault.vault.vault import Vault

DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
CLAUDE_SESSION = "258c7280-ae70-4798-800f-63464d01a85d"
REAL = {
    "claude-code-subagent": DATA / "claude-code" / f"{CLAUDE_SESSION}.jsonl",
    "claude-code-resumed": DATA / "claude-code" / "vibe-claude-code-1.0.95.jsonl",
    "claude-code-short": DATA / "claude-code" / "short.jsonl",
    "claude-code-tools": DATA / "claude-code" / "tool_heavy.jsonl",
    "codex": DATA / "codex" / "rollout-vibe-codex-0.39.jsonl",
    "gemini": DATA / "gemini" / "session-vibe-gemini.jsonl",
}
# Every line boundary of the short ones; of the others about this many lines, spread
# over the file, and the lines named below (where the reviewers saw messages lost).
SAMPLES = 8
EVERY_LINE = 16  # a file of at most this many lines is cut at every line
AT_LINES = {"claude-code-subagent": [946, 947, 1474, 1480], "claude-code-resumed": [47, 48, 49]}

Stored = set[tuple[Any, ...]]


def stored(vault: Vault) -> Stored:
    """What `mem export --format json` says the user holds: every message and summary with
    its session, id, role, channel, time and content; a duplicate would show in the count."""
    out = io.StringIO()
    export(vault, out)
    doc = json.loads(out.getvalue())
    rows = [(r["type"], r["session_id"], r["message_id"], r.get("role"), r.get("channel"),
             r["created_at"], r["content"])
            for category in doc["categories"].values() for r in category["records"]
            if r["type"] in ("message", "summary")]
    assert len(rows) == len(set(rows)) == doc["record_count"] - len(
        [r for c in doc["categories"].values() for r in c["records"]
         if r["type"] not in ("message", "summary")])
    return set(rows)


def vault_for(user: str) -> Vault:
    return Vault(resolve(user=user))


def stamp(line: bytes) -> str:
    try:
        value = json.loads(line).get("timestamp")
    except ValueError:
        return ""
    return value if isinstance(value, str) else ""


def live_copy(source: Path, where: Path, cut: int) -> Path:
    """The transcript as a live session leaves it `cut` bytes in, at a path of the same
    name: a Claude Code session's subagent files as they stood at that moment (the lines
    written no later than the session's last whole line)."""
    data = source.read_bytes()
    where.mkdir(parents=True, exist_ok=True)
    path = where / source.name
    path.write_bytes(data[:cut])
    folder = source.with_suffix("") / "subagents"
    if folder.is_dir():
        whole_lines = data[:cut].split(b"\n")[:-1]
        until = max((stamp(line) for line in whole_lines), default="")
        target = path.with_suffix("") / "subagents"
        target.mkdir(parents=True, exist_ok=True)
        for agent in folder.glob("agent-*.jsonl"):
            lines = agent.read_bytes().splitlines(keepends=True)
            (target / agent.name).write_bytes(
                b"".join(line for line in lines if stamp(line) <= until))
    return path


def grow(source: Path, path: Path) -> None:
    """The live copy becomes the whole transcript, subagents and all."""
    shutil.copyfile(source, path)
    folder = source.with_suffix("") / "subagents"
    if folder.is_dir():
        for agent in folder.glob("agent-*.jsonl"):
            shutil.copyfile(agent, path.with_suffix("") / "subagents" / agent.name)


def ingest_part(vault: Vault, path: Path) -> None:
    """An ingest of a file read mid-write: one with nothing whole in it yet is refused,
    as it should be, and stores nothing."""
    try:
        ingest_file(vault, path)
    except (NotTranscript, DataError):
        pass


def cuts(source: Path, name: str) -> list[int]:
    """Byte offsets to cut at: line ends, inside a line, and inside a character."""
    data = source.read_bytes()
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    samples = SAMPLES if len(data) < 1 << 20 else SAMPLES // 4  # a large one costs more
    picked = ends if len(ends) <= EVERY_LINE else ends[:: max(1, len(ends) // samples)]
    picked = sorted({*picked, *(ends[n - 1] for n in AT_LINES.get(name, []))})
    inside = [end - 20 for end in picked[1::2]]  # inside the line after a line end
    # Inside a multi-byte character (the file was read between its bytes).
    wide = [i + 1 for i, b in enumerate(data) if b >= 0xC0]
    wide = [wide[len(wide) // 3], wide[2 * len(wide) // 3]] if wide else []
    return sorted({c for c in [*picked, *inside, *wide] if 0 < c < len(data)})


real_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"no benchmark data in {DATA}")


# The two large Claude Code sessions, cut at every chosen point, are the long run's.
LARGE = {"claude-code-subagent", "claude-code-resumed"}


@real_data
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n in LARGE
                                  else n for n in sorted(REAL)])
def test_a_live_transcript_ingested_cut_then_whole_stores_what_the_whole_stores(
        vault: Vault, tmp_path: Path, name: str) -> None:
    source = REAL[name]
    expected = _whole(source, name)
    assert expected
    for n, cut in enumerate(cuts(source, name)):
        user = vault_for(f"cut{n}")
        path = live_copy(source, tmp_path / f"live{n}", cut)
        ingest_part(user, path)
        grow(source, path)
        ingest_file(user, path)
        got = stored(user)
        assert got == expected, (cut, sorted(expected - got)[:3], sorted(got - expected)[:3])


@real_data
@pytest.mark.parametrize("name", sorted(REAL))
def test_a_live_transcript_ingested_in_several_steps_stores_what_the_whole_stores(
        vault: Vault, tmp_path: Path, name: str) -> None:
    source = REAL[name]
    points = cuts(source, name)
    steps = [points[len(points) // 4], points[len(points) // 2], points[-1]]
    user = vault_for("steps")
    for cut in steps:  # prefix1, prefix2, prefix3, then the whole
        ingest_part(user, live_copy(source, tmp_path / "live", cut))
    path = tmp_path / "live" / source.name
    grow(source, path)
    ingest_file(user, path)
    assert stored(user) == _whole(source, name)


@real_data
def test_a_periodic_scan_of_a_growing_session_stores_what_the_whole_stores(
        vault: Vault, tmp_path: Path) -> None:
    """The cron scan reads the session (and its subagents' files, each on its own) as it
    grows: at the moment a Task subagent is half done, then at the end."""
    source = REAL["claude-code-subagent"]
    text = source.read_bytes()
    ends = [i + 1 for i, b in enumerate(text) if b == ord("\n")]
    root = tmp_path / "projects"
    user = vault_for("scanned")
    for cut in (ends[945], ends[1477], len(text)):
        path = live_copy(source, root / "-home-proj", cut)
        scan_dir(user, root)
    assert path.read_bytes() == text
    assert stored(user) == _whole(source, "claude-code-subagent")


_WHOLE: dict[str, Stored] = {}


def _whole(source: Path, name: str) -> Stored:
    """What one ingest of the whole transcript stores, by a user of its own."""
    if name not in _WHOLE:
        vault = vault_for(f"whole{len(_WHOLE)}")
        ingest_file(vault, source)
        _WHOLE[name] = stored(vault)
    return _WHOLE[name]


# --- synthetic sessions: fast, and without the benchmark data --------------------------------

RESUMED, FIRST = "b162b1ae-0000-4000-8000-000000000002", "e9f146fa-0000-4000-8000-000000000001"


def claude_line(uuid: str, parent: str | None, kind: str, content: Any, second: int,
                session: str = FIRST, message_id: str | None = None,
                **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if message_id:
        message["id"] = message_id
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": session,
            "timestamp": f"2026-03-01T10:{second // 60:02d}:{second % 60:02d}.000Z",
            "message": message, **extra}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> bytes:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def every_cut_then_whole(tmp_path: Path, rows: list[dict[str, Any]],
                         subagent: list[dict[str, Any]] | None = None) -> None:
    """Cut the session at every line end and inside every line (its subagent's file cut
    at the same moment), ingest, then ingest the whole: what one ingest of the whole
    stores, each time."""
    source = tmp_path / "source" / f"{RESUMED}.jsonl"
    data = write_rows(source, rows)
    if subagent is not None:
        write_rows(source.with_suffix("") / "subagents" / "agent-a1b2c3.jsonl", subagent)
    whole = vault_for("whole")
    ingest_file(whole, source)
    expected = stored(whole)
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    for n, cut in enumerate(sorted({*ends, *(e - 9 for e in ends)})):
        user = vault_for(f"cut{n}")
        path = live_copy(source, tmp_path / f"live{n}", cut)
        ingest_part(user, path)
        grow(source, path)
        ingest_file(user, path)
        assert stored(user) == expected, cut


def test_a_resumed_session_cut_before_it_resumed_stores_each_message_once(
        vault: Vault, tmp_path: Path) -> None:
    """A resumed Claude Code session goes on in a file whose first lines keep the session
    they were said in: the last turn's session changes as the file grows, a line's never
    does. Each message is stored in its line's session, whenever the file is read."""
    rows = [
        claude_line("u1", None, "user", "Which port does the staging proxy use?", 1),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "Port 8443."}], 2,
                    message_id="msg_1"),
        # Resumed: the last line again under the new session, and the talk goes on.
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "Port 8443."}], 60,
                    session=RESUMED, message_id="msg_1"),
        claude_line("u2", "a1", "user", "And the production proxy?", 61, session=RESUMED),
        claude_line("a2", "u2", "assistant", [{"type": "text", "text": "Port 443."}], 62,
                    session=RESUMED, message_id="msg_2"),
    ]
    every_cut_then_whole(tmp_path, rows)
    whole = stored(vault_for("whole"))
    assert {(r[1], r[6]) for r in whole} == {
        (FIRST, "Which port does the staging proxy use?"), (FIRST, "Port 8443."),
        (RESUMED, "And the production proxy?"), (RESUMED, "Port 443.")}


def test_a_task_subagent_read_while_it_works_is_stored_whole(
        vault: Vault, tmp_path: Path) -> None:
    """A Task subagent's prompt, replies and tool results (its own file beside the
    session's) are kept whatever moment the session and the subagent are read at: before
    the Task call, while the subagent works (its file half written), after its answer."""
    task = {"type": "tool_use", "id": "toolu_task", "name": "Task",
            "input": {"description": "Find the hook contract", "prompt": "Read the docs"}}
    rows = [
        claude_line("u1", None, "user", "What does a SessionStart hook print?", 1),
        claude_line("a1", "u1", "assistant", [{"type": "text", "text": "Let me ask."}], 2,
                    message_id="msg_1"),
        claude_line("a2", "a1", "assistant", [task], 3, message_id="msg_1"),
        claude_line("r1", "a2", "user", [{"type": "tool_result", "tool_use_id": "toolu_task",
                                          "content": "JSON with additionalContext"}], 40),
        claude_line("a3", "r1", "assistant", [{"type": "text", "text": "It prints JSON."}],
                    41, message_id="msg_9"),
    ]
    sidechain = {"isSidechain": True, "agentId": "a1b2c3"}
    subagent = [
        claude_line("s1", None, "user", "Read the docs", 4, **sidechain),
        claude_line("s2", "s1", "assistant", [{"type": "text", "text": "Reading."}], 5,
                    message_id="msg_s1", **sidechain),
        claude_line("s3", "s2", "assistant", [{"type": "tool_use", "id": "toolu_r",
                                               "name": "Read",
                                               "input": {"file_path": "/docs/hooks.md"}}],
                    6, message_id="msg_s1", **sidechain),
        claude_line("s4", "s3", "user", [{"type": "tool_result", "tool_use_id": "toolu_r",
                                          "content": "hookSpecificOutput …"}], 7, **sidechain),
        claude_line("s5", "s4", "assistant", [{"type": "text", "text": "JSON with "
                                               "additionalContext"}], 8,
                    message_id="msg_s2", **sidechain),
    ]
    every_cut_then_whole(tmp_path, rows, subagent)
    channels = {(r[3], r[4]) for r in stored(vault_for("whole"))}
    assert ("user", "subagent:a1b2c3") in channels and ("tool", "subagent:a1b2c3") in channels


def test_a_transcript_read_inside_a_character_stores_its_whole_lines(
        vault: Vault, tmp_path: Path) -> None:
    """A file read while it is written may end between the bytes of a character: its
    last line is torn (read again later), the lines before are stored, not refused."""
    rows = [claude_line("u1", None, "user", "Café au lait, s'il vous plaît", 1),
            claude_line("u2", "u1", "user", "Crème brûlée ensuite", 2)]
    data = write_rows(tmp_path / "whole.jsonl", rows)
    cut = data.index("û".encode()) + 1
    path = tmp_path / "live" / f"{FIRST}.jsonl"
    path.parent.mkdir()
    path.write_bytes(data[:cut])
    result = ingest_file(vault, path)
    assert result.messages_added == 1 and dict(result.ignored) == {"torn last line": 1}
    path.write_bytes(data)
    assert ingest_file(vault, path).messages_added == 1
    assert {r[6] for r in stored(vault)} == {"Café au lait, s'il vous plaît",
                                             "Crème brûlée ensuite"}
