"""mem's OpenCode plugin, `mem hooks install` for every agent that runs hooks, and Goose and
Crush set up by `mem setup`, in a throwaway home (the real clients' own checks are in
tests/test_clients.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem
from tests.test_readers_agents import opencode_db


def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def plugin_file(tmp_path: Path) -> Path:
    return home(tmp_path) / ".config" / "opencode" / "plugins" / "mem.js"


@pytest.fixture
def vault_here(script_runner: ScriptRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(Path(os.sys.executable).parent))  # mem, no agent
    assert mem(script_runner, "init").returncode == 0


def setup(script_runner: ScriptRunner, *args: str) -> tuple[int, dict[str, Any], str]:
    result = mem(script_runner, "setup", "--json", *args)
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, doc, result.stderr


# --- OpenCode's plugin ----------------------------------------------------------------------


def test_a_plugin_its_user_changed_is_theirs_setup_and_undo_leave_it(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:
    config = home(tmp_path) / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    assert setup(script_runner, "-y", "--agent=opencode")[0] == 0
    plugin = plugin_file(tmp_path)
    edited = plugin.read_text().replace("TIMEOUT_MS = 10000", "TIMEOUT_MS = 20000")
    plugin.write_text(edited)
    # Setup refuses to write over it: one line, exit 2, the file as its user left it.
    code, doc, _ = setup(script_runner, "-y", "--agent=opencode")
    (agent,) = doc["agents"]
    assert code == 2 and "not the plugin mem writes" in agent["error"]
    assert "\n" not in agent["error"] and plugin.read_text() == edited
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    (finding,) = [f for f in checked if f["check"] == "agent:opencode"]
    assert finding["severity"] == "warning" and "not the plugin mem writes" in finding["what"]
    # The undo takes the server out and leaves the plugin.
    code, doc, _ = setup(script_runner, "--undo", "-y", "--agent=opencode")
    assert code == 0 and plugin.read_text() == edited
    assert "mem" not in json.loads(config.read_text()).get("mcp", {})


def test_another_tools_mem_js_is_never_taken(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:
    plugin = plugin_file(tmp_path)
    plugin.parent.mkdir(parents=True)
    plugin.write_bytes(b"export const Mine = async () => ({})\n")
    code, doc, _ = setup(script_runner, "-y", "--agent=opencode")
    assert code == 2 and plugin.read_bytes() == b"export const Mine = async () => ({})\n"
    assert not (plugin.parent.parent / "opencode.json").exists()  # nothing of the agent


def test_the_idle_hook_keeps_every_session_of_the_store_under_its_own_name(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:
    opencode_db(home(tmp_path) / ".local" / "share" / "opencode" / "opencode.db")
    (home(tmp_path) / ".config" / "opencode").mkdir(parents=True)
    assert setup(script_runner, "-y", "--agent=opencode")[0] == 0
    text = plugin_file(tmp_path).read_text()
    argv = json.loads(text.split("const MEM = ", 1)[1].split("\n", 1)[0])
    variables = json.loads(text.split("const ENV = ", 1)[1].split("\n", 1)[0])
    # As the plugin runs it: OpenCode's environment (none of mem's variables), the entry's.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEM_")}, **variables}
    done = subprocess.run(argv, input=json.dumps(
        {"hook_event_name": "session.idle", "session_id": "ses_later",
         "cwd": str(tmp_path)}).encode(), env=env, capture_output=True, timeout=60,
        check=False)
    assert done.returncode == 0 and done.stdout == b""
    for _ in range(300):  # the ingest runs detached
        found = mem(script_runner, "search", "lint step fails", "--json")
        if found.returncode == 0 and json.loads(found.stdout)["results"]:
            break
        time.sleep(0.1)
    # The event came from another session: the store's sessions keep their own names, none
    # is filed under the event's. The ingest found the key the hook was given (the
    # environment names none).
    hits = json.loads(found.stdout)["results"]
    assert hits and {h["session_id"] for h in hits} == {"ses_main"}, hits


# --- `mem hooks install` for every agent that runs hooks ------------------------------------


@pytest.mark.parametrize(("agent", "where"), [
    ("opencode", ".config/opencode/plugins/mem.js"),
    ("cursor", ".cursor/hooks.json"),
    ("qwen", ".qwen/settings.json")])
def test_hooks_install_knows_every_agent_that_runs_hooks(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path, agent: str,
        where: str) -> None:
    path = home(tmp_path) / where
    done = mem(script_runner, "hooks", "install", agent, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["settings"] == str(path) and path.exists()
    again = mem(script_runner, "hooks", "install", agent, "--json")
    assert json.loads(again.stdout)["changed"] is False
    done = mem(script_runner, "hooks", "uninstall", agent)
    assert done.returncode == 0 and "removed from" in done.stderr
    assert not path.exists() or " hook " not in path.read_text()
