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


# --- Goose and Crush --------------------------------------------------------------------------

GOOSE_YAML = """\
# Goose, by hand
GOOSE_PROVIDER: openai   # my provider
extensions:
  developer:
    bundled: true
    enabled: true
    name: developer
    timeout: 300
    type: builtin
  # the docs server
  docs:
    cmd: docs-mcp
    args: []
    enabled: true
    envs: {}
    name: docs
    type: stdio
GOOSE_MODEL: gpt-4o
"""
CRUSH_JSON = '{\n  // mine\n  "mcp": {"docs": {"type": "stdio", "command": "docs-mcp"},},\n}\n'
# Goose's ExtensionConfig::Stdio (crates/goose/src/agents/extension.rs) and the entry's
# `enabled` (ExtensionEntry): the fields it requires and the type each must have.
GOOSE_STDIO = {"type": str, "name": str, "cmd": str, "args": list, "enabled": bool}
GOOSE_OPTIONAL = {"description": str, "envs": dict, "env_keys": list, "timeout": int,
                  "bundled": (bool, type(None)), "available_tools": list}


def test_goose_and_crush_are_set_up_and_undone_byte_for_byte(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:
    import yaml

    from memvault.integrations import jsonedit

    goose = home(tmp_path) / ".config" / "goose" / "config.yaml"
    crush = home(tmp_path) / ".config" / "crush" / "crush.json"
    for path, text in ((goose, GOOSE_YAML), (crush, CRUSH_JSON)):
        path.parent.mkdir(parents=True)
        path.write_text(text)
    code, plan, _ = setup(script_runner, "--dry-run", "--agent=goose", "--agent=crush")
    assert code == 0 and {c["file"] for a in plan["agents"] for c in a["changes"]} == \
        {str(goose), str(crush)}
    assert goose.read_text() == GOOSE_YAML and crush.read_text() == CRUSH_JSON
    code, done, _ = setup(script_runner, "-y", "--agent=goose", "--agent=crush")
    assert code == 0, done

    text = goose.read_text()
    assert text.startswith(GOOSE_YAML.split("GOOSE_MODEL")[0])  # every line before, as is
    assert text.endswith("GOOSE_MODEL: gpt-4o\n") and "# the docs server" in text
    doc = yaml.safe_load(text)
    before = yaml.safe_load(GOOSE_YAML)
    assert {k: v for k, v in doc["extensions"].items() if k != "mem"} == before["extensions"]
    entry = doc["extensions"]["mem"]
    for field, kind in GOOSE_STDIO.items():  # held to Goose's own schema
        assert isinstance(entry[field], kind), field
    assert set(entry) <= set(GOOSE_STDIO) | set(GOOSE_OPTIONAL)
    for field, kind in GOOSE_OPTIONAL.items():
        assert field not in entry or isinstance(entry[field], kind), field
    assert entry["type"] == "stdio" and entry["enabled"] is True
    assert "mcp" in entry["args"] and "--user=alice" in entry["args"]
    assert entry["envs"]["MEM_CONFIG_DIR"] == str(tmp_path / "config")
    server = jsonedit.loads(crush.read_text())["mcp"]
    assert server["docs"] == {"type": "stdio", "command": "docs-mcp"}
    assert server["mem"]["type"] == "stdio" and "--user=alice" in server["mem"]["args"]
    assert "// mine" in crush.read_text()

    again = {p: p.read_bytes() for p in (goose, crush)}
    assert setup(script_runner, "-y", "--agent=goose", "--agent=crush")[0] == 0
    assert {p: p.read_bytes() for p in (goose, crush)} == again  # nothing to do
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    for name in ("goose", "crush"):
        (finding,) = [f for f in checked if f["check"] == f"agent:{name}"]
        assert finding["severity"] == "ok", finding

    code, undone, _ = setup(script_runner, "--undo", "-y", "--agent=goose", "--agent=crush")
    assert code == 0 and goose.read_text() == GOOSE_YAML and crush.read_text() == CRUSH_JSON


def test_a_goose_config_mem_cannot_edit_is_left_as_it_is(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:
    goose = home(tmp_path) / ".config" / "goose" / "config.yaml"
    goose.parent.mkdir(parents=True)
    for text in ("extensions: {developer: {enabled: true, type: builtin, name: d}}\n",
                 "extensions:\n  - not a mapping\n", "GOOSE_MODEL: [unclosed\n"):
        goose.write_text(text)
        code, doc, _ = setup(script_runner, "-y", "--agent=goose")
        (agent,) = doc["agents"]
        assert code == 2 and "\n" not in agent["error"] and goose.read_text() == text, agent
    # A config with no extensions yet gets them; the undo gives back the file.
    goose.write_text("GOOSE_MODEL: gpt-4o")  # no newline at its end
    assert setup(script_runner, "-y", "--agent=goose")[0] == 0
    server = subprocess.run([os.sys.executable, "-c", "import sys, yaml; print(yaml.safe_load("
                             "open(sys.argv[1]))['extensions']['mem']['cmd'])", str(goose)],
                            capture_output=True, text=True, check=True)
    assert server.stdout.strip()
    assert setup(script_runner, "--undo", "-y", "--agent=goose")[0] == 0
    assert goose.read_text() == "GOOSE_MODEL: gpt-4o\n"
