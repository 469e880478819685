"""A session with nothing to keep is not a failure, and every line of the hook log is
stamped.

An agent's session opened and quit leaves a transcript with no message to keep: Gemini
CLI's metadata line (perhaps a notice), Claude Code's file-history and hook-progress
lines, Codex's session line and environment context. Each is taken from the start of a
real session (../shared/bench-data/transcripts). `mem ingest` of one says "nothing to
keep" and exits 0, writing nothing; the background ingest a hook starts logs no error,
and `mem doctor` has nothing to warn of. A file of another format still fails (exit 65),
and whatever the background ingest writes to the hook log is stamped like every other
line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.errors import EX_DATAERR
from memvault.integrations import hookbase
from memvault.integrations.hookbase import frame
from memvault.ops import remember
from memvault.vault.vault import Vault
from tests.conftest import mem
from tests.test_hooks import wait_background

MEM = Path(sys.executable).parent / "mem"
DATA = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
GEMINI = DATA / "gemini" / "session-vibe-gemini.jsonl"
CLAUDE = DATA / "claude-code" / "short.jsonl"
CODEX = DATA / "codex" / "rollout-vibe-codex-0.39.jsonl"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"no benchmark data in {DATA}")


def head(path: Path, n: int) -> str:
    return "".join(path.read_text().splitlines(keepends=True)[:n])


def gemini_said(text: str, n: int) -> str:
    """A user record shaped as the real session's, saying `text`."""
    record = json.loads(GEMINI.read_text().splitlines()[3])
    assert record["type"] == "user"
    record = {**record, "id": f"harness-{n}", "content": [{"text": text}]}
    record.pop("displayContent")  # what the user typed: nothing, here
    return json.dumps(record) + "\n"


def sessions() -> dict[str, tuple[str, str, str]]:
    """name → (agent, file name, text): sessions opened and quit, from real ones."""
    gemini_meta = json.loads(GEMINI.read_text().splitlines()[0])
    return {
        # Gemini CLI's session file as it is when a session is opened and quit.
        "gemini empty": ("gemini", "session-empty.jsonl", head(GEMINI, 1)),
        # Its notice, its $set, the environment it hands the model, and mem's own brief
        # (the context the SessionStart hook added): the harness, no one's words.
        "gemini harness only": ("gemini", "session-harness.jsonl", head(GEMINI, 3)
                                + gemini_said("<session_context>\nToday is Monday.\n"
                                              "</session_context>", 1)
                                + gemini_said(frame("- [preference, 2d] Prefers tea"), 2)),
        "claude-code opened and quit": ("claude-code", f"{gemini_meta['sessionId']}.jsonl",
                                        head(CLAUDE, 3)),
        "codex opened and quit": ("codex", "rollout-quit.jsonl", head(CODEX, 2)),
        "empty file": ("jsonl", "empty.jsonl", ""),
    }


SESSIONS = sessions() if DATA.is_dir() else {}


@pytest.mark.parametrize("name", SESSIONS)
def test_ingest_of_a_session_with_nothing_to_keep_says_so_and_writes_nothing(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, name: str) -> None:
    agent, file_name, text = SESSIONS[name]
    path = tmp_path / file_name
    path.write_text(text)
    for fmt in ("auto", agent):
        done = mem(script_runner, "ingest", str(path), "--format", fmt, "--user", "bob")
        assert done.returncode == 0, done.stderr
        first = done.stderr.splitlines()[0]
        assert first.startswith("session ") and first.endswith(": nothing to keep"), first
        doc = json.loads(mem(script_runner, "ingest", str(path), "--format", fmt,
                             "--user", "bob", "--json").stdout)
        assert (doc["messages_added"], doc["messages_skipped"], doc["withheld"]) == (0, 0, 0)
    # No message, so no write: bob, who has no memory, still has none.
    assert not (vault.layout.root / "default" / "bob").exists()


def test_a_file_of_another_format_still_fails(script_runner: ScriptRunner, vault: Vault
                                              ) -> None:
    for fmt, path in (("gemini", CLAUDE), ("codex", GEMINI), ("claude-code", CODEX)):
        done = mem(script_runner, "ingest", str(path), "--format", fmt)
        assert done.returncode == EX_DATAERR, done.stderr
        assert f"no {fmt} messages in the transcript" in done.stderr


