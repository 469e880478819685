"""mem's Claude Code plugin and `mem setup`/`mem doctor`: a plugin that is enabled is mem
set up in Claude Code (doctor says so, setup adds nothing beside it), and a user who set
mem up twice (the plugin, and setup's own hooks and server) is told, with a fix that
takes one out.

The plugin is installed the way Claude Code installs it: by the real `claude plugin
marketplace add` and `claude plugin install`, offline, from this repository, into the
test's own HOME (tests/agents; skipped where it is not installed, and CI installs it);
and, everywhere, by writing the records as that release writes them (the first test
holds the two against each other where the CLI is here).
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem
from tests.test_clients import ROOT, TIMEOUT, client, client_env

PLUGIN_ID = "mem@memvault"
PLUGIN = ROOT / "plugins" / "mem"


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with the `mem` the plugin runs by name, and the agents a test puts there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    installed = shutil.which("mem")
    assert installed is not None
    (folder / "mem").symlink_to(installed)
    monkeypatch.setenv("PATH", str(folder))
    return folder


def claude_release(bin_dir: Path, version: str = "2.1.200") -> None:
    """Claude Code on PATH, answering --version as the real one does."""
    path = bin_dir / "claude"
    path.write_text(f"#!/bin/sh\necho '{version} (Claude Code)'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def run_claude(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real Claude Code CLI in the test's HOME, offline."""
    done = subprocess.run([str(client("claude")), *args], env=client_env(home(tmp_path)),
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def install_with_claude(tmp_path: Path) -> None:
    run_claude(tmp_path, "plugin", "marketplace", "add", str(ROOT))
    run_claude(tmp_path, "plugin", "install", PLUGIN_ID)


def install_as_written(tmp_path: Path) -> None:
    """The records `claude plugin marketplace add ROOT` and `claude plugin install
    mem@memvault` (Claude Code 2.1.332) write: the marketplace and the enabled plugin in
    settings.json, the copy in plugins/cache and its record, the known marketplace."""
    claude = home(tmp_path) / ".claude"
    version = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())["version"]
    copy = claude / "plugins" / "cache" / "memvault" / "mem" / version
    shutil.copytree(PLUGIN, copy)
    source = {"source": "directory", "path": str(ROOT)}
    settings = claude / "settings.json"
    doc = json.loads(settings.read_text()) if settings.exists() else {}
    doc.update({"extraKnownMarketplaces": {"memvault": {"source": source}},
                "enabledPlugins": {PLUGIN_ID: True}})
    settings.write_text(json.dumps(doc, indent=2))
    when = "2026-01-01T00:00:00.000Z"
    (claude / "plugins" / "installed_plugins.json").write_text(json.dumps({
        "version": 2, "plugins": {PLUGIN_ID: [{
            "scope": "user", "installPath": str(copy), "version": version,
            "installedAt": when, "lastUpdated": when}]}}, indent=2))
    (claude / "plugins" / "known_marketplaces.json").write_text(json.dumps({
        "memvault": {"source": source, "installLocation": str(ROOT), "lastUpdated": when}},
        indent=2))


INSTALLERS = {"claude": install_with_claude, "written": install_as_written}


@pytest.fixture(params=sorted(INSTALLERS))
def plugin(request: pytest.FixtureRequest, tmp_path: Path, bin_dir: Path) -> Iterator[str]:
    """Claude Code 2.1.200 with mem's plugin installed and enabled for the user: how."""
    claude_release(bin_dir)
    INSTALLERS[request.param](tmp_path)
    yield request.param


def set_enabled(tmp_path: Path, how: str, on: bool) -> None:
    if how == "claude":
        run_claude(tmp_path, "plugin", "enable" if on else "disable", PLUGIN_ID)
        return
    settings = home(tmp_path) / ".claude" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["enabledPlugins"][PLUGIN_ID] = on  # as `claude plugin disable` writes it
    settings.write_text(json.dumps(doc, indent=2))


def doctor(script_runner: ScriptRunner, *args: str) -> dict[str, Any]:
    result = mem(script_runner, "doctor", "--json", *args)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def claude_finding(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["check"] == "agent:claude-code"]


