"""`mem setup` and `mem doctor` for OpenCode, Cursor, Copilot CLI, Qwen Code and Cline, in a
throwaway home: each agent found (its folder, or its command on PATH) gets mem's MCP
server, and the hooks where it runs them (Cursor, Qwen Code), in the file and the shape
that agent reads (docs/agents.md). Files the user wrote by hand, comments and trailing
commas included, keep every byte that is not mem's: an install then an undo gives them
back as they were. A file that is not valid is left untouched, with one line.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.integrations import jsonedit
from tests.conftest import mem

NEW = ("opencode", "cursor", "copilot", "qwen", "cline")


def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def files(tmp_path: Path) -> dict[str, Path]:
    """Where each agent keeps what mem writes (hooks first, then the server)."""
    h = home(tmp_path)
    return {"opencode": h / ".config" / "opencode" / "opencode.jsonc",
            "cursor-hooks": h / ".cursor" / "hooks.json",
            "cursor": h / ".cursor" / "mcp.json",
            "copilot": h / ".copilot" / "mcp-config.json",
            "qwen": h / ".qwen" / "settings.json",
            "cline": h / ".cline" / "data" / "settings" / "cline_mcp_settings.json"}


# Each as its user left it: comments, trailing commas, their own servers and hooks.
HAND_WRITTEN = {
    "opencode": '{\n  "$schema": "https://opencode.ai/config.json",\n  // my model\n'
                '  "model": "anthropic/claude-sonnet-4",\n  "mcp": {\n    "docs": {"type": '
                '"local", "command": ["docs-mcp"]},  // the docs server\n  },\n}\n',
    "cursor-hooks": '{\n  "version": 1,\n  "hooks": {\n    "stop": [{"command": "say done"}],'
                    '\n    "sessionStart": [\n      {"command": "echo hi"},\n    ],\n  },\n}\n',
    "cursor": '{\n\t"mcpServers": {\n\t\t"github": {"command": "gh-mcp"}\n\t}\n}\n',
    "copilot": '{"mcpServers": {"x": {"type": "local", "command": "x", "tools": ["*"]}}}',
    "qwen": '{\n  // Qwen Code, by hand\n  "model": {"name": "qwen3-coder-plus"},\n  "hooks": '
            '{"SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", '
            '"command": "mycheck"}]}]},\n}\n',
    "cline": '{\n  "mcpServers": {}\n}\n',
}


def setup(script_runner: ScriptRunner, *args: str) -> tuple[int, dict[str, Any], str]:
    result = mem(script_runner, "setup", "--json", *args)
    doc = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, doc, result.stderr


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in doc["agents"]}


@pytest.fixture
def agents_here(script_runner: ScriptRunner, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Every new agent's folder, its files as their user wrote them, none on PATH."""
    monkeypatch.setenv("PATH", str(Path(os.sys.executable).parent))  # mem, no agent
    assert mem(script_runner, "init").returncode == 0
    paths = files(tmp_path)
    for name, text in HAND_WRITTEN.items():
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        paths[name].write_text(text)
    return paths


def servers(path: Path, container: str) -> dict[str, Any]:
    return jsonedit.loads(path.read_text())[container]  # type: ignore[no-any-return]