def end_session(agent: str, transcript: Path, session: str) -> None:
    payload = {"session_id": session, "transcript_path": str(transcript), "cwd": "/",
               "hook_event_name": "SessionEnd", "reason": "exit"}
    done = subprocess.run([str(MEM), "hook", agent], input=json.dumps(payload).encode(),
                          capture_output=True, timeout=30, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def log_runs(log_dir: Path) -> list[str]:
    return (log_dir / hookbase.LOG_FILE).read_text().splitlines()


def stamped(line: str) -> bool:
    match = hookbase._LOG_RE.fullmatch(line)
    if match is None:
        return False
    datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S%z")
    return True


def hook_log_finding(script_runner: ScriptRunner) -> dict[str, Any]:
    doc = json.loads(mem(script_runner, "doctor", "--json").stdout)
    (found,) = [f for f in doc["findings"] if f["check"] == "hook-log"]
    return dict(found)


@pytest.fixture
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    return tmp_path / "logs"


@pytest.mark.script_launch_mode("subprocess")  # detached background ingests
def test_sessions_opened_and_quit_end_quietly_through_the_hooks(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, log_dir: Path) -> None:
    remember.add(vault, "Prefers tea", "preference")
    for n, (agent, file_name, text) in enumerate(SESSIONS.values()):
        if agent == "jsonl":
            continue  # no agent's hook
        path = tmp_path / "t" / str(n) / file_name
        path.parent.mkdir(parents=True)
        path.write_text(text)
        end_session(agent, path, f"quit-{n}")
    wait_background(tmp_path)
    lines = log_runs(log_dir)
    assert len(lines) == 4 and all("ingest started in the background" in s for s in lines)
    assert hookbase.open_failures(hookbase.read_log(log_dir),
                                  datetime.now(UTC) - timedelta(days=1)) == []
    assert hook_log_finding(script_runner)["severity"] == "ok"


@pytest.mark.script_launch_mode("subprocess")  # a detached background ingest
def test_what_the_background_ingest_logs_is_stamped_with_its_run(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, log_dir: Path) -> None:
    """A real failure (Gemini's hook handed a Claude Code file) is logged as the run that
    started it, and doctor shows it under that run."""
    end_session("gemini", CLAUDE, "wrong-file")
    wait_background(tmp_path)
    lines = log_runs(log_dir)
    assert all(stamped(line) for line in lines), lines
    (failed,) = [line for line in lines if "mem: error:" in line]
    assert " gemini SessionEnd [wrong-file]: mem: error: no gemini messages" in failed
    found = hook_log_finding(script_runner)
    assert found["severity"] == "warning"
    assert "gemini SessionEnd: mem: error: no gemini messages" in found["what"]


def test_a_session_with_nothing_to_keep_logged_as_an_error_before_is_no_failure(
        script_runner: ScriptRunner, vault: Vault, log_dir: Path) -> None:
    """An earlier mem logged such a session as an error, unstamped: doctor no longer warns
    of it. A real error logged so still shows."""
    log_dir.mkdir()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S%z")
    log = log_dir / hookbase.LOG_FILE
    log.write_text(
        f"{now} gemini SessionEnd [s1]: ingest started in the background\n"
        "mem: error: no gemini messages in the transcript (1 lines or entries skipped: "
        "1 notice)\n"
        f"{now} gemini SessionEnd [s2]: ingest started in the background\n"
        "mem: error: the transcript is empty\n")
    assert hook_log_finding(script_runner)["severity"] == "ok"
    with log.open("a") as fh:
        fh.write(f"{now} gemini SessionEnd [s3]: ingest started in the background\n"
                 "mem: error: no master key found\n")
    found = hook_log_finding(script_runner)
    assert found["severity"] == "warning" and "no master key found" in found["what"]


def test_the_hook_log_stamp_takes_every_line_a_process_writes(tmp_path: Path) -> None:
    """The background ingest's stderr: whole lines, pieces of lines, a last line left
    unfinished, each written stamped; blank lines and control characters are not."""
    code = (
        "import sys\n"
        "from memvault.integrations.hookbase import stamp_stderr\n"
        "stamp_stderr('gemini SessionEnd [s1]')\n"
        "sys.stderr.write('mem: error: one\\n\\n')\n"
        "sys.stderr.write('warning: in ')\n"
        "sys.stderr.write('two pieces\\x1b[2J\\n')\n"
        "print('last, unfinished', end='', file=sys.stderr)\n")
    log = tmp_path / "hooks.log"
    with log.open("ab") as fh:
        subprocess.run([sys.executable, "-c", code], stderr=fh, check=True, timeout=30,
                       env={**os.environ})
    lines = log.read_text().splitlines()
    assert all(stamped(line) for line in lines), lines
    assert [line.split(": ", 1)[1] for line in lines] == [
        "mem: error: one", "warning: in two pieces?[2J", "last, unfinished"]