def mcp_servers_of_mem(tmp_path: Path) -> list[str]:
    """The servers running mem that the real Claude Code would start: `claude mcp list`."""
    done = run_claude(tmp_path, "mcp", "list")
    return sorted(line.split(": ")[0] for line in done.stdout.splitlines()
                  if ": mem mcp" in line or " mcp --vault=" in line)


def own_entries(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """What setup itself writes for Claude Code: hooks in settings.json, the server in
    ~/.claude.json."""
    settings = home(tmp_path) / ".claude" / "settings.json"
    servers = home(tmp_path) / ".claude.json"
    hooks = json.loads(settings.read_text()).get("hooks", {}) if settings.exists() else {}
    mcp = json.loads(servers.read_text()).get("mcpServers", {}) if servers.exists() else {}
    return hooks, mcp


def test_the_written_records_are_those_claude_code_writes(tmp_path: Path) -> None:
    install_with_claude(tmp_path)
    claude = home(tmp_path) / ".claude"
    real = {name: json.loads((claude / name).read_text()) for name in (
        "settings.json", "plugins/installed_plugins.json", "plugins/known_marketplaces.json")}
    shutil.rmtree(claude)
    install_as_written(tmp_path)
    written = {name: json.loads((claude / name).read_text()) for name in real}
    assert written["settings.json"] == real["settings.json"]
    (record,) = real["plugins/installed_plugins.json"]["plugins"][PLUGIN_ID]
    (mine,) = written["plugins/installed_plugins.json"]["plugins"][PLUGIN_ID]
    assert {k: record[k] for k in ("scope", "installPath", "version")} == \
        {k: mine[k] for k in ("scope", "installPath", "version")}
    market, = real["plugins/known_marketplaces.json"].values()
    assert {k: market[k] for k in ("source", "installLocation")} == \
        {k: v for k, v in written["plugins/known_marketplaces.json"]["memvault"].items()
         if k in ("source", "installLocation")}


def test_doctor_says_the_plugin_sets_mem_up_and_sends_no_one_to_setup(
        script_runner: ScriptRunner, plugin: str) -> None:
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "ok", found
    assert "set up by the mem plugin" in found["what"] and PLUGIN_ID in found["what"]
    assert "SessionStart, SessionEnd, PreCompact" in found["what"]
    assert found["fix"] is None
    text = mem(script_runner, "doctor").stdout
    assert "mem setup" not in text


def test_setup_adds_nothing_beside_the_plugin_and_says_so(
        script_runner: ScriptRunner, tmp_path: Path, plugin: str) -> None:
    (home(tmp_path) / ".gemini").mkdir()  # another agent here: still set up
    result = mem(script_runner, "setup", "-y", "--json")
    assert result.returncode == 0, result.stderr
    agents = {a["name"]: a for a in json.loads(result.stdout)["agents"]}
    claude = agents["claude-code"]
    assert claude["changes"] == [] and claude["error"] is None
    assert any("set up by the mem plugin" in n and PLUGIN_ID in n for n in claude["notes"])
    assert agents["gemini"]["changes"]
    assert own_entries(tmp_path) == ({}, {})
    human = mem(script_runner, "setup", "-y")
    assert human.returncode == 0 and "set up by the mem plugin" in human.stderr
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "ok" and "set up by the mem plugin" in found["what"]
    if plugin == "claude":  # one server of mem's, the plugin's, as Claude Code sees it
        assert mcp_servers_of_mem(tmp_path) == ["plugin:mem:mem"]


def test_mem_set_up_twice_is_a_warning_whose_fixes_each_leave_one(
        script_runner: ScriptRunner, tmp_path: Path, plugin: str) -> None:
    # The old advice followed: setup's own hooks and server beside the plugin's.
    assert mem(script_runner, "hooks", "install", "claude-code", "--mcp").returncode == 0
    if plugin == "claude":
        assert mcp_servers_of_mem(tmp_path) == ["mem", "plugin:mem:mem"]
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "warning" and "set up twice" in found["what"]
    assert f"claude plugin disable {PLUGIN_ID}" in found["what"]
    assert found["fix"] == "mem setup --undo --agent claude-code"
    # setup leaves both as they are, and says so.
    before = own_entries(tmp_path)
    result = mem(script_runner, "setup", "-y", "--json")
    (claude,) = [a for a in json.loads(result.stdout)["agents"] if a["name"] == "claude-code"]
    assert claude["changes"] == [] and "set up twice" in " ".join(claude["notes"])
    assert own_entries(tmp_path) == before

    # One fix: setup's entries out, for Claude Code only; the plugin stays.
    (tmp_path / "home" / ".gemini").mkdir()
    assert mem(script_runner, "hooks", "install", "gemini").returncode == 0
    gemini = (home(tmp_path) / ".gemini" / "settings.json").read_bytes()
    result = mem(script_runner, *found["fix"].split()[1:], "-y")
    assert result.returncode == 0, result.stderr
    assert own_entries(tmp_path) == ({}, {})
    assert (home(tmp_path) / ".gemini" / "settings.json").read_bytes() == gemini
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "ok" and "set up by the mem plugin" in found["what"]
    if plugin == "claude":
        assert mcp_servers_of_mem(tmp_path) == ["plugin:mem:mem"]

    # The other: the plugin disabled, setup's entries kept.
    assert mem(script_runner, "hooks", "install", "claude-code", "--mcp").returncode == 0
    set_enabled(tmp_path, plugin, False)
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "ok" and "plugin" not in found["what"]
    if plugin == "claude":
        assert mcp_servers_of_mem(tmp_path) == ["mem"]


def test_a_disabled_plugin_is_not_mem_set_up(
        script_runner: ScriptRunner, tmp_path: Path, plugin: str) -> None:
    set_enabled(tmp_path, plugin, False)
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "warning" and found["fix"] == "mem setup"
    assert mem(script_runner, "setup", "-y").returncode == 0
    hooks, servers = own_entries(tmp_path)
    assert set(hooks) == {"SessionStart", "SessionEnd", "PreCompact"} and "mem" in servers
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "ok"
    if plugin == "claude":
        assert mcp_servers_of_mem(tmp_path) == ["mem"]


def test_a_release_too_old_for_the_plugins_hooks_is_sent_to_claude_update(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    claude_release(bin_dir, "2.1.100")
    install_as_written(tmp_path)
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "warning" and "exec form" in found["what"]
    assert found["fix"] == "claude update"
    result = mem(script_runner, "setup", "-y", "--json")
    (claude,) = [a for a in json.loads(result.stdout)["agents"] if a["name"] == "claude-code"]
    assert claude["changes"] == [] and "claude update" in " ".join(claude["notes"])


def test_the_plugin_without_mem_on_path_is_said(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    (bin_dir / "mem").unlink()  # mem run by its path here: Claude Code finds no `mem`
    claude_release(bin_dir)
    install_as_written(tmp_path)
    (found,) = claude_finding(doctor(script_runner))
    assert found["severity"] == "warning" and "no `mem` on this PATH" in found["what"]


def test_another_plugin_is_not_taken_for_mem(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    claude_release(bin_dir)
    install_as_written(tmp_path)
    # A plugin named mem that runs something else: not mem's.
    copy = Path(json.loads((home(tmp_path) / ".claude" / "plugins" /
                            "installed_plugins.json").read_text())
                ["plugins"][PLUGIN_ID][0]["installPath"])
    (copy / "hooks" / "hooks.json").write_text(json.dumps({"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": "notes", "args": ["hook", "claude-code"]}]}]}}))
    (copy / ".mcp.json").write_text(json.dumps({"mcpServers": {"mem": {"command": "notes-mcp"}}}))
    (home(tmp_path) / ".claude" / "plugins" / "known_marketplaces.json").unlink()
    (found,) = claude_finding(doctor(script_runner))
    assert found["fix"] == "mem setup"


def test_setup_takes_only_the_agents_named(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    claude_release(bin_dir)
    (home(tmp_path) / ".gemini").mkdir()
    result = mem(script_runner, "setup", "-y", "--json", "--agent", "gemini")
    assert result.returncode == 0, result.stderr
    assert [a["name"] for a in json.loads(result.stdout)["agents"]] == ["gemini"]
    assert own_entries(tmp_path) == ({}, {})
    assert (home(tmp_path) / ".gemini" / "settings.json").exists()
    wrong = mem(script_runner, "setup", "-y", "--agent", "vim")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    line, = wrong.stderr.strip().splitlines()
    assert line.startswith("mem: error: unknown agent 'vim' (--agent): use claude-code, "
                           "codex, gemini, ")