def test_setup_finds_each_agent_by_its_folder_and_wires_it_where_it_reads(
        script_runner: ScriptRunner, agents_here: dict[str, Path], tmp_path: Path) -> None:
    before = {name: path.read_bytes() for name, path in agents_here.items()}
    code, plan, _ = setup(script_runner, "--dry-run", *(f"--agent={a}" for a in NEW))
    assert code == 0 and plan["dry_run"] is True
    agents = by_name(plan)
    assert set(agents) == set(NEW) and all(a["found"] for a in agents.values())
    planned = {c["file"] for a in agents.values() for c in a["changes"]}
    plugin = home(tmp_path) / ".config" / "opencode" / "plugins" / "mem.js"  # mem's own
    assert planned == {str(p) for p in agents_here.values()} | {str(plugin)}
    assert {n: p.read_bytes() for n, p in agents_here.items()} == before  # a dry run

    code, done, _ = setup(script_runner, "-y")
    assert code == 0, done
    # Each in its own shape, running this mem for alice with the vault and key it resolves.
    oc = servers(agents_here["opencode"], "mcp")
    assert oc["docs"] == {"type": "local", "command": ["docs-mcp"]}
    assert oc["mem"]["type"] == "local" and oc["mem"]["enabled"] is True
    command = oc["mem"]["command"]
    assert command[command.index("mcp") + 1] == f"--vault={tmp_path / 'vault'}"
    for name in ("cursor", "copilot", "qwen", "cline"):
        entry = servers(agents_here[name], "mcpServers")["mem"]
        assert "mcp" in entry["args"] and "--user=alice" in entry["args"], name
        assert entry["env"]["MEM_CONFIG_DIR"] == str(tmp_path / "config"), name
    assert servers(agents_here["copilot"], "mcpServers")["mem"]["tools"] == ["*"]
    cursor_hooks = jsonedit.loads(agents_here["cursor-hooks"].read_text())["hooks"]
    assert cursor_hooks["stop"] == [{"command": "say done"}]
    assert cursor_hooks["sessionStart"][0] == {"command": "echo hi"}
    for event in ("sessionStart", "sessionEnd", "preCompact"):
        assert " hook cursor " in cursor_hooks[event][-1]["command"]
    qwen = jsonedit.loads(agents_here["qwen"].read_text())
    assert qwen["hooks"]["SessionStart"][0]["hooks"] == [{"type": "command",
                                                          "command": "mycheck"}]
    assert set(qwen["hooks"]) == {"SessionStart", "SessionEnd", "PreCompact"}
    assert qwen["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] == 10  # seconds
    # The user's own text is still there, comments and all.
    assert "// my model" in agents_here["opencode"].read_text()
    assert "// the docs server" in agents_here["opencode"].read_text()
    assert "// Qwen Code, by hand" in agents_here["qwen"].read_text()

    # Run again: nothing to do, nothing written.
    after = {n: p.read_bytes() for n, p in agents_here.items()}
    code, again, _ = setup(script_runner, "-y")
    assert code == 0 and not any(a["changes"] for a in again["agents"])
    assert {n: p.read_bytes() for n, p in agents_here.items()} == after

    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    found = {f["check"]: f for f in checked if f["check"].startswith("agent:")}
    for name in NEW:
        assert found[f"agent:{name}"]["severity"] == "ok", found[f"agent:{name}"]

    # The undo takes out mem's entries only: every file is back byte for byte.
    code, undone, _ = setup(script_runner, "--undo", "-y")
    assert code == 0 and all(a["error"] is None for a in undone["agents"])
    assert {n: p.read_bytes() for n, p in agents_here.items()} == before
    assert not plugin.parent.exists()


def test_a_file_that_is_not_valid_is_left_untouched_and_the_others_are_set_up(
        script_runner: ScriptRunner, agents_here: dict[str, Path]) -> None:
    broken = b'{\n  "mcpServers": {"x": {"command": "x"}\n'  # cut short
    agents_here["copilot"].write_bytes(broken)
    code, doc, _ = setup(script_runner, "-y", "--agent=copilot", "--agent=cline")
    assert code == 2
    agents = by_name(doc)
    assert "mcp-config.json is not valid" in agents["copilot"]["error"]
    assert "line 3" in agents["copilot"]["error"] and "\n" not in agents["copilot"]["error"]
    assert agents_here["copilot"].read_bytes() == broken
    assert [p.name for p in agents_here["copilot"].parent.iterdir()] == ["mcp-config.json"]
    assert agents["cline"]["changes"] and agents["cline"]["error"] is None

    # The doctor says so, and does not send anyone to a setup that refuses.
    result = mem(script_runner, "doctor")
    (line,) = [x for x in result.stdout.splitlines() if "Copilot CLI" in x]
    assert line.startswith("warning") and "not valid" in line


def test_doctor_sends_an_agent_found_but_not_set_up_to_mem_setup(
        script_runner: ScriptRunner, agents_here: dict[str, Path]) -> None:
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    found = {f["check"]: f for f in checked if f["check"].startswith("agent:")}
    for name in NEW:
        assert found[f"agent:{name}"]["severity"] == "warning"
        assert found[f"agent:{name}"]["fix"] == "mem setup"
    assert setup(script_runner, "-y", "--agent=cursor")[0] == 0
    # mem's hooks, then gone: a setup that moved, or a mem that is no longer there.
    hooks = agents_here["cursor-hooks"]
    doc = jsonedit.loads(hooks.read_text())
    del doc["hooks"]["preCompact"]
    hooks.write_text(json.dumps(doc))
    checked = json.loads(mem(script_runner, "doctor", "--json").stdout)["findings"]
    (cursor,) = [f for f in checked if f["check"] == "agent:cursor"]
    assert "no hook of mem's for preCompact" in cursor["what"] and cursor["fix"] == "mem setup"


def test_the_key_only_in_mem_master_key_is_written_nowhere(
        script_runner: ScriptRunner, agents_here: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("MEM_MASTER_KEY", key)
    before = {n: p.read_bytes() for n, p in agents_here.items()}
    code, doc, _ = setup(script_runner, "-y")
    agents = by_name(doc)
    # OpenCode and Qwen Code pass their whole environment to the server; the others
    # could only be given the key by value, which no settings file may hold.
    assert code == 78
    for name, label in (("cursor", "Cursor"), ("copilot", "Copilot CLI"), ("cline", "Cline")):
        assert f"{label} never passes MEM_MASTER_KEY" in agents[name]["error"]
        assert agents_here[name].read_bytes() == before[name]
    assert agents_here["cursor-hooks"].read_bytes() == before["cursor-hooks"]
    for name in ("opencode", "qwen"):
        assert agents[name]["changes"] and agents[name]["error"] is None
    for path in agents_here.values():
        assert key not in path.read_text()


def hook_line(path: Path, event: str, grouped: bool) -> str:
    items = jsonedit.loads(path.read_text())["hooks"][event]
    return str(items[-1]["hooks"][0]["command"] if grouped else items[-1]["command"])


@pytest.mark.parametrize(("agent", "event", "answer"), [
    ("cursor", "sessionStart", lambda out: out["additional_context"]),
    ("qwen", "SessionStart", lambda out: out["hookSpecificOutput"]["additionalContext"])])
def test_the_session_start_hook_briefs_in_the_agents_own_answer(
        script_runner: ScriptRunner, agents_here: dict[str, Path], tmp_path: Path,
        agent: str, event: str, answer: Any) -> None:
    assert mem(script_runner, "add", "--type", "preference",
               "Prefers uv to pip").returncode == 0
    assert setup(script_runner, "-y", f"--agent={agent}")[0] == 0
    path = agents_here["cursor-hooks" if agent == "cursor" else "qwen"]
    # The agent runs the line through a shell, without mem's variables.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEM_")}
    done = subprocess.run(["/bin/sh", "-c", hook_line(path, event, agent == "qwen")],
                          input=json.dumps({"hook_event_name": event, "session_id": "s1",
                                            "cwd": str(tmp_path)}).encode(),
                          env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "Prefers uv to pip" in answer(json.loads(done.stdout))


def test_cursors_session_end_hook_keeps_the_agent_transcript(
        script_runner: ScriptRunner, agents_here: dict[str, Path], tmp_path: Path) -> None:
    assert setup(script_runner, "-y", "--agent=cursor")[0] == 0
    transcript = tmp_path / "c1.jsonl"
    transcript.write_text(
        json.dumps({"role": "user", "message": {"content": [
            {"type": "text", "text": "<user_query>\nWhich port does staging use?\n"
                                     "</user_query>"}]}}) + "\n" +
        json.dumps({"role": "assistant", "message": {"content": [
            {"type": "text", "text": "Staging listens on port 8443."}]}}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEM_")}
    done = subprocess.run(
        ["/bin/sh", "-c", hook_line(agents_here["cursor-hooks"], "sessionEnd", False)],
        input=json.dumps({"hook_event_name": "sessionEnd", "session_id": "c1",
                          "transcript_path": str(transcript)}).encode(),
        env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == b""
    import time

    for _ in range(300):  # the ingest runs detached
        found = mem(script_runner, "search", "staging port", "--json")
        if found.returncode == 0 and json.loads(found.stdout)["results"]:
            break
        time.sleep(0.1)
    texts = [r["content"] for r in json.loads(found.stdout)["results"]]
    assert any("8443" in t for t in texts), texts
