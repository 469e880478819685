"""Claude Code: the hook handler, the settings.json installer, and the MCP server entry.

The hook machinery (error boundary, log, brief, background ingest) is shared by every
agent: integrations/hookbase.py.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from memvault.errors import UsageError
from memvault.integrations import hookbase
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.model.results import HookInstallResult

NAME = "claude-code"
EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
HOOK_TIMEOUT_S = hookbase.HOOK_TIMEOUT_S
MARKER = "hook claude-code"  # how a hook of an earlier release (a shell string) is known
ARGS = ["hook", NAME]
AGENT = Agent(
    name=NAME, ingest_format="claude-code",
    brief_events=frozenset({"SessionStart"}),
    # PreCompact's stdout would be fed into the compaction prompt: it prints nothing.
    ingest_events=frozenset({"SessionEnd", "PreCompact"}),
    answer=hook_specific,
)


def run(settings_factory: Any, stdin: BinaryIO | None = None,
        stdout: TextIO | None = None) -> None:
    hookbase.run(AGENT, settings_factory, stdin, stdout)


def handle(settings_factory: Any, stdin: str | bytes) -> str | None:
    return hookbase.handle(AGENT, settings_factory, stdin)


# --- installing into Claude Code's settings -----------------------------------------------


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """Where the hooks go. The project scope writes the project's local settings file
    (settings.local.json, which Claude Code keeps out of git): the hook names this
    machine's mem by its absolute path."""
    if explicit is not None:
        return explicit
    if scope == "user":
        return _config_dir() / "settings.json"
    if scope == "project":
        return Path.cwd() / ".claude" / "settings.local.json"
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def mcp_path(scope: str) -> Path:
    """Where the MCP server goes: ~/.claude.json for the user (where `claude mcp add
    --scope user` keeps it), the project's .mcp.json (committed: `mem` from PATH)."""
    if scope == "user":
        base = os.environ.get("CLAUDE_CONFIG_DIR")
        return Path(base) / ".claude.json" if base else Path.home() / ".claude.json"
    return Path.cwd() / ".mcp.json"


def _config_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or str(Path.home() / ".claude"))


def ours(hook: Any) -> bool:
    if not isinstance(hook, dict):
        return False
    args = hook.get("args")
    return MARKER in str(hook.get("command", "")) or (
        isinstance(args, list) and args[-2:] == ARGS)


def hook_entry(command: list[str] | None = None) -> dict[str, Any]:
    """One handler in exec form (`command` and `args`, no shell): a path with spaces or
    quotes is never parsed by a shell."""
    program, *rest = command or hookbase.mem_command()
    return {"type": "command", "command": program, "args": [*rest, *ARGS],
            "timeout": HOOK_TIMEOUT_S}


def server_entry(command: list[str]) -> dict[str, Any]:
    program, *rest = command
    return {"type": "stdio", "command": program, "args": [*rest, "mcp"], "env": {}}


def install(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    """Merge mem's three hooks into the settings file; running it twice changes nothing."""
    entry = hook_entry()
    result = hookbase.install_json(path, "Claude Code", dict.fromkeys(EVENTS, entry), ours)
    if not mcp:
        return result
    command = hookbase.mem_command() if scope == "user" else hookbase.portable_command()
    server = hookbase.install_json(mcp_path(scope), "Claude Code", {}, ours,
                                   ("mcpServers", server_entry(command)))
    return replace(result, mcp=server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    result = hookbase.uninstall_json(path, "Claude Code", ours)
    if not mcp:
        return result
    server = hookbase.uninstall_json(mcp_path(scope), "Claude Code", ours, "mcpServers")
    return replace(result, mcp=server)
