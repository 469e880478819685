"""Claude Code hooks through the installed script (SPEC §6): SessionStart answers with the
brief, SessionEnd and PreCompact hand the transcript to a background ingest and return at
once, and a hook always exits 0 and logs instead of failing. The settings.json installer,
and the brief itself (SPEC §8)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.integrations import claude_code as hooks
from memvault.integrations import hookbase
from memvault.ops import remember
from memvault.ops.brief import build
from memvault.storage import fsio
from memvault.vault.vault import Vault
from tests.conftest import mem

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
MEM = Path(sys.executable).parent / "mem"
CLAUDE_SID = "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"
CANARY = "canaryplatypus"  # in payloads: must never reach the log
ENTRY = re.compile(r"^- \[([a-z]+), (now|\d+(?:m|h|d|mo|y))\] (.+)$")


# --- helpers ------------------------------------------------------------------------------


def background_ingests(marker: Path) -> list[int]:
    """Background `mem ingest` processes this test started: their argv names its tmp dir."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ingest" in argv and any(str(marker).encode() in a for a in argv):
            pids.append(int(proc.name))
    return pids


def wait_background(marker: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while background_ingests(marker):
        if time.monotonic() > deadline:
            raise AssertionError("a background ingest did not finish")
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Hooks log under tmp_path; no background ingest outlives its test."""
    path = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(path))
    yield path
    try:
        wait_background(tmp_path)
    finally:
        for pid in background_ingests(tmp_path):
            os.kill(pid, signal.SIGKILL)


def mem_json(script_runner: ScriptRunner, *args: str) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def hook(payload: object, **env: str) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """Run `mem hook claude-code` as Claude Code does; return the result and its wall time."""
    data = payload if isinstance(payload, bytes) else (
        payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
    started = time.perf_counter()
    result = subprocess.run([str(MEM), "hook", "claude-code"], input=data, capture_output=True,
                            env={**os.environ, **env}, timeout=30, check=False)
    return result, time.perf_counter() - started


def log_lines(log_dir: Path) -> list[str]:
    path = log_dir / hookbase.LOG_FILE
    return path.read_text().splitlines() if path.exists() else []


def message_count(script_runner: ScriptRunner, session: str) -> int:
    doc = mem_json(script_runner, "list", "--session", session, "--type", "message",
                   "--limit", "10000")
    return len(doc["records"])


def found(script_runner: ScriptRunner, word: str) -> list[dict[str, Any]]:
    result = mem(script_runner, "search", word, "--json")
    if result.returncode == 66:  # the background ingest has not yet made the user
        return []
    assert result.returncode == 0, result.stderr
    return [r for r in json.loads(result.stdout)["results"] if word in r["content"].lower()]


def poll_search(script_runner: ScriptRunner, word: str, timeout: float = 20) -> float:
    """Seconds until `mem search` finds the word (fails after `timeout`)."""
    started = time.monotonic()
    while not found(script_runner, word):
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{word!r} never became searchable")
        time.sleep(0.2)
    return time.monotonic() - started


def end_payload(path: Path, event: str = "SessionEnd", **extra: str) -> dict[str, Any]:
    doc = {"session_id": CLAUDE_SID, "transcript_path": str(path), "cwd": "/home/alice/proj",
           "hook_event_name": event, **extra}
    if event == "SessionEnd":
        doc.setdefault("reason", "exit")
    return doc


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "claude" / "projects" / "-home-alice-proj" / f"{CLAUDE_SID}.jsonl"
    path.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "claude-code.jsonl", path)
    return path


def grow_transcript(path: Path, text: str) -> None:
    line = {"parentUuid": "a-010", "isSidechain": False, "sessionId": CLAUDE_SID,
            "type": "user", "uuid": "u-200", "timestamp": "2025-06-01T11:00:00.000Z",
            "message": {"role": "user", "content": text}}
    with path.open("a") as fh:
        fh.write(json.dumps(line) + "\n")


# --- 3. the hook ------------------------------------------------------------------------------


@pytest.mark.script_launch_mode("subprocess")  # the hook's stdout is one JSON document
@pytest.mark.parametrize("source", ["startup", "compact"])
def test_session_start_prints_the_brief_as_one_json_document(
        script_runner: ScriptRunner, vault: Vault, log_dir: Path, source: str) -> None:
    mem_json(script_runner, "add", "Prefers tabs over spaces", "--type", "preference")
    mem_json(script_runner, "add", "Works on the billing service", "--type", "fact")
    result, _ = hook({"session_id": "s1", "transcript_path": "/nonexistent.jsonl",
                      "hook_event_name": "SessionStart", "source": source})
    assert result.returncode == 0 and result.stderr == b""
    doc = json.loads(result.stdout)  # exactly one document: two would not parse
    assert list(doc) == ["hookSpecificOutput"]
    out = doc["hookSpecificOutput"]
    assert set(out) == {"hookEventName", "additionalContext"}
    assert out["hookEventName"] == "SessionStart"
    brief = out["additionalContext"]
    assert "Prefers tabs over spaces" in brief and "Works on the billing service" in brief
    # Framed as reference data, not instructions.
    # Each brief has a nonce of its own: the same brief, framed again, differs only there.
    nonce = re.match(r'<mem-memory id="([0-9a-f]{32})">\nReference data from mem', brief)
    assert nonce
    again = hookbase.frame(build(Vault(resolve()), 50, 8000).brief)
    assert brief == re.sub(r'(?<=id=")[0-9a-f]{32}', nonce.group(1), again)
    assert any("SessionStart" in line for line in log_lines(log_dir))
    assert not any("tabs" in line for line in log_lines(log_dir))


@pytest.mark.script_launch_mode("subprocess")  # the hook's exit code and stdout
def test_session_start_with_nothing_to_brief_prints_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    result, _ = hook({"hook_event_name": "SessionStart", "source": "startup"})
    assert (result.returncode, result.stdout) == (0, b"")
    assert not (vault_dir / "default" / "alice").exists()
    # Messages are no brief material either.
    mem_json(script_runner, "ingest", str(FIXTURES / "jsonl-good.jsonl"))
    result, _ = hook({"hook_event_name": "SessionStart", "source": "resume"})
    assert (result.returncode, result.stdout) == (0, b"")


@pytest.mark.script_launch_mode("subprocess")  # a detached background ingest
def test_session_end_returns_at_once_and_ingests_in_the_background(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, transcript: Path,
        log_dir: Path) -> None:
    # The user's lock is held while the hook runs, so the ingest it starts cannot finish
    # before it is released: a hook that returns first did not wait for its ingest (one
    # that did would wait out the lock timeout, past `hook`'s own time-out).
    with fsio.locked(vault.layout.lock_path, 5, "the test"):
        result, _ = hook(end_payload(transcript), MEM_LOCK_TIMEOUT="60")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    poll_search(script_runner, "regression")
    wait_background(tmp_path)
    first = message_count(script_runner, CLAUDE_SID)
    assert first == 13

    again, _ = hook(end_payload(transcript))
    assert (again.returncode, again.stdout) == (0, b"")
    wait_background(tmp_path)
    assert message_count(script_runner, CLAUDE_SID) == first
    lines = log_lines(log_dir)
    # time, agent, event, session, outcome
    assert sum(f"claude-code SessionEnd [{CLAUDE_SID}]: ingest started" in line
               for line in lines) == 2
    assert not any("regression" in line for line in lines)
    actors = {e.get("actor") for e in mem_json(script_runner, "audit")["entries"]
              if e["op"] == "ingest"}
    assert actors == {"hook:claude-code:SessionEnd"}


@pytest.mark.script_launch_mode("subprocess")  # a detached background ingest
def test_the_background_ingest_waits_out_a_long_hold_of_the_users_lock(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, transcript: Path,
        log_dir: Path) -> None:
    """A sync pulling a large remote, or a compaction, holds the user's lock longer than
    a command waits for it (lock_timeout, here 0.5 s): the ingest a SessionEnd starts
    waits it out, as no one waits on it, and stores the session."""
    with fsio.locked(vault.layout.lock_path, 5, "the test"):
        result, _ = hook(end_payload(transcript), MEM_LOCK_TIMEOUT="0.5")
        assert (result.returncode, result.stdout) == (0, b"")
        time.sleep(2.5)  # five times what a command would wait
    wait_background(tmp_path)
    assert message_count(script_runner, CLAUDE_SID) == 13
    assert not any("locked" in line for line in log_lines(log_dir))


@pytest.mark.script_launch_mode("subprocess")  # a detached background ingest
def test_pre_compact_prints_nothing_and_ingests(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, transcript: Path) -> None:
    grow_transcript(transcript, "Keep the wombatcache flag on")
    result, _ = hook(end_payload(transcript, "PreCompact", trigger="auto",
                                       custom_instructions=CANARY))
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    poll_search(script_runner, "wombatcache")
    wait_background(tmp_path)
    assert message_count(script_runner, CLAUDE_SID) == 14
    # SessionEnd after PreCompact stores nothing twice.
    hook(end_payload(transcript))
    wait_background(tmp_path)
    assert message_count(script_runner, CLAUDE_SID) == 14


def test_with_sync_auto_the_background_ingest_syncs_after_storing(
        vault: Vault, tmp_path: Path, transcript: Path, log_dir: Path) -> None:
    """sync.auto: the detached ingest syncs once it has stored (never in the hook's own
    time); without it, nothing leaves the machine."""
    remote = tmp_path / "remote"
    remote.mkdir()
    result, _ = hook(end_payload(transcript), MEM_SYNC_REMOTE=str(remote))
    assert result.returncode == 0
    wait_background(tmp_path)
    assert not any(remote.iterdir())  # auto is off
    result, _ = hook(end_payload(transcript), MEM_SYNC_REMOTE=str(remote),
                     MEM_SYNC_AUTO="true")
    assert (result.returncode, result.stdout) == (0, b"")
    wait_background(tmp_path)
    assert list(remote.rglob("o/*")), log_lines(log_dir)


@pytest.mark.script_launch_mode("subprocess")  # detached ingests racing
def test_session_end_and_pre_compact_at_once_store_each_message_once(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, transcript: Path,
        log_dir: Path) -> None:
    """Two background ingests of one transcript race for the user's lock: one waits."""
    grow_transcript(transcript, "Racing the emuhatch ingest")
    started = [subprocess.Popen([str(MEM), "hook", "claude-code"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(2)]
    for proc, event in zip(started, ("PreCompact", "SessionEnd"), strict=True):
        out, err = proc.communicate(json.dumps(end_payload(transcript, event)).encode(),
                                    timeout=30)
        assert (proc.returncode, out, err) == (0, b"", b"")
    wait_background(tmp_path)
    assert message_count(script_runner, CLAUDE_SID) == 14
    assert found(script_runner, "emuhatch")
    assert not any("error" in line for line in log_lines(log_dir))


BAD_STDIN = {
    "garbage": f"not json {CANARY}",
    "empty": "",
    "list": json.dumps([{"hook_event_name": "SessionStart", "note": CANARY}]),
    "unknown event": json.dumps({"hook_event_name": "UserPromptSubmit", "prompt": CANARY}),
    "no transcript_path": json.dumps({"hook_event_name": "SessionEnd", "session_id": "s",
                                      "reason": CANARY}),
    "no such transcript": json.dumps({"hook_event_name": "SessionEnd", "session_id": "s",
                                      "transcript_path": "/nonexistent/s.jsonl",
                                      "reason": CANARY}),
    "binary": b"\xff\xfe\x00garbage",
}


@pytest.mark.script_launch_mode("subprocess")  # the hook's exit code, stdout, stderr
@pytest.mark.parametrize("name", sorted(BAD_STDIN))
def test_bad_input_exits_0_prints_nothing_and_logs_without_content(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, log_dir: Path,
        name: str) -> None:
    mem_json(script_runner, "add", "Secret recipe uses cardamom", "--type", "fact")
    payload = BAD_STDIN[name]
    result, _ = hook(payload.encode() if isinstance(payload, str) else payload)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    wait_background(tmp_path)
    lines = log_lines(log_dir)
    assert lines, "nothing was logged"
    text = "\n".join(lines)
    assert CANARY not in text and "cardamom" not in text
    if name == "no such transcript":
        assert any("no transcript at /nonexistent/s.jsonl" in line for line in lines)


@pytest.mark.parametrize("event", ["SessionStart", "SessionEnd", "PreCompact"])
@pytest.mark.parametrize("broken", ["no vault", "no key"])
def test_no_vault_or_no_key_exits_0_and_logs(
        tmp_path: Path, transcript: Path, log_dir: Path, event: str, broken: str) -> None:
    if broken == "no key":
        init = subprocess.run([str(MEM), "init"], capture_output=True, check=False)
        assert init.returncode == 0
        env = {"MEM_CONFIG_DIR": str(tmp_path / "empty-config")}
        expected = "no master key"
    else:
        env = {}
        expected = "no vault"
    result, _ = hook(end_payload(transcript, event), **env)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    wait_background(tmp_path)
    lines = log_lines(log_dir)
    assert any(expected in line for line in lines), lines
    assert not any("regression" in line for line in lines)
    if broken == "no vault":
        assert not (tmp_path / "vault").exists()  # a hook never creates one


@pytest.mark.script_launch_mode("subprocess")  # a detached ingest, refused
def test_frozen_user_session_end_exits_0_and_logs_the_refusal(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, transcript: Path,
        log_dir: Path) -> None:
    mem_json(script_runner, "add", "Prefers tea", "--type", "preference")
    assert mem(script_runner, "freeze").returncode == 0
    result, _ = hook(end_payload(transcript))
    assert (result.returncode, result.stdout) == (0, b"")
    wait_background(tmp_path)
    assert any("frozen" in line for line in log_lines(log_dir))
    assert message_count(script_runner, CLAUDE_SID) == 0
    # Reads still work: SessionStart of a frozen user still briefs.
    start, _ = hook({"hook_event_name": "SessionStart", "source": "startup"})
    assert "Prefers tea" in json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]


@pytest.mark.script_launch_mode("subprocess")  # a detached background ingest
def test_a_hook_ingest_of_secrets_leaves_no_trace_in_vault_or_log(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path,
        log_dir: Path) -> None:
    token = "ghp_" + "Qm7Zx2Lp9Vt4Rk8Wn3Jc6Hb1Gd5Fs0Ay2Eu7"
    aws = "AKIA" + "QX7RM2ZTB5WN3KLP"
    lines = []
    for i, content in enumerate([f"use {token} for the push", f"my id is {aws}",
                                 "the cassowary deploy is green"]):
        lines.append({"parentUuid": f"u{i - 1}" if i else None, "isSidechain": False,
                      "sessionId": "hook-secrets", "type": "user", "uuid": f"u{i}",
                      "timestamp": "2025-06-01T10:00:00Z",
                      "message": {"role": "user", "content": content}})
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result, _ = hook({"hook_event_name": "SessionEnd", "session_id": "hook-secrets",
                      "transcript_path": str(path), "reason": "exit"})
    assert result.returncode == 0
    poll_search(script_runner, "cassowary")
    wait_background(tmp_path)
    assert message_count(script_runner, "hook-secrets") == 1
    for directory in (vault_dir, tmp_path / "config", log_dir):
        for file in directory.rglob("*"):
            if file.is_file():
                data = file.read_bytes()
                assert token.encode() not in data and aws.encode() not in data, file


# --- 4. installing into settings.json -----------------------------------------------------


EXISTING = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
    "env": {"FOO": "bar"},
    "hooks": {
        "SessionStart": [{"matcher": "startup",
                          "hooks": [{"type": "command", "command": "echo hello"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreCompact": [{"matcher": "manual",
                        "hooks": [{"type": "command", "command": "backup.sh", "timeout": 5}]}],
    },
}


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".mem-backup-*"))


def ours(doc: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for g in doc.get("hooks", {}).get(event, []) for h in g.get("hooks", [])
            if hooks.ours(h)]


def test_install_merges_backs_up_is_idempotent_and_uninstall_restores(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    original = json.dumps(EXISTING, indent=4).encode()
    settings.write_bytes(original)

    first = mem_json(script_runner, "hooks", "install", "claude-code", "--settings",
                     str(settings))
    assert first["changed"] is True
    assert sorted(first["events"]) == ["PreCompact", "SessionEnd", "SessionStart"]
    assert [Path(first["backup"])] == backups(settings)
    assert Path(first["backup"]).read_bytes() == original
    doc = json.loads(settings.read_text())
    for key in ("model", "permissions", "env"):
        assert doc[key] == EXISTING[key]
    assert doc["hooks"]["Stop"] == EXISTING["hooks"]["Stop"]
    assert doc["hooks"]["SessionStart"][0] == EXISTING["hooks"]["SessionStart"][0]
    assert doc["hooks"]["PreCompact"][0] == EXISTING["hooks"]["PreCompact"][0]
    for event in ("SessionStart", "SessionEnd", "PreCompact"):
        (entry,) = ours(doc, event)
        # Exec form: the program and its arguments, never a shell line.
        assert entry["type"] == "command" and \
            " hook claude-code --" in " " + " ".join(entry["args"])
        assert Path(entry["command"]).is_absolute()
        assert 0 < entry["timeout"] <= 60

    installed = settings.read_bytes()
    second = mem_json(script_runner, "hooks", "install", "claude-code", "--settings",
                      str(settings))
    assert (second["changed"], second["backup"]) == (False, None)
    assert settings.read_bytes() == installed
    assert backups(settings) == [Path(first["backup"])]

    removed = mem_json(script_runner, "hooks", "uninstall", "claude-code", "--settings",
                       str(settings))
    assert removed["changed"] is True
    assert json.loads(settings.read_text()) == EXISTING  # only mem's entries went
    again = mem_json(script_runner, "hooks", "uninstall", "claude-code", "--settings",
                     str(settings))
    assert again["changed"] is False


def test_install_replaces_an_older_mem_entry_and_uninstall_keeps_its_neighbours(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    doc = json.loads(json.dumps(EXISTING))
    doc["hooks"]["SessionEnd"] = [{"hooks": [
        {"type": "command", "command": "other-tool --flush"},
        {"type": "command", "command": "/old/place/mem hook claude-code", "timeout": 10}]}]
    settings.write_text(json.dumps(doc))
    mem_json(script_runner, "hooks", "install", "claude-code", "--settings", str(settings))
    installed = json.loads(settings.read_text())
    (entry,) = ours(installed, "SessionEnd")
    assert not entry["command"].startswith("/old/place")
    assert {"type": "command", "command": "other-tool --flush"} in [
        h for g in installed["hooks"]["SessionEnd"] for h in g["hooks"]]
    mem_json(script_runner, "hooks", "uninstall", "claude-code", "--settings", str(settings))
    after = json.loads(settings.read_text())
    assert after["hooks"]["SessionEnd"] == [
        {"hooks": [{"type": "command", "command": "other-tool --flush"}]}]
    assert all(not ours(after, e) for e in ("SessionStart", "SessionEnd", "PreCompact"))


def test_install_refuses_a_settings_file_that_is_not_json(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    settings = tmp_path / "settings.json"
    for text in ('{"hooks": {', '["a list"]', '{"hooks": []}'):
        settings.write_text(text)
        for command in ("install", "uninstall"):
            result = mem(script_runner, "hooks", command, "claude-code", "--settings",
                         str(settings))
            assert result.returncode == 2, (text, command)
            assert result.stdout == "" and "nothing was changed" in result.stderr
            assert settings.read_text() == text
            assert backups(settings) == []


@pytest.mark.script_launch_mode("subprocess")  # installs the script's own path
def test_install_project_scope_and_the_installed_command_runs(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    result = mem(script_runner, "hooks", "install", "claude-code", "--scope", "project",
                 "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    # The project's local settings: this machine's path stays out of the committed file.
    settings = project / ".claude" / "settings.local.json"
    assert Path(doc["settings"]).resolve() == settings.resolve()
    assert not (project / ".claude" / "settings.json").exists()
    assert doc["backup"] is None  # there was nothing to back up
    assert not (tmp_path / "home" / ".claude").exists()  # the user scope is untouched

    mem_json(script_runner, "add", "Answers in Portuguese", "--type", "instruction")
    (entry,) = ours(json.loads(settings.read_text()), "SessionStart")
    # Claude Code runs the program with its arguments, in the project, without mem on PATH.
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([entry["command"], *entry["args"]], cwd=project, env=env,
                         input=json.dumps({"hook_event_name": "SessionStart",
                                           "source": "startup"}).encode(),
                         capture_output=True, timeout=30, check=False)
    assert ran.returncode == 0, ran.stderr
    context = json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Answers in Portuguese" in context


def test_install_never_overwrites_an_earlier_backup(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Install and uninstall within one second must not lose the original file's backup."""
    monkeypatch.setattr(hookbase.time, "strftime", lambda fmt, *a: "20260101120000")
    settings = tmp_path / "settings.json"
    original = json.dumps(EXISTING).encode()
    settings.write_bytes(original)
    assert hooks.install(settings).changed
    assert hooks.uninstall(settings).changed
    assert hooks.install(settings).changed
    kept = [p.read_bytes() for p in backups(settings)]
    assert len(kept) == 3 and original in kept


# --- 5. the brief ---------------------------------------------------------------------------


def populate_brief(script_runner: ScriptRunner) -> None:
    """One entry of every kind, a superseded fact, two summaries, messages."""
    def add(text: str, kind: str, *extra: str) -> str:
        return str(mem_json(script_runner, "add", text, "--type", kind, *extra)["memory_id"])

    old = add("Lives in Lisbon", "fact")
    add("Lives in Porto", "fact", "--supersedes", old)
    add("Prefers short answers", "preference")
    add("Always run the tests before committing", "instruction")
    add("The staging host is stg-2, not stg-1", "correction")
    add("Works on\nthe billing\n\n  service", "context")
    add("Reviews pull requests in the morning", "pattern")
    add("Summary one: set up the project", "summary")
    time.sleep(0.01)
    add("Summary two: fixed the login test", "summary")
    assert mem(script_runner, "pref", "set", "editor", "vim").returncode == 0
    mem_json(script_runner, "ingest", str(FIXTURES / "jsonl-good.jsonl"))


def entry_lines(markdown: str) -> list[tuple[str, str, str]]:
    out = []
    for line in markdown.splitlines():
        if line.startswith("- "):
            m = ENTRY.match(line)
            assert m, line
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


BEHAVIORAL = {"preference", "instruction", "correction", "setting"}
FACTS = {"fact", "context", "pattern"}


def test_brief_orders_behavioral_then_facts_then_recent_summaries(
        script_runner: ScriptRunner, vault: Vault) -> None:
    populate_brief(script_runner)
    result = mem(script_runner, "brief")
    assert result.returncode == 0
    text = result.stdout
    entries = entry_lines(text)
    kinds = [k for k, _, _ in entries]
    assert set(kinds) == BEHAVIORAL | FACTS | {"summary"}
    rank = [0 if k in BEHAVIORAL else 1 if k in FACTS else 2 for k in kinds]
    assert rank == sorted(rank)
    # The warning sits above the behavioral entries and asks to verify unusual ones.
    warning = text.index("confirm it with the user")
    assert warning < text.index("Prefers short answers")
    assert re.search(r"suggestions.*unusual.*(confirm|verify).*user", text, re.S)
    assert warning > text.index("Preferences and instructions")
    summaries = [c for k, _, c in entries if k == "summary"]
    assert summaries == ["Summary two: fixed the login test", "Summary one: set up the project"]
    contents = [c for _, _, c in entries]
    assert "Works on the billing service" in contents  # newlines and runs of space gone
    assert "editor: vim" in contents and "Lives in Porto" in contents
    assert "Lives in Lisbon" not in text  # superseded
    assert "staging database" not in text and "tabs over spaces" not in text  # messages
    assert all(age == "now" for _, age, _ in entries)

    doc = mem_json(script_runner, "brief")
    assert {"entries", "entry_count", "brief_count", "generated_at"} <= set(doc)
    assert doc["brief_count"] == len(doc["entries"]) == len(entries) == doc["entry_count"]
    assert [e["type"] for e in doc["entries"]] == kinds
    assert abs(datetime.fromisoformat(doc["generated_at"].replace("Z", "+00:00"))
               - datetime.now(UTC)) < timedelta(minutes=5)
    assert all("\n" not in e["content"] for e in doc["entries"])


def test_brief_ages(script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """Entries carry their age: an export with older dates, imported for another user."""
    mem_json(script_runner, "add", "Drinks oolong", "--type", "preference")
    mem_json(script_runner, "add", "Has a cat named Miso", "--type", "fact")
    mem_json(script_runner, "add", "Old session summary", "--type", "summary")
    export = json.loads(mem(script_runner, "export").stdout)
    now = datetime.now(UTC)
    ages = {"learned_context": (timedelta(days=3), "3d"),
            "preference": (timedelta(hours=5), "5h")}
    for category, (delta, _) in ages.items():
        for record in export["categories"][category]["records"]:
            record["created_at"] = (now - delta).isoformat().replace("+00:00", "Z")
    for record in export["categories"]["learned_context"]["records"]:
        if record["type"] == "summary":
            record["created_at"] = (now - timedelta(days=400)).isoformat().replace(
                "+00:00", "Z")
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    assert mem(script_runner, "import", str(path), "--user", "bob").returncode == 0
    entries = entry_lines(mem(script_runner, "brief", "--user", "bob").stdout)
    assert entries == [("preference", "5h", "Drinks oolong"),
                       ("fact", "3d", "Has a cat named Miso"),
                       ("summary", "1y", "Old session summary")]


@pytest.mark.slow
def test_brief_bounds(script_runner: ScriptRunner, vault: Vault) -> None:
    populate_brief(script_runner)
    v = Vault(resolve())
    for i in range(30):
        remember.add(v, f"Fact number {i} about the user, somewhat long to fill the brief quickly "
              f"{'x' * (i * 7)}", "fact")
    total = build(v, 1000, 10**6).brief_count
    assert total == 39

    limited = mem_json(script_runner, "brief", "--max-entries", "5")
    assert limited["brief_count"] == len(limited["entries"]) == 5
    assert limited["entry_count"] == total
    assert len(entry_lines(mem(script_runner, "brief", "--max-entries", "5").stdout)) == 5
    types = [e["type"] for e in limited["entries"]]
    # Behavioral first; among equal importance the newest first (the setting came last).
    assert types[:4] == ["setting", "correction", "instruction", "preference"]
    assert types[4] in FACTS
    small = mem(script_runner, "brief", "--max-chars", "700")
    assert 0 < len(small.stdout) <= 700
    for bad in (["--max-entries", "0"], ["--max-chars", "10"]):
        assert mem(script_runner, "brief", *bad).returncode == 2

    for max_entries in (1, 2, 3, 7, 50):
        for max_chars in (100, 250, 400, 500, 800, 1500, 3000, 8000):
            doc = build(v, max_entries, max_chars)
            assert len(doc.brief) <= max_chars, (max_entries, max_chars)
            assert doc.brief_count == len(doc.entries) <= max_entries
            assert len(entry_lines(doc.brief)) == doc.brief_count
            rank = [0 if e.type in BEHAVIORAL else 1 if e.type in FACTS else 2
                    for e in doc.entries]
            assert rank == sorted(rank)
    # A bound in characters drops whole entries (never half a line), section by section.
    assert build(v, 50, 100_000).brief_count == 39
