"""Every fix `mem doctor` gives for an agent is one that works here: where it says
`mem setup`, setup sets the agent up (exit 0) and the doctor asks for it no more; where
setup would refuse (a key only in MEM_MASTER_KEY for Gemini CLI, a Codex table that
names another user), the doctor says what to change instead, never `mem setup`.

The agents are small scripts on a PATH of their own that print their release as the
real ones do (as in test_setup.py); their settings are in the test's own HOME.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem

VERSION_LINES = {"claude": "{v} (Claude Code)", "codex": "codex-cli {v}", "gemini": "{v}"}
KEY_ELSEWHERE = ("keep the key in a key file (MEM_KEY_FILE) or behind MEM_KEY_COMMAND "
                 "instead of MEM_MASTER_KEY, then run mem setup")


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def agent(bin_dir: Path, command: str, version: str) -> None:
    path = bin_dir / command
    path.write_text(f"#!/bin/sh\necho '{VERSION_LINES[command].format(v=version)}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def agent_findings(script_runner: ScriptRunner) -> dict[str, list[dict[str, Any]]]:
    result = mem(script_runner, "doctor", "--json")
    found: dict[str, list[dict[str, Any]]] = {}
    for f in json.loads(result.stdout)["findings"]:
        if f["check"].startswith("agent:"):
            found.setdefault(f["check"].split(":", 1)[1], []).append(f)
    return found


def master_key_only(monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> None:
    """The key in MEM_MASTER_KEY: Gemini CLI cannot pass it to mem's server."""
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    agent(bin_dir, "gemini", "0.61.0")


def master_key_and_old_hooks(monkeypatch: pytest.MonkeyPatch, bin_dir: Path,
                             script_runner: ScriptRunner) -> None:
    """Gemini CLI's hooks from an earlier install, its server never: doctor finds it
    half set up."""
    agent(bin_dir, "gemini", "0.61.0")
    assert mem(script_runner, "hooks", "install", "gemini").returncode == 0
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())


def codex_table_names_another_user(monkeypatch: pytest.MonkeyPatch, bin_dir: Path,
                                   script_runner: ScriptRunner, tmp_path: Path) -> None:
    """Codex set up for bob, whose name its user also wrote into the server's env; mem
    now resolves carol: setup will not overwrite bob's table."""
    agent(bin_dir, "codex", "0.169.0")
    monkeypatch.setenv("MEM_USER", "bob")
    assert mem(script_runner, "setup", "-y").returncode == 0
    config = tmp_path / "home" / ".codex" / "config.toml"
    config.write_text(config.read_text().replace(
        "[mcp_servers.mem.env]\n", '[mcp_servers.mem.env]\nMEM_USER = "bob"\n'))
    assert 'MEM_USER = "bob"' in config.read_text()
    monkeypatch.setenv("MEM_USER", "carol")


def nothing_set_up(monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> None:
    for command, version in (("claude", "2.1.200"), ("codex", "0.169.0"),
                             ("gemini", "0.61.0")):
        agent(bin_dir, command, version)


def hooks_for_another_user(monkeypatch: pytest.MonkeyPatch, bin_dir: Path,
                           script_runner: ScriptRunner) -> None:
    nothing_set_up(monkeypatch, bin_dir)
    monkeypatch.setenv("MEM_USER", "bob")
    assert mem(script_runner, "setup", "-y").returncode == 0
    monkeypatch.setenv("MEM_USER", "carol")


SCENARIOS: dict[str, Callable[..., None]] = {
    "gemini-master-key": master_key_only,
    "gemini-master-key-half-set-up": master_key_and_old_hooks,
    "codex-table-names-another-user": codex_table_names_another_user,
    "nothing-set-up": nothing_set_up,
    "hooks-for-another-user": hooks_for_another_user,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_where_doctor_says_mem_setup_setup_works_and_then_doctor_is_content(
        script_runner: ScriptRunner, monkeypatch: pytest.MonkeyPatch, bin_dir: Path,
        tmp_path: Path, scenario: str) -> None:
    make = SCENARIOS[scenario]
    wanted = make.__code__.co_varnames[:make.__code__.co_argcount]
    given = {"monkeypatch": monkeypatch, "bin_dir": bin_dir,
             "script_runner": script_runner, "tmp_path": tmp_path}
    make(**{name: given[name] for name in wanted})
    before = agent_findings(script_runner)
    sent = {name for name, found in before.items()
            if any(f["fix"] == "mem setup" for f in found)}
    if scenario == "codex-table-names-another-user":  # refused: said, with what to do
        (found,) = before["codex"]
        assert found["severity"] == "warning" and "mem setup refuses it" in found["what"]
        assert "MEM_USER" in found["what"]
    if not sent:
        return
    result = mem(script_runner, "setup", "-y", "--json")
    agents = {a["name"]: a for a in json.loads(result.stdout)["agents"]}
    for name in sent:  # each agent the doctor sent to setup was set up
        assert agents[name]["error"] is None, (name, before[name], agents[name])
    assert result.returncode == 0, result.stderr
    after = agent_findings(script_runner)
    for name in sent:
        assert all(f["fix"] != "mem setup" for f in after[name]), (name, after[name])


@pytest.mark.parametrize("scenario", ["gemini-master-key", "gemini-master-key-half-set-up"])
def test_a_master_key_in_the_environment_is_told_to_move_for_gemini(
        script_runner: ScriptRunner, monkeypatch: pytest.MonkeyPatch, bin_dir: Path,
        vault: Any, config_dir: Path, scenario: str) -> None:
    key_file = config_dir / "master.key"  # the vault's own key, in its default file
    if scenario == "gemini-master-key":
        master_key_only(monkeypatch, bin_dir)
    else:
        master_key_and_old_hooks(monkeypatch, bin_dir, script_runner)
    (found,) = agent_findings(script_runner)["gemini"]
    assert found["severity"] == "warning" and "MEM_MASTER_KEY" in found["what"]
    assert found["fix"] == KEY_ELSEWHERE
    human = mem(script_runner, "doctor").stdout
    assert f"-> {KEY_ELSEWHERE}" in human and "-> mem setup\n" not in human
    # It is so: setup refuses Gemini CLI while the key is only there.
    refused = mem(script_runner, "setup", "-y")
    assert refused.returncode == 78 and "MEM_MASTER_KEY" in refused.stderr

    # Done as told: the key in its file, MEM_MASTER_KEY gone. Now setup is the fix.
    assert key_file.exists()
    monkeypatch.delenv("MEM_MASTER_KEY")
    (found,) = agent_findings(script_runner)["gemini"]
    assert found["fix"] == "mem setup"
    assert mem(script_runner, "setup", "-y").returncode == 0
    (found,) = agent_findings(script_runner)["gemini"]
    assert found["severity"] == "ok", found
