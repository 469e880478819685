"""Hooks for Codex CLI and Gemini CLI, and every agent's installer: the handlers fed the
payload shapes of each agent's documentation (Codex's hook schemas, Gemini CLI's hooks
reference), the brief clamped and framed, the installers' output checked against the
documented settings formats, and the Claude Code plugin in the repository."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner
from typer.main import get_command

from memvault.cli import app
from memvault.config import resolve
from memvault.integrations import claude_code, codex, gemini, hookbase
from memvault.integrations.launch import MEM_VARIABLES, Launch
from memvault.ops import projects, remember
from memvault.vault.vault import Vault
from tests.conftest import mem

ROOT = Path(__file__).resolve().parent.parent
MEM = Path(sys.executable).parent / "mem"
SID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
CANARY = "canaryquokka"


def codex_payload(event: str, transcript: str | None, **extra: Any) -> dict[str, Any]:
    """The common input of Codex's hook schemas (session-start, stop, ...)."""
    return {"session_id": SID, "transcript_path": transcript, "cwd": "/home/alice/proj",
            "hook_event_name": event, "model": "gpt-5-codex", "permission_mode": "default",
            **extra}


def gemini_payload(event: str, transcript: str, **extra: Any) -> dict[str, Any]:
    """Gemini CLI's base input schema (hooks reference)."""
    return {"session_id": SID, "transcript_path": transcript, "cwd": "/home/alice/proj",
            "hook_event_name": event, "timestamp": "2026-11-22T10:00:00Z", **extra}


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """The background ingests a hook would start (argv), not started."""
    monkeypatch.setenv("MEM_LOG_DIR", str(tmp_path / "logs"))
    started: list[list[str]] = []
    monkeypatch.setattr(hookbase.subprocess, "Popen", lambda argv, **_: started.append(argv))
    return started


