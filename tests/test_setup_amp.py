"""Amp set up by `mem setup`: mem's MCP server in ~/.config/amp/settings.json under
"amp.mcpServers", in a throwaway home (Amp's own checks, `amp mcp list` and `amp mcp
doctor`, and the server as Amp starts it are in tests/test_clients.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem
from tests.test_setup_more_agents import home, setup, vault_here  # noqa: F401

# Amp's settings as its user keeps them: JSON with comments and trailing commas (Amp
# reads them so), a setting of its own, and a server of their own.
AMP_JSON = """\
{
  // mine
  "amp.updates.mode": "disabled",
  "amp.mcpServers": {
    "docs": {"command": "docs-mcp", "args": ["--port", "7"],},  // the docs
  },
}
"""
# What `amp mcp add NAME --env K=V -- COMMAND ARGS...` writes (Amp 0.0.1790142911, run
# offline): the fields of a local server and the type of each.
AMP_LOCAL = {"command": str, "args": list, "env": dict}


def settings(tmp_path: Path) -> Path:
    return home(tmp_path) / ".config" / "amp" / "settings.json"


def test_amp_is_set_up_and_undone_byte_for_byte(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:  # noqa: F811
    from memvault.integrations import jsonedit

    path = settings(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(AMP_JSON)
    code, plan, _ = setup(script_runner, "--dry-run", "--agent=amp")
    (agent,) = plan["agents"]
    assert code == 0 and agent["found"] and agent["error"] is None
    assert [c["file"] for c in agent["changes"]] == [str(path)]
    assert path.read_text() == AMP_JSON  # a dry run writes nothing

    code, done, _ = setup(script_runner, "-y", "--agent=amp")
    assert code == 0, done
    text = path.read_text()
    assert "// mine" in text and "// the docs" in text
    doc = jsonedit.loads(text)
    before = jsonedit.loads(AMP_JSON)
    assert doc["amp.updates.mode"] == "disabled"
    servers = doc["amp.mcpServers"]
    assert servers["docs"] == before["amp.mcpServers"]["docs"]
    entry = servers["mem"]
    assert set(entry) == set(AMP_LOCAL)  # as `amp mcp add` writes a local server
    for field, kind in AMP_LOCAL.items():
        assert isinstance(entry[field], kind), field
    assert "mcp" in entry["args"] and "--user=alice" in entry["args"]
    assert entry["env"]["MEM_CONFIG_DIR"] == str(tmp_path / "config")
    assert all(isinstance(v, str) for v in [*entry["args"], *entry["env"].values()])

    again = path.read_bytes()
    assert setup(script_runner, "-y", "--agent=amp")[0] == 0
    assert path.read_bytes() == again  # nothing to do
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    (finding,) = [f for f in checked if f["check"] == "agent:amp"]
    assert finding["severity"] == "ok" and str(path) in finding["what"], finding

    code, undone, _ = setup(script_runner, "--undo", "-y", "--agent=amp")
    assert code == 0 and path.read_text() == AMP_JSON
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    (finding,) = [f for f in checked if f["check"] == "agent:amp"]
    assert finding["severity"] == "warning" and finding["fix"] == "mem setup"


def test_amp_found_by_its_folder_gets_a_settings_file_of_mems(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path) -> None:  # noqa: F811
    path = settings(tmp_path)
    path.parent.mkdir(parents=True)  # Amp ran once: its folder, no settings yet
    assert setup(script_runner, "-y", "--agent=amp")[0] == 0
    assert "mem" in json.loads(path.read_text())["amp.mcpServers"]
    assert setup(script_runner, "--undo", "-y", "--agent=amp")[0] == 0
    assert not path.exists() or "mem" not in path.read_text()


@pytest.mark.parametrize("variable", ["${HOME}", "${MEM_USER}", "a${_X1}b"])
def test_a_launch_amp_would_read_as_its_variable_is_refused(
        script_runner: ScriptRunner, vault_here: None, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # Amp reads ${NAME} in a server's command, arguments and env as its variable NAME
    # (tried: there is no way to write it otherwise), so mem's log folder named so would
    # be another folder when Amp starts the server.
    path = settings(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(AMP_JSON)
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / f"logs{variable}"))
    code, doc, _ = setup(script_runner, "-y", "--agent=amp")
    (agent,) = doc["agents"]
    assert code == 2 and variable.strip("ab") in agent["error"], agent
    assert "\n" not in agent["error"] and path.read_text() == AMP_JSON
