"""`mem doctor`: one line per finding with the command that fixes it, exit 0 when healthy
(1 on a warning with --strict, the error's own code on an error), nothing written to the
vault and no memory shown."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.embed.builtin import load
from memvault.integrations import claude_code
from memvault.model.records import NewMessage
from memvault.ops import compact, embed, ingest, keys
from memvault.ops.admin import init
from memvault.vault.vault import Vault
from tests.conftest import mem

SECRET_WORDS = "Prefers green tea with oat milk"


@pytest.fixture(autouse=True)
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No agent on PATH unless a test puts one there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def doctor(script_runner: ScriptRunner, *args: str) -> tuple[int, dict[str, Any]]:
    result = mem(script_runner, "doctor", "--json", *args)
    return result.returncode, json.loads(result.stdout)


def finding(doc: dict[str, Any], check: str) -> dict[str, Any]:
    (found,) = [f for f in doc["findings"] if f["check"] == check]
    return found


@pytest.fixture
def backed_up(vault: Vault, tmp_path: Path) -> Vault:
    """A vault whose key has a backup on record (else the doctor warns of it)."""
    keys.backup_key(vault, tmp_path / "key.backup", "a long passphrase")
    return vault


def files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_healthy_vault_is_ok_exits_0_and_doctor_writes_and_shows_nothing_of_it(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    assert mem(script_runner, "add", SECRET_WORDS, "--type", "preference").returncode == 0
    code, doc = doctor(script_runner)
    assert code == 0 and doc["ok"] is False  # a warning: the key was never backed up
    assert finding(doc, "key-backup")["fix"] == "mem key backup --output FILE"
    (tmp_path / "pass").write_text("a long passphrase\n")
    assert mem(script_runner, "key", "backup", "--output", str(tmp_path / "key.backup"),
               "--passphrase-file", str(tmp_path / "pass")).returncode == 0
    before = files(vault_dir)
    result = mem(script_runner, "doctor")
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("ok ") for line in lines), lines
    code, doc = doctor(script_runner, "--strict")
    assert code == 0 and doc["ok"] is True
    checks = [f["check"] for f in doc["findings"]]
    assert checks[:5] == ["key", "vault", "user", "key-backup", "index"]
    assert {"compaction", "last-compaction", "disk", "agent:claude-code", "agent:codex",
            "agent:gemini", "hook-log"} <= set(checks)
    assert "index: current, 1 document" in finding(doc, "index")["what"]
    assert files(vault_dir) == before
    for text in (result.stdout, result.stderr, json.dumps(doc)):
        assert "green tea" not in text


def test_no_key_is_exit_78_with_restore_as_its_fix_and_init_only_without_a_vault(
        script_runner: ScriptRunner, vault: Vault, config_dir: Path, vault_dir: Path) -> None:
    (config_dir / "master.key").unlink()
    result = mem(script_runner, "doctor")
    assert result.returncode == 78
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("error")]
    assert "key" in line and line.endswith("-> mem key restore FILE")
    code, doc = doctor(script_runner)
    assert code == 78 and doc["ok"] is False
    key = finding(doc, "key")
    assert (key["severity"], key["fix"]) == ("error", "mem key restore FILE")
    (vault_dir / "vault.json").unlink()  # no vault here: a new one is the way
    code, doc = doctor(script_runner)
    assert code == 78 and finding(doc, "key")["fix"] == "mem init"


def test_a_key_file_others_can_read_is_exit_78_with_chmod_as_its_fix(
        script_runner: ScriptRunner, vault: Vault, config_dir: Path) -> None:
    key = config_dir / "master.key"
    key.chmod(0o644)
    code, doc = doctor(script_runner)
    assert code == 78
    assert finding(doc, "key")["fix"] == f"chmod 600 {key}"


def test_a_passphrase_protected_key_is_reported_and_never_asked_for(
        script_runner: ScriptRunner, vault_dir: Path) -> None:
    init(resolve(), passphrase="correct horse")
    result = mem(script_runner, "doctor", "--json")  # stdin is a pipe, and nothing asks
    assert result.returncode == 0
    key = finding(json.loads(result.stdout), "key")
    assert key["severity"] == "warning" and "passphrase-protected" in key["what"]
    assert "Passphrase" not in result.stderr


def test_a_stale_or_broken_index_is_a_warning_that_names_mem_reindex(
        script_runner: ScriptRunner, vault: Vault, backed_up: Vault) -> None:
    assert mem(script_runner, "add", SECRET_WORDS, "--type", "preference").returncode == 0
    stamp = vault.layout.index_dir / "stamp"
    stamp.unlink()
    code, doc = doctor(script_runner)
    index = finding(doc, "index")
    assert (code, index["severity"], index["fix"]) == (0, "warning", "mem reindex")
    assert "stale" in index["what"] and doc["ok"] is False
    assert doctor(script_runner, "--strict")[0] == 1
    assert not stamp.exists()  # reported, not rebuilt: the doctor writes nothing
    # For another user, the fix names them.
    code, doc = doctor(script_runner, "--user", "alice")
    assert finding(doc, "index")["fix"] == "mem reindex --user=alice"

    (vault.layout.index_dir / "mem-index.json").write_text("{not json")
    stamp.write_text("x")
    index = finding(doctor(script_runner)[1], "index")
    assert "cannot be opened" in index["what"] and index["fix"] == "mem reindex"

    assert mem(script_runner, "reindex").returncode == 0
    code, doc = doctor(script_runner, "--strict")
    assert code == 0 and finding(doc, "index")["severity"] == "ok"


def test_a_hook_that_fails_shows_until_a_later_run_of_it_goes_well(
        script_runner: ScriptRunner, vault: Vault, config_dir: Path) -> None:
    start = json.dumps({"hook_event_name": "SessionStart", "session_id": "s1"})
    key = config_dir / "master.key"
    saved = key.read_bytes()
    key.unlink()
    assert claude_code.handle(resolve, start) is None  # logged, never raised
    key.write_bytes(saved)
    key.chmod(stat.S_IRUSR | stat.S_IWUSR)
    code, doc = doctor(script_runner)
    (log,) = [f for f in doc["findings"] if f["check"] == "hook-log"]
    assert code == 0 and log["severity"] == "warning"
    assert "claude-code SessionStart" in log["what"] and "no master key" in log["what"]

    claude_code.handle(resolve, start)  # the key is back: this run goes well
    log = finding(doctor(script_runner)[1], "hook-log")
    assert log["severity"] == "ok"


def messages(n: int) -> list[NewMessage]:
    return [NewMessage(f"message {i} about the build", "user" if i % 2 else "assistant",
                       f"m{i}", f"2026-01-01T10:{i // 60:02d}:{i % 60:02d}Z")
            for i in range(n)]


def test_messages_waiting_for_compaction_and_the_last_run_are_reported(
        script_runner: ScriptRunner, vault: Vault, backed_up: Vault) -> None:
    ingest.add_messages(vault, "long", messages(250))  # over session_max_messages (200)
    code, doc = doctor(script_runner)
    waiting = finding(doc, "compaction")
    assert (waiting["severity"], waiting["fix"]) == ("warning", "mem compact")
    assert "wait" in waiting["what"]
    assert "never" in finding(doc, "last-compaction")["what"]

    done = compact.compact_user(vault, resolve().compaction)
    embed.embed_pending(vault, load())  # nothing else waits: --strict fails on a warning
    code, doc = doctor(script_runner, "--strict")
    assert code == 0, doc
    assert "nothing waiting" in finding(doc, "compaction")["what"]
    last = finding(doc, "last-compaction")["what"]
    assert "just now" in last and "1 summary added" in last
    assert f"{done.archived} messages archived" in last


def test_an_agent_wired_in_a_form_its_release_does_not_run_is_sent_to_mem_setup(
        script_runner: ScriptRunner, backed_up: Vault, bin_dir: Path) -> None:
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\necho '2.1.100 (Claude Code)'\n")
    claude.chmod(0o755)
    code, doc = doctor(script_runner)
    assert finding(doc, "agent:claude-code")["fix"] == "mem setup"  # not set up at all
    # An earlier install wrote the exec form, which this release does not run.
    assert mem(script_runner, "hooks", "install", "claude-code", "--mcp").returncode == 0
    code, doc = doctor(script_runner)
    problem = finding(doc, "agent:claude-code")
    assert "exec form" in problem["what"] and problem["fix"] == "mem setup"
    assert mem(script_runner, "setup", "-y").returncode == 0
    code, doc = doctor(script_runner, "--strict")
    assert code == 0, doc
    assert "shell lines" in finding(doc, "agent:claude-code")["what"]
