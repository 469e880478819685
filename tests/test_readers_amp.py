"""Amp's threads (~/.local/share/amp/threads/T-<uuid>.json): the reader, detection,
`mem ingest` of a thread as Amp rewrites it, and `--scan` of Amp's default place.

Amp publishes no schema and no public sample of a thread exists, so the fixture
(fixtures/transcripts/amp/T-….json) is written from the layout two independent
open-source readers of Amp's local threads agree on: houston's notes on Amp
(docs/AMP_AGENT_SUPPORT.md: the folder, `T-` ids, `created` in milliseconds,
`env.initial.trees[].uri`, messages with `role`, `messageId`, `content`, `state.type`
complete|cancelled and `usage`), and a Rust library's serde types of the thread file (the
blocks text, thinking, redacted_thinking, tool_use `{id, name, input}` and tool_result
`{toolUseID, run: {status, result, error}}` with status done|error|cancelled|
rejected-by-user|blocked-on-user, and the role `info`). `meta.sentAt` (milliseconds) is
taken where a message has it, as the issue describes the file; the fixture gives it to
two of the user's prompts only.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.text.transcripts import FORMATS, detect, parse
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

THREAD = "T-019b9d03-62e3-772f-9780-3e637f90eaec"
FIXTURE = Path(__file__).parent / "fixtures" / "transcripts" / "amp" / f"{THREAD}.json"
GEMINI = {"sessionId": "s1", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z",
          "messages": [{"id": "m1", "type": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def initialised(vault: Vault) -> Vault:
    return vault


def mem_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def records(script_runner: ScriptRunner) -> list[dict[str, Any]]:
    doc = mem_json(script_runner, "list", "--type", "message", "--limit", "1000")
    return sorted(doc["records"], key=lambda r: r["created_at"])


def test_a_thread_is_what_the_user_saw() -> None:
    t = parse(FIXTURE.read_text())
    assert (t.format, t.session_id) == ("amp", THREAD)
    assert [(m.role, m.content, m.message_id, m.created_at) for m in t.messages] == [
        ("user", "Why is the build red?", "0", "2026-01-01T00:00:05.000Z"),
        ("assistant", "Checking CI.\n[tool Bash] make ci", "1", "2026-01-01T00:00:05.000Z"),
        ("tool", "[error] exit 2: lint failed", "2", "2026-01-01T00:00:05.000Z"),
        ("assistant", "Lint fails in src/cart.py.\n[tool edit_file] src/cart.py\n"
                      "[tool Bash] rm -rf build", "4", "2026-01-01T00:00:05.000Z"),
        ("tool", '{"diff": "-a\\n+b"}', "5", "2026-01-01T00:00:05.000Z"),
        ("tool", "[rejected-by-user]", "5#2", "2026-01-01T00:00:05.000Z"),
        ("user", "Don't delete build. Rerun the tests.", "7", "2026-01-01T00:01:00.000Z"),
        ("assistant", "[tool Bash] make test", "8", "2026-01-01T00:01:00.000Z"),
        ("tool", "42 passed", "9", "2026-01-01T00:01:00.000Z"),
        # Cancelled mid-way: as far as it was shown.
        ("assistant", "All 42 tests pass. The fix is", "10", "2026-01-01T00:01:00.000Z"),
    ]
    assert t.ignored == {"thinking": 1, "notice": 1}
    said = " ".join(m.content for m in t.messages)
    assert "look at ci" not in said and "Thursday" not in said and "compacted" not in said


def test_a_thread_without_times_of_its_own_takes_the_threads_start() -> None:
    doc = json.loads(FIXTURE.read_text())
    for message in doc["messages"]:
        message.pop("meta", None)
    t = parse(json.dumps(doc))
    assert {m.created_at for m in t.messages} == {"2026-01-01T00:00:00.000Z"}


def test_a_thread_is_recognised_and_others_are_not() -> None:
    assert "amp" in FORMATS
    assert detect(FIXTURE.read_text()) == "amp"
    assert detect(json.dumps(json.loads(FIXTURE.read_text()))) == "amp"  # on one line
    assert detect(json.dumps(GEMINI)) == "gemini"
    with pytest.raises(Exception, match="not a transcript"):
        detect(json.dumps({"id": "settings", "messages": "none"}))


def test_ingest_stores_the_thread_once_as_amp_rewrites_it(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    doc = json.loads(FIXTURE.read_text())
    path = tmp_path / FIXTURE.name
    grown = doc["messages"]
    doc["messages"] = grown[:3]
    path.write_text(json.dumps(doc))
    first = mem_json(script_runner, "ingest", str(path))
    assert (first["format"], first["session_id"], first["messages_added"]) == ("amp", THREAD, 3)
    # Amp writes the whole file again as the thread goes on: only what is new is added,
    # and the answer cancelled then is stored as it was shown.
    doc["messages"] = grown
    path.write_text(json.dumps(doc, indent=1))
    assert mem_json(script_runner, "ingest", str(path))["messages_added"] == 7
    assert mem_json(script_runner, "ingest", str(path))["messages_added"] == 0
    stored = records(script_runner)
    assert len(stored) == 10 and {r["agent"] for r in stored} == {"amp"}
    assert {r["session_id"] for r in stored} == {THREAD}


@pytest.mark.parametrize("xdg", [False, True])
def test_a_scan_without_a_folder_finds_amps_threads(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        xdg: bool) -> None:
    home = tmp_path / "home"
    data = tmp_path / "elsewhere" if xdg else home / ".local" / "share"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    threads = data / "amp" / "threads"
    threads.mkdir(parents=True)
    shutil.copyfile(FIXTURE, threads / FIXTURE.name)
    result = mem(script_runner, "ingest", "--scan")
    assert result.returncode == 0, result.stderr
    assert str(threads) in result.stderr or "amp" in result.stderr
    assert len(records(script_runner)) == 10
    again = mem_json(script_runner, "ingest", "--scan")
    assert again["files_unchanged"] == 1 and again["messages_added"] == 0


def test_ingest_lists_amp_among_its_formats(script_runner: ScriptRunner) -> None:
    assert "amp" in " ".join(mem(script_runner, "ingest", "--help").stdout.split())


def test_a_file_that_is_no_thread_given_as_amp_is_refused_in_one_line(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    for text in ("[1, 2]", json.dumps({"id": THREAD, "messages": {"0": "x"}}), "{not json"):
        path = tmp_path / "notes.json"
        path.write_text(text)
        result = mem(script_runner, "ingest", str(path), "--format", "amp")
        assert result.returncode == 65, result.stderr
        one_error_line(result.stderr)
    nothing = mem(script_runner, "list", "--type", "message")  # no user was even made
    assert nothing.returncode == 66 and "no memory yet" in nothing.stderr
