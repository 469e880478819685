"""`mem setup` in a throwaway home: it finds the agents there (their command on PATH,
their settings folder), asks each its release, writes mem's hooks and MCP server in the
form that release runs, asks before it changes anything, and `--undo` takes out what it
added and nothing else.

The agents are small scripts on a PATH of their own that print a version the way each
agent prints it; their settings files have each agent's real layout (docs/agents.md).
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem

VERSION_LINES = {"claude": "{v} (Claude Code)", "codex": "codex-cli {v}", "gemini": "{v}"}


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH that holds only the agents a test puts there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


def agent(bin_dir: Path, command: str, version: str) -> Path:
    """A fake agent on PATH that prints its version as the real one does."""
    path = bin_dir / command
    line = VERSION_LINES[command].format(v=version)
    path.write_text(f"#!/bin/sh\necho '{line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def setup(script_runner: ScriptRunner, *args: str) -> tuple[int, dict[str, Any], str]:
    result = mem(script_runner, "setup", "--json", *args)
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, doc, result.stderr


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in doc["agents"]}


def hook_args(handler: dict[str, Any]) -> list[str]:
    """An exec-form handler's arguments from `hook` on (mem may be `python -m memvault`)."""
    args = handler["args"]
    return args[args.index("hook"):][:2]


def handlers(path: Path, event: str) -> list[dict[str, Any]]:
    return [h for g in json.loads(path.read_text())["hooks"].get(event, []) for h in g["hooks"]]


def test_setup_wires_the_agents_found_and_skips_the_one_that_is_not_here(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    agent(bin_dir, "claude", "2.1.200")
    (home(tmp_path) / ".gemini").mkdir()  # Gemini CLI installed off PATH: its folder only
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0
    agents = by_name(doc)
    assert {"claude-code", "codex", "gemini"} <= set(agents)  # and those not found here
    claude, codex, gemini = agents["claude-code"], agents["codex"], agents["gemini"]
    assert (claude["found"], claude["version"]) == (True, "2.1.200")
    assert (gemini["found"], gemini["version"]) == (True, None)
    assert (codex["found"], codex["changes"]) == (False, [])
    assert not (home(tmp_path) / ".codex").exists()  # nothing made for an absent agent

    settings = home(tmp_path) / ".claude" / "settings.json"
    assert {c["file"] for c in claude["changes"]} == {str(settings),
                                                      str(home(tmp_path) / ".claude.json")}
    (start,) = handlers(settings, "SessionStart")
    assert hook_args(start) == ["hook", "claude-code"]  # exec form: 2.1.139 and later
    assert "mem" in json.loads((home(tmp_path) / ".claude.json").read_text())["mcpServers"]
    gemini_settings = json.loads((home(tmp_path) / ".gemini" / "settings.json").read_text())
    assert set(gemini_settings["hooks"]) == {"SessionStart", "SessionEnd", "PreCompress"}
    assert "mem" in gemini_settings["mcpServers"]

    # Run again: nothing left to do, nothing written.
    before = settings.read_bytes()
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0 and not any(a["changes"] for a in doc["agents"])
    assert settings.read_bytes() == before


def test_setup_asks_first_and_without_a_terminal_refuses_unless_told_yes(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    agent(bin_dir, "codex", "0.169.0")
    hooks = home(tmp_path) / ".codex" / "hooks.json"
    result = mem(script_runner, "setup")  # stdin is a pipe: nobody to ask
    assert result.returncode == 2
    assert "-y" in result.stderr and "--dry-run" in result.stderr
    assert not hooks.exists()

    code, doc, _ = setup(script_runner, "--dry-run")
    assert code == 0 and doc["dry_run"] is True
    (change, server) = by_name(doc)["codex"]["changes"]
    assert change == {"file": str(hooks), "action": "add",
                      "entries": ["SessionStart", "SessionEnd", "PreCompact"], "backup": None}
    assert server["entries"] == ["mcp"] and server["file"].endswith("config.toml")
    assert not hooks.exists() and not (home(tmp_path) / ".codex" / "config.toml").exists()

    # On a terminal it shows the changes and asks once.
    declined = script_runner.run(["mem", "setup"], stdin=Terminal("n\n"))
    assert declined.returncode == 77 and not hooks.exists()
    assert str(hooks) in declined.stderr and "Make these changes?" in declined.stderr
    accepted = script_runner.run(["mem", "setup"], stdin=Terminal("y\n"))
    assert accepted.returncode == 0 and accepted.stderr.count("Make these changes?") == 1
    assert len(handlers(hooks, "SessionStart")) == 1


class Terminal(io.TextIOWrapper):
    """A stdin that says it is a terminal, with the user's answers in it."""

    def __init__(self, answers: str) -> None:
        super().__init__(io.BytesIO(answers.encode()), encoding="utf-8")

    def isatty(self) -> bool:
        return True


def test_an_older_claude_code_gets_hooks_its_shell_runs_and_exec_form_after_an_upgrade(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path, vault: Any) -> None:
    assert mem(script_runner, "pref", "set", "editor", "helix").returncode == 0
    agent(bin_dir, "claude", "2.1.100")
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0
    note = " ".join(by_name(doc)["claude-code"]["notes"])
    assert "2.1.139" in note and "claude update" in note
    settings = home(tmp_path) / ".claude" / "settings.json"
    (start,) = handlers(settings, "SessionStart")
    assert "args" not in start  # an older Claude Code runs `command` alone
    # The line as Claude Code runs it: through a shell, with the hook's JSON on stdin.
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])}
    done = subprocess.run(["/bin/sh", "-c", start["command"]], env=env, timeout=60,
                          input=b'{"hook_event_name": "SessionStart"}', capture_output=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "helix" in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]

    agent(bin_dir, "claude", "2.1.139")  # upgraded: the same hooks, now in exec form
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0
    for event in ("SessionStart", "SessionEnd", "PreCompact"):
        (handler,) = handlers(settings, event)  # replaced where it stood, not added
        assert hook_args(handler) == ["hook", "claude-code"]