def log_text(tmp_path: Path) -> str:
    path = tmp_path / "logs" / hookbase.LOG_FILE
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize(("module", "payload", "source"), [
    (codex, codex_payload, {"source": "startup"}),
    (gemini, gemini_payload, {"source": "startup"}),
])
def test_session_start_answers_with_the_framed_brief(
        vault: Vault, spawned: list[list[str]], tmp_path: Path, module: Any, payload: Any,
        source: dict[str, str]) -> None:
    remember.add(vault, f"Prefers {CANARY} examples", "preference")
    out = module.handle(resolve, json.dumps(payload("SessionStart", "/nowhere", **source)))
    doc = json.loads(out)
    context = doc["hookSpecificOutput"]["additionalContext"]
    assert doc["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    nonce = re.match(r'<mem-memory id="([0-9a-f]{32})">\nReference data from mem', context)
    assert nonce and context.endswith(f'</mem-memory id="{nonce.group(1)}">\n')
    assert CANARY in context
    assert spawned == []
    log = log_text(tmp_path)
    assert f"{module.NAME} SessionStart [{SID}]: brief with 1 entries" in log
    assert CANARY not in log


@pytest.mark.parametrize(("module", "payload", "event", "extra"), [
    (codex, codex_payload, "SessionEnd", {"reason": "exit"}),
    (codex, codex_payload, "PreCompact", {"trigger": "auto"}),
    (codex, codex_payload, "Stop", {"turn_id": "t1", "stop_hook_active": False,
                                    "last_assistant_message": CANARY}),
    (gemini, gemini_payload, "SessionEnd", {"reason": "exit"}),
    (gemini, gemini_payload, "PreCompress", {"trigger": "auto"}),
])
def test_session_end_events_hand_the_transcript_to_a_background_ingest(
        vault: Vault, spawned: list[list[str]], tmp_path: Path, module: Any, payload: Any,
        event: str, extra: dict[str, Any]) -> None:
    transcript = tmp_path / "rollout.jsonl"
    transcript.write_text("{}\n")
    assert module.handle(resolve, json.dumps(payload(event, str(transcript), **extra))) \
        is None  # nothing on stdout
    (argv,) = spawned
    assert f"--format={module.AGENT.ingest_format}" in argv and f"--session={SID}" in argv
    assert argv[-2:] == ["--", str(transcript)]
    assert CANARY not in log_text(tmp_path)


def test_what_a_hook_cannot_use_is_logged_and_ignored(
        vault: Vault, spawned: list[list[str]], tmp_path: Path) -> None:
    # Codex's transcript_path may be null.
    assert codex.handle(resolve, json.dumps(codex_payload("SessionEnd", None))) is None
    assert gemini.handle(resolve, json.dumps(gemini_payload("BeforeTool", "/x"))) is None
    assert codex.handle(resolve, b"\xff\xfe") is None
    assert spawned == []
    log = log_text(tmp_path)
    assert f"codex SessionEnd [{SID}]: ignored: no transcript_path" in log
    assert "gemini BeforeTool" in log and "not an event mem handles" in log
    assert "codex unknown: ignored: stdin is not UTF-8 text" in log


def test_a_long_brief_is_clamped_at_a_line_under_the_hook_limit(
        vault: Vault, spawned: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    assert hookbase.MAX_CONTEXT_CHARS < 10_000  # Claude Code files away 10,000 and more
    limit = 2000  # the same cut, on a smaller brief: fewer writes to make one
    monkeypatch.setattr(hookbase, "MAX_CONTEXT_CHARS", limit)
    for n in range(5):  # each a full brief line (600 characters)
        remember.add(vault, f"Fact {n}: " + "the harbour lighthouse keeper " * 25, "fact")
    monkeypatch.setenv("MEM_BRIEF_MAX_CHARS", "1000000")
    for module in (claude_code, codex, gemini):
        out = module.handle(resolve, json.dumps({"hook_event_name": "SessionStart"}))
        context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
        assert len(context) <= limit
        assert hookbase.CUT_NOTE.strip() in context
        assert re.search(r'\n</mem-memory id="\w+">\n\Z', context)
        body = context.split("\n\n", 1)[1]
        assert all(line.startswith(("#", "- [", ">", "[…", "</mem")) or not line
                   for line in body.splitlines())  # cut at a line, never mid-entry


@pytest.mark.script_launch_mode("subprocess")
@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_the_installed_hook_command_runs_through_a_shell(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, agent: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    result = mem(script_runner, "hooks", "install", agent, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(Path(json.loads(result.stdout)["settings"]).read_text())
    command = doc["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    remember.add(vault, "Answers in Portuguese", "instruction")
    # Both agents run the command line through a shell; mem need not be on PATH.
    ran = subprocess.run(["/bin/sh", "-c", command], env={**os.environ, "PATH": "/usr/bin:/bin"},
                         input=json.dumps({"hook_event_name": "SessionStart"}).encode(),
                         capture_output=True, timeout=30, check=False)
    assert (ran.returncode, ran.stderr) == (0, b"")
    assert "Answers in Portuguese" in \
        json.loads(ran.stdout)["hookSpecificOutput"]["additionalContext"]


# --- installers, against each agent's documented format -------------------------------------


def check_hooks_file(doc: dict[str, Any], events: tuple[str, ...], root_keys: set[str] | None,
                     timeout_unit: float) -> list[dict[str, Any]]:
    """event -> [{matcher?, hooks: [{type: "command", command: str, timeout}]}], as
    Claude Code, Codex and Gemini CLI document it; returns mem's handlers."""
    if root_keys is not None:
        assert set(doc) <= root_keys  # Codex refuses a hooks.json with other root keys
    found = []
    for event in events:
        groups = doc["hooks"][event]
        assert isinstance(groups, list)
        for group in groups:
            assert isinstance(group["hooks"], list)
            for handler in group["hooks"]:
                assert handler["type"] == "command" and isinstance(handler["command"], str)
        (ours,) = [h for g in groups for h in g["hooks"] if "hook " in json.dumps(h)
                   or h.get("args", [])[-2:-1] == ["hook"]]
        assert 0 < ours["timeout"] <= 60 * timeout_unit
        found.append(ours)
    return found


def test_codex_install_user_scope_with_mcp_is_idempotent_and_reversible(
        script_runner: ScriptRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "codex"
    home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(home))
    hooks_json = {"description": "team hooks", "hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "notify-send done"}]}]}}
    (home / "hooks.json").write_text(json.dumps(hooks_json))
    config = 'model = "gpt-5-codex"\n\n[mcp_servers.other]\ncommand = "other"\n'
    (home / "config.toml").write_text(config)

    first = json.loads(mem(script_runner, "hooks", "install", "codex", "--mcp",
                           "--json").stdout)
    assert first["changed"] and sorted(first["events"]) == ["PreCompact", "SessionEnd",
                                                            "SessionStart"]
    assert first["mcp"]["changed"] and first["mcp"]["backup"]
    doc = json.loads((home / "hooks.json").read_text())
    handlers = check_hooks_file(doc, codex.EVENTS, {"description", "hooks"}, 1)
    for event, handler in zip(codex.EVENTS, handlers, strict=True):
        argv = [a for a in shlex.split(handler["command"]) if not a.startswith("MEM_")]
        assert Path(argv[0]).is_absolute() and " hook codex --" in shlex.join(argv)
        assert "--user=alice" in argv  # who the hooks run as, written down
        assert handler["timeout"] == (3 if event == "SessionEnd" else 10)  # Codex's cap
    assert doc["hooks"]["Stop"] == hooks_json["hooks"]["Stop"]
    toml = tomllib.loads((home / "config.toml").read_text())
    assert toml["model"] == "gpt-5-codex" and toml["mcp_servers"]["other"] == {
        "command": "other"}
    server = toml["mcp_servers"]["mem"]
    assert Path(server["command"]).is_absolute() and "mcp" in server["args"]
    assert "--user=alice" in server["args"]

    installed = ((home / "hooks.json").read_bytes(), (home / "config.toml").read_bytes())
    again = json.loads(mem(script_runner, "hooks", "install", "codex", "--mcp",
                           "--json").stdout)
    assert not again["changed"] and not again["mcp"]["changed"]
    assert ((home / "hooks.json").read_bytes(), (home / "config.toml").read_bytes()) == \
        installed

    removed = json.loads(mem(script_runner, "hooks", "uninstall", "codex", "--mcp",
                             "--json").stdout)
    assert removed["changed"] and removed["mcp"]["changed"]
    assert json.loads((home / "hooks.json").read_text()) == hooks_json
    assert tomllib.loads((home / "config.toml").read_text()) == tomllib.loads(config)


def test_codex_moved_install_replaces_its_server_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    codex.install_server(path, Launch(("/old/bin/mem",)))
    path.write_text(path.read_text() + '\n[profiles.fast]\nmodel = "o4-mini"\n')
    assert codex.install_server(path, Launch(("/new/bin/mem",))).changed
    doc = tomllib.loads(path.read_text())
    assert doc["mcp_servers"]["mem"]["command"] == "/new/bin/mem"
    assert doc["profiles"]["fast"] == {"model": "o4-mini"}
    path.write_text("[mcp_servers.mem\n")
    with pytest.raises(Exception, match="not valid TOML"):
        codex.install_server(path, Launch(("/x/mem",)))
    assert path.read_text() == "[mcp_servers.mem\n"


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini"])
def test_project_scope_writes_no_machine_path_into_committed_files(
        script_runner: ScriptRunner, tmp_path: Path, agent: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    result = mem(script_runner, "hooks", "install", agent, "--scope", "project", "--mcp",
                 "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    committed = {"claude-code": [".mcp.json"],
                 "codex": [".codex/hooks.json", ".codex/config.toml"],
                 "gemini": [".gemini/settings.json"]}[agent]
    for name in committed:
        text = (project / name).read_text()
        assert str(tmp_path) not in text and sys.executable not in text, name
    if agent == "claude-code":  # the hooks go to the local file, with this machine's path
        local = json.loads((project / ".claude" / "settings.local.json").read_text())
        (handler,) = check_hooks_file(local, ("SessionStart",), None, 1)
        assert Path(handler["command"]).is_absolute()
        server = json.loads((project / ".mcp.json").read_text())["mcpServers"]["mem"]
        assert server == {"type": "stdio", "command": "mem", "args": ["mcp"], "env": {}}
    elif agent == "codex":
        doc = json.loads((project / ".codex" / "hooks.json").read_text())
        for handler in check_hooks_file(doc, codex.EVENTS, {"hooks"}, 1):
            assert handler["command"] == "mem hook codex"
        server = tomllib.loads((project / ".codex" / "config.toml").read_text())
        # mem's variables by name (Codex passes a server a short allow-list otherwise).
        assert server["mcp_servers"]["mem"] == {
            "command": "mem", "args": ["mcp"], "startup_timeout_sec": 60,
            "env_vars": list(MEM_VARIABLES)}
    else:
        doc = json.loads((project / ".gemini" / "settings.json").read_text())
        for handler in check_hooks_file(doc, gemini.EVENTS, None, 1000):  # milliseconds
            assert handler["command"] == "mem hook gemini" and handler["timeout"] == 10_000
        assert doc["mcpServers"]["mem"] == {"command": "mem", "args": ["mcp"],
                                            "timeout": gemini.SERVER_TIMEOUT_MS}


def test_gemini_and_claude_user_scope_keep_other_settings(
        script_runner: ScriptRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    settings = {"theme": "GitHub", "mcpServers": {"other": {"command": "x"}},
                "hooks": {"BeforeTool": [{"matcher": "run_shell_command",
                                          "hooks": [{"type": "command",
                                                     "command": "audit.sh"}]}]}}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    assert mem(script_runner, "hooks", "install", "gemini", "--mcp").returncode == 0
    doc = json.loads((home / ".gemini" / "settings.json").read_text())
    assert doc["theme"] == "GitHub" and doc["hooks"]["BeforeTool"] == \
        settings["hooks"]["BeforeTool"]
    assert set(doc["mcpServers"]) == {"other", "mem"}
    assert mem(script_runner, "hooks", "uninstall", "gemini", "--mcp").returncode == 0
    assert json.loads((home / ".gemini" / "settings.json").read_text()) == settings

    (home / ".claude.json").write_text('{"numStartups": 3}')
    result = mem(script_runner, "hooks", "install", "claude-code", "--mcp", "--json")
    assert result.returncode == 0, result.stderr
    state = json.loads((home / ".claude.json").read_text())
    assert state["numStartups"] == 3 and "mcp" in state["mcpServers"]["mem"]["args"]
    assert Path(state["mcpServers"]["mem"]["command"]).is_absolute()
    # An agent mem gives a server only (no hooks to install) is refused as a usage error.
    assert mem(script_runner, "hooks", "install", "copilot").returncode == 2


# --- the Claude Code plugin in the repository ------------------------------------------------


def test_the_plugin_directory_is_valid() -> None:
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["name"] and market["owner"]["name"]
    (entry,) = market["plugins"]
    plugin_dir = (ROOT / ".claude-plugin" / entry["source"]).resolve() \
        if not entry["source"].startswith("./") else (ROOT / entry["source"]).resolve()
    manifest = json.loads((plugin_dir / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == entry["name"] and manifest["version"]
    hooks = json.loads((plugin_dir / "hooks" / "hooks.json").read_text())
    for handler in check_hooks_file(hooks, claude_code.EVENTS, {"description", "hooks"}, 1):
        assert handler["command"] == "mem" and handler["args"] == ["hook", "claude-code"]
    servers = json.loads((plugin_dir / ".mcp.json").read_text())["mcpServers"]
    assert servers["mem"]["command"] == "mem" and servers["mem"]["args"] == ["mcp"]
    skill = (plugin_dir / "skills" / "memory" / "SKILL.md").read_text()
    front, body = skill.split("---\n", 2)[1:]
    meta = dict(line.split(": ", 1) for line in front.strip().splitlines())
    assert meta["name"] == "memory" and len(meta["description"]) <= 1024
    for words in ("memory_store", "preference", "correction", "not", "suggestion"):
        assert words in body


def test_every_path_and_command_the_plugin_names_exists() -> None:
    """The plugin's files and its instructions name only what a checkout has and what
    `pip install` puts on PATH: its files, the commands it runs (a console script of the
    distribution, then a real `mem` command), the tools its skill calls, the extras and
    the plugin name they install."""
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    (entry,) = market["plugins"]
    plugin_dir = ROOT / entry["source"]
    for rel in (".claude-plugin/plugin.json", "hooks/hooks.json", ".mcp.json",
                "skills/memory/SKILL.md"):  # what Claude Code loads from a plugin
        assert (plugin_dir / rel).is_file(), rel

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    hooks = json.loads((plugin_dir / "hooks" / "hooks.json").read_text())["hooks"]
    servers = json.loads((plugin_dir / ".mcp.json").read_text())["mcpServers"]
    runs = [[h["command"], *h["args"]] for groups in hooks.values() for group in groups
            for h in group["hooks"]] + [[s["command"], *s["args"]] for s in servers.values()]
    for program, *words in runs:
        assert program in project["scripts"], program
        assert (Path(sys.executable).parent / program).is_file(), program
        command: Any = get_command(app)
        for word in words:
            assert word in getattr(command, "commands", {}), (program, *words)
            command = command.commands[word]

    skill = (plugin_dir / "skills" / "memory" / "SKILL.md").read_text()
    server = (ROOT / "src" / "memvault" / "integrations" / "mcp_server.py").read_text()
    tools = set(re.findall(r"^    def (memory_\w+)\(", server, re.MULTILINE))
    assert set(re.findall(r"\bmemory_\w+", skill)) <= tools and tools

    doc = (ROOT / "docs" / "agents.md").read_text()
    plugin_part = doc.split("### As a plugin", 1)[1].split("\n### ", 1)[0]
    for rel in re.findall(r"`((?:plugins|\.claude-plugin)/[^`\s]+)`", doc):
        assert (ROOT / rel).exists(), rel
    for rel in re.findall(r"`((?:hooks|skills)/[^`\s]+|\.mcp\.json)`", plugin_part):
        assert (plugin_dir / rel).exists(), rel
    assert f"/plugin install {entry['name']}@{market['name']}" in plugin_part
    for extra in re.findall(r"(?:memvault|checkout)\[(\w+)\]", doc + skill):
        assert extra in project["optional-dependencies"], extra
    # A placeholder is no path that works, and mem is installed from a checkout: no index
    # serves the distribution under its name.
    assert "<owner>" not in doc and not re.search(r"pipx install '?memvault", doc)


# --- the project a session works in ---------------------------------------------------------


def test_project_ids_are_keyed_and_follow_the_git_work_tree(vault: Vault, tmp_path: Path
                                                            ) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "a" / "b").mkdir(parents=True)
    tag = projects.project_tag(vault, repo / "a" / "b")
    assert tag == projects.project_tag(vault, repo) and tag.startswith("project:")
    assert "repo" not in tag and len(tag) == len("project:") + 16
    assert tag != projects.project_tag(vault, tmp_path)
    other = Vault(resolve(user="bob"))  # another user: another id for the same folder
    assert projects.project_tag(other, repo) != tag


def test_hooks_tag_the_session_and_brief_its_project_first(
        vault: Vault, spawned: list[list[str]], tmp_path: Path) -> None:
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    alpha.mkdir()
    beta.mkdir()
    remember.add(vault, "Alpha uses tabs", "preference",
                 tags=[projects.project_tag(vault, alpha)])
    remember.add(vault, "Beta uses spaces", "preference",
                 tags=[projects.project_tag(vault, beta)])
    for where, first, other in ((alpha, "tabs", "spaces"), (beta, "spaces", "tabs")):
        out = codex.handle(resolve, json.dumps(codex_payload(
            "SessionStart", None, cwd=str(where), source="startup")))
        context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
        assert context.index(first) < context.index(other)
    transcript = tmp_path / "t.json"
    transcript.write_text("{}")
    gemini.handle(resolve, json.dumps(gemini_payload("SessionEnd", str(transcript),
                                                     cwd=str(alpha))))
    (argv,) = spawned
    assert f"--project={alpha}" in argv and argv[-2:] == ["--", str(transcript)]


def test_ingest_project_tags_messages_and_search_prefers_them(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    alpha.mkdir()
    beta.mkdir()
    for where, sid, word in ((alpha, "s-alpha", "harbour"), (beta, "s-beta", "lighthouse")):
        lines = [json.dumps({"role": "user", "content": f"the release train leaves the {word}"
                             f" {n}"}) for n in range(3)]
        result = mem(script_runner, "ingest", "-", "--format", "jsonl", "--session", sid,
                     "--project", str(where), stdin="\n".join(lines) + "\n")
        assert result.returncode == 0, result.stderr
    listed = json.loads(mem(script_runner, "list", "--session", "s-alpha", "--json").stdout)
    assert all(projects.project_tag(vault, alpha) in r["tags"] for r in listed["records"])
    for where, word in ((alpha, "harbour"), (beta, "lighthouse")):
        doc = json.loads(mem(script_runner, "search", "release train", "--project", "auto",
                             "-n", "3", "--json", cwd=where).stdout)
        assert [word in r["content"] for r in doc["results"]] == [True, True, True]
    remember.add(vault, "Beta ships on Fridays", "fact",
                 tags=[projects.project_tag(vault, beta)])
    remember.add(vault, "Alpha ships on Mondays", "fact",
                 tags=[projects.project_tag(vault, alpha)])
    for where, first in ((alpha, "Alpha"), (beta, "Beta")):
        doc = json.loads(mem(script_runner, "brief", "--project", "auto", "--json",
                             cwd=where).stdout)
        assert doc["entries"][0]["content"].startswith(first)
