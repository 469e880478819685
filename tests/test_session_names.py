"""Session ids that are not valid names (SPEC §2; docs/vault-format.md, Names): a hook's
or a transcript's id becomes a valid name the same way every time, two ids never share
one, a valid id keeps its name, and nothing escapes the vault. Through each agent's hook:
the transcript is stored, under the name the mapping gives, and the hook exits 0."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.config import NAME_RE, resolve, validate_name
from memvault.integrations import claude_code, codex, gemini, hookbase
from memvault.model.location import session_file
from memvault.ops.ingest import session_name
from memvault.vault.vault import Vault
from tests.conftest import mem

MEM = Path(sys.executable).parent / "mem"
# Every character, lone surrogates too: JSON can carry "\ud800" in a session id.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=300)
HOSTILE = [
    "../../../etc/passwd", "/abs/path/session", "..", ".", "", "-", ".hidden",
    "a\x00b", "C:\\Users\\ana\\session", "a\\..\\b", "tab\there", "new\nline",
    "\x1b[2J\x1b]0;title\x07", "invoice\u202egpj.exe", "sessão-ünïcode", "日本語",
    "x" * 65, "y" * 500, "--scan=/", "a/b", "a b", "a\\b", "a:b", "\ud800lone",
    "CON", "nul.jsonl",
]


def own_children() -> set[int]:
    """The processes this one started that have not been reaped (zombies included)."""
    me, found = os.getpid(), set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.add(int(proc.name))
    return found


# Processes the test session keeps for its whole run (a test server started by a
# session-scoped fixture in this same worker): never waited for here.
BEFORE: set[int] = set()


def wait_children() -> None:
    """Until every process this test started has exited: the hooks below run in-process,
    so the ingests they start are its children. Only those: a server another test's
    fixture keeps running in this worker is not waited for."""
    while True:
        started = own_children() - BEFORE
        if not started:
            return
        for pid in started:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                BEFORE.add(pid)  # not ours to reap after all


@pytest.fixture(autouse=True)
def _children_before() -> None:
    BEFORE.clear()
    BEFORE.update(own_children())


def wait_background(marker: Path, timeout: float = 60) -> None:
    """Until no `mem ingest` started with `marker` in its argv runs (started by a hook
    run as its own process)."""
    deadline = time.monotonic() + timeout
    while any(marker_in(proc, marker) for proc in Path("/proc").iterdir()
              if proc.name.isdigit()):
        if time.monotonic() > deadline:
            raise AssertionError("a background ingest did not finish")
        time.sleep(0.05)


def marker_in(proc: Path, marker: Path) -> bool:
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"ingest" in argv and any(str(marker).encode() in a for a in argv)


@pytest.fixture(autouse=True)
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(path))
    monkeypatch.setenv("MEM_LOCK_TIMEOUT", "30")  # one ingest at a time, never timed out
    return path


# --- the mapping ------------------------------------------------------------------------


@given(ANY_TEXT)
@example("a/b")
@example("\ud800")
@example("é" * 64)
@example("_x")
def test_any_id_maps_to_one_valid_name_inside_the_vault(session: str) -> None:
    name = session_name(session)
    assert validate_name("session", name) == name
    assert session_name(session) == name  # PreCompact and SessionEnd agree
    assert session_name(name) == name  # a mapped name is a name: kept as it is
    if NAME_RE.fullmatch(session):
        assert name == session  # a valid id keeps its name (existing vaults' files)
    sessions = Path("/vault/org/user/sessions")
    target = Path(os.path.normpath(sessions.parent / session_file(name)))
    assert target.parent == sessions and target.name == f"{name}.jsonl"
    assert name.isascii() and name.isprintable()


@given(ANY_TEXT, ANY_TEXT)
@example("a/b", "a\\b")  # the same readable part: the hash tells them apart
@example("a b", "a-b")  # the second is valid: kept, the first is not: hashed
@example("x" * 70 + "1", "x" * 70 + "2")  # alike in their first 70 characters
@example("\ud800", "\ud801")
@example("", "-")
def test_two_ids_never_share_a_name(one: str, other: str) -> None:
    if one != other:
        assert session_name(one) != session_name(other)


def test_the_mapping_is_the_documented_one() -> None:
    # docs/vault-format.md, Names: vaults named by it keep their files.
    assert session_name("web/notes") == "web-notes-3db2dbe6761f"
    assert session_name("5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00") == \
        "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"
    assert session_name("__").startswith("s-")


# --- through each agent's hook ------------------------------------------------------------


def claude_transcript(path: Path, word: str) -> None:
    rows = [{"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "ignored",
             "timestamp": "2026-03-01T10:00:00.000Z",
             "message": {"role": "user", "content": f"Remember the {word} flag"}},
            {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "ignored",
             "timestamp": "2026-03-01T10:00:05.000Z",
             "message": {"id": "msg_1", "role": "assistant",
                         "content": [{"type": "text", "text": "Noted."}]}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def codex_transcript(path: Path, word: str) -> None:
    rows = [{"timestamp": "2026-03-01T10:00:00.000Z", "type": "session_meta",
             "payload": {"id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
                         "timestamp": "2026-03-01T10:00:00.000Z", "cwd": "/home/ana"}},
            {"timestamp": "2026-03-01T10:00:01.000Z", "type": "response_item",
             "payload": {"type": "message", "role": "user",
                         "content": [{"type": "input_text",
                                      "text": f"Remember the {word} flag"}]}},
            {"timestamp": "2026-03-01T10:00:02.000Z", "type": "response_item",
             "payload": {"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "Noted."}]}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def gemini_transcript(path: Path, word: str) -> None:
    doc = {"sessionId": "ignored", "projectHash": "p", "startTime": "2026-03-01T10:00:00Z",
           "lastUpdated": "2026-03-01T10:00:05Z",
           "messages": [{"id": "m1", "timestamp": "2026-03-01T10:00:00Z", "type": "user",
                         "content": f"Remember the {word} flag"},
                        {"id": "m2", "timestamp": "2026-03-01T10:00:05Z", "type": "gemini",
                         "content": "Noted."}]}
    path.write_text(json.dumps(doc))


AGENTS: dict[str, tuple[Any, Any, str]] = {
    "claude-code": (claude_code, claude_transcript, "SessionEnd"),
    "codex": (codex, codex_transcript, "SessionEnd"),
    "gemini": (gemini, gemini_transcript, "SessionEnd"),
}


def stored(script_runner: ScriptRunner, name: str) -> list[str]:
    result = mem(script_runner, "list", "--session", name, "--type", "message", "--json")
    assert result.returncode == 0, result.stderr
    return sorted(r["content"] for r in json.loads(result.stdout)["records"])


def through_hook(tmp_path: Path, agent: str, session: str, word: str,
                 event: str | None = None) -> None:
    """The agent's hook handed this session id (in-process, as `mem hook AGENT` runs it);
    its background ingest is left running (wait_children waits for them all)."""
    module, write, end = AGENTS[agent]
    transcript = tmp_path / "agent" / f"transcript-{word}.jsonl"
    transcript.parent.mkdir(exist_ok=True)
    write(transcript, word)
    payload = {"hook_event_name": event or end, "session_id": session,
               "transcript_path": str(transcript), "cwd": "/"}
    assert module.handle(resolve, json.dumps(payload)) is None


def word_for(n: int) -> str:
    return "zebra" + "".join("qwrtypsdfg"[int(d)] for d in str(n))


def said(word: str) -> list[str]:
    return ["Noted.", f"Remember the {word} flag"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_hostile_session_id_is_stored_under_its_mapped_name(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, log_dir: Path,
        agent: str) -> None:
    ids = ["../../x/../y", "a\x00b\x1b[2J\u202egpj", "C:\\Users\\x", "é" * 70]
    compact = {"claude-code": "PreCompact", "codex": "PreCompact", "gemini": "PreCompress"}
    for n, session in enumerate(ids):
        through_hook(tmp_path, agent, session, word_for(n), compact[agent])
    wait_children()
    for n, session in enumerate(ids):  # and at the session's end, once more
        through_hook(tmp_path, agent, session, word_for(n))
    wait_children()
    for n, session in enumerate(ids):
        assert stored(script_runner, session_name(session)) == said(word_for(n))
    files = sorted(p.name for p in vault.layout.path("sessions").iterdir())
    assert files == sorted(f"{session_name(s)}.jsonl" for s in ids)
    log = (log_dir / hookbase.LOG_FILE).read_text()
    assert log.count("ingest started in the background as session") == 2 * len(ids)
    assert "failed" not in log and "exit 2" not in log


@settings(max_examples=5, suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)
@given(session=st.text(st.characters(exclude_categories=()), min_size=1, max_size=120))
@example(session="../" * 30)
def test_any_session_id_through_the_hook_is_kept_and_found(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, session: str) -> None:
    digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()
    word = word_for(int(digest[:5], 16))
    through_hook(tmp_path, "claude-code", session, word)
    wait_children()
    name = session_name(session)
    assert stored(script_runner, name) == said(word)
    forgot = mem(script_runner, "forget", "--session", name, "--yes", "--json")
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["deleted_count"] == 2
    assert stored(script_runner, name) == []


@pytest.mark.script_launch_mode("subprocess")
def test_the_hook_command_exits_0_for_a_hostile_session_id(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    transcript = tmp_path / "agent" / "t.jsonl"
    transcript.parent.mkdir()
    claude_transcript(transcript, "zebraquux")
    session = "../../\x00\u202e" + "z" * 80
    payload = {"hook_event_name": "SessionEnd", "session_id": session,
               "transcript_path": str(transcript), "cwd": "/"}
    result = subprocess.run([str(MEM), "hook", "claude-code"], timeout=30, check=False,
                            input=json.dumps(payload).encode(), capture_output=True)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    wait_background(tmp_path)
    deadline = time.monotonic() + 60  # the ingest is the hook's child, not this test's
    while not stored(script_runner, session_name(session)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stored(script_runner, session_name(session)) == said("zebraquux")