USER_CONFIG = """\
# my Codex
model = "gpt-5-codex"

[mcp_servers.docs]
command = "docs-server"
"""


@pytest.mark.parametrize(("version", "flag"), [("0.120.0", True), ("0.124.0", False)])
def test_codex_gets_the_hooks_flag_only_from_the_release_that_needs_it(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path, version: str,
        flag: bool) -> None:
    agent(bin_dir, "codex", version)
    config = home(tmp_path) / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(USER_CONFIG)
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0
    parsed = tomllib.loads(config.read_text())
    assert parsed.get("features", {}).get("codex_hooks") is (True if flag else None)
    assert parsed["model"] == "gpt-5-codex" and "docs" in parsed["mcp_servers"]
    entries = [e for c in by_name(doc)["codex"]["changes"] for e in c["entries"]]
    assert ("features.codex_hooks" in entries) is flag

    # Upgraded past it: the flag mem added goes again (a newer Codex warns of it).
    agent(bin_dir, "codex", "0.169.0")
    assert setup(script_runner, "-y")[0] == 0
    assert "features" not in tomllib.loads(config.read_text())
    assert "# my Codex" in config.read_text()


def test_a_release_without_usable_hooks_is_told_what_to_upgrade(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    agent(bin_dir, "codex", "0.110.0")
    agent(bin_dir, "gemini", "0.25.0")
    code, doc, _ = setup(script_runner, "-y")
    assert code == 0
    agents = by_name(doc)
    assert "npm install -g @openai/codex@latest" in " ".join(agents["codex"]["notes"])
    assert "npm install -g @google/gemini-cli@latest" in " ".join(agents["gemini"]["notes"])
    result = mem(script_runner, "doctor", "--json")
    fixes = {f["check"]: f["fix"] for f in json.loads(result.stdout)["findings"]
             if f["severity"] == "warning"}
    assert fixes["agent:codex"] == "npm install -g @openai/codex@latest"
    assert fixes["agent:gemini"] == "npm install -g @google/gemini-cli@latest"


def write_json(path: Path, doc: dict[str, Any]) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path.read_bytes()


def test_undo_takes_out_what_setup_added_and_leaves_every_file_as_the_user_had_it(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    agent(bin_dir, "claude", "2.1.200")
    agent(bin_dir, "codex", "0.120.0")  # needs the flag: setup adds it, undo takes it out
    agent(bin_dir, "gemini", "0.61.0")
    h = home(tmp_path)
    mine = {"type": "command", "command": "notify-send 'session started'"}
    files = {
        h / ".claude" / "settings.json": write_json(h / ".claude" / "settings.json", {
            "model": "opus", "hooks": {"SessionStart": [{"matcher": "startup",
                                                         "hooks": [mine]}]}}),
        h / ".claude.json": write_json(h / ".claude.json", {
            "numStartups": 12, "mcpServers": {"docs": {"command": "docs-server"}}}),
        h / ".codex" / "hooks.json": write_json(h / ".codex" / "hooks.json", {
            "hooks": {"Stop": [{"hooks": [mine]}]}}),
        h / ".gemini" / "settings.json": write_json(h / ".gemini" / "settings.json", {
            "ui": {"theme": "GitHub"}, "hooks": {"SessionStart": [{"hooks": [mine]}]},
            "mcpServers": {"docs": {"command": "docs-server"}}}),
    }
    config = h / ".codex" / "config.toml"
    config.write_text(USER_CONFIG)
    files[config] = config.read_bytes()

    assert setup(script_runner, "-y")[0] == 0
    assert all(path.read_bytes() != data for path, data in files.items())  # each was changed
    code, doc, _ = setup(script_runner, "--undo", "-y")
    assert code == 0 and doc["undo"] is True
    for path, data in files.items():
        assert path.read_bytes() == data, path
    code, doc, _ = setup(script_runner, "--undo", "-y")  # nothing of mem's left
    assert code == 0 and not any(a["changes"] for a in doc["agents"])


def test_an_agent_whose_settings_cannot_be_edited_is_left_alone_and_the_others_set_up(
        script_runner: ScriptRunner, tmp_path: Path, bin_dir: Path) -> None:
    agent(bin_dir, "claude", "2.1.200")
    agent(bin_dir, "gemini", "0.61.0")
    broken = home(tmp_path) / ".claude.json"  # where the MCP server goes, half-written
    broken.write_text('{"numStartups": 3,')
    code, doc, _ = setup(script_runner, "-y")
    assert code == 2
    agents = by_name(doc)
    assert "not valid JSON" in agents["claude-code"]["error"]
    assert broken.read_text() == '{"numStartups": 3,'
    # Nothing of the agent's was written, not even the file that was fine (its hooks).
    assert not (home(tmp_path) / ".claude" / "settings.json").exists()
    assert agents["gemini"]["changes"] and agents["gemini"]["error"] is None
