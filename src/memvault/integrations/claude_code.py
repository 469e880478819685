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
from memvault.integrations.launch import Launch
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "claude-code"
EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
HOOK_TIMEOUT_S = hookbase.HOOK_TIMEOUT_S
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


ours = hookbase.hook_owner(NAME)


def hook_entry(launch: Launch | None = None) -> dict[str, Any]:
    """One handler in exec form (`command` and `args`, no shell): a path with spaces or
    quotes is never parsed by a shell."""
    program, *rest = (launch or Launch(tuple(hookbase.mem_command()))).argv(*ARGS)
    return {"type": "command", "command": program, "args": rest, "timeout": HOOK_TIMEOUT_S}


def shell_entry(launch: Launch) -> dict[str, Any]:
    """One handler as a shell line, each part quoted: for a Claude Code older than the
    exec form (agents_found.py), which runs `command` alone and ignores `args`."""
    return {"type": "command", "command": launch.shell_line(*ARGS), "timeout": HOOK_TIMEOUT_S}


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    return {"type": "stdio", "command": program, "args": rest, "env": launch.env_map}


def install(path: Path, scope: str = "user", mcp: bool = False, dry_run: bool = False,
            exec_form: bool = True) -> HookInstallResult:
    """Merge mem's three hooks into the settings file; running it twice changes nothing.
    The user scope writes who mem runs as into the hooks and the server alike; the
    project scope's hooks (in the local file) run this machine's mem, and its committed
    .mcp.json `mem` from PATH, both finding the rest as each user's mem does.
    `exec_form=False` writes shell lines, for a Claude Code older than the exec form."""
    launch = resolve_launch(scope)
    hooks = launch if scope == "user" else Launch(tuple(hookbase.mem_command()))
    entry = hook_entry(hooks) if exec_form else shell_entry(hooks)
    result = hookbase.install_json(path, "Claude Code", dict.fromkeys(EVENTS, entry), ours,
                                   dry_run=dry_run)
    if not mcp:
        return result
    server = hookbase.install_json(mcp_path(scope), "Claude Code", {}, ours,
                                   ("mcpServers", server_entry(launch)), dry_run)
    return replace(result, mcp=server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    result = hookbase.uninstall_json(path, "Claude Code", ours, dry_run=dry_run)
    if not mcp:
        return result
    server = hookbase.uninstall_json(mcp_path(scope), "Claude Code", ours, "mcpServers",
                                     dry_run)
    return replace(result, mcp=server)
