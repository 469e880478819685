"""Gemini CLI: the hook handler and the settings.json installer (hooks and mcpServers).

Gemini CLI runs a hook's `command` through a shell and waits for SessionStart; it does not
wait for SessionEnd, and PreCompress is advisory. Its timeouts are in milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memvault.integrations import hookbase
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.integrations.launch import Launch, refuse_forwarding
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "gemini"
EVENTS = ("SessionStart", "SessionEnd", "PreCompress")
TIMEOUT_MS = hookbase.HOOK_TIMEOUT_S * 1000
SERVER_TIMEOUT_MS = 60_000
# Gemini CLI starts no MCP server in a folder nobody trusted; mem never trusts it for the user.
TRUST_NOTE = ("Gemini CLI starts MCP servers only in folders you trust: trust a folder when "
              "it asks, or run /permissions trust in it")
AGENT = Agent(
    name=NAME, ingest_format="gemini",
    brief_events=frozenset({"SessionStart"}),
    ingest_events=frozenset({"SessionEnd", "PreCompress"}),
    answer=hook_specific,
)


run, handle = hookbase.entry_points(AGENT)


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.gemini/settings.json, or the project's .gemini/settings.json (committed: the
    hooks and the server then run `mem` from PATH)."""
    return hookbase.scoped(scope, explicit, lambda: Path.home() / ".gemini" / "settings.json",
                           lambda: Path.cwd() / ".gemini" / "settings.json")


ours = hookbase.hook_owner(NAME)


def hook_entry(launch: Launch) -> dict[str, Any]:
    # Gemini CLI takes a shell command line only: each part is quoted.
    return {"type": "command", "name": "mem", "command": launch.shell_line("hook", NAME),
            "timeout": TIMEOUT_MS,
            "description": "mem: the memory brief at start, the transcript kept at the end"}


def server_entry(launch: Launch) -> dict[str, Any]:
    """Gemini CLI passes an MCP server the variables of its `env` as they are (those it
    would drop from its own environment too)."""
    program, *rest = launch.argv("mcp")
    # `timeout` (ms) bounds the start too, 5 s by default in `gemini mcp list`: mem opens
    # the vault first, which may wait for a key command (up to 30 s).
    entry: dict[str, Any] = {"command": program, "args": rest, "timeout": SERVER_TIMEOUT_MS}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    launch = resolve_launch(scope)  # the hooks and the server from one resolution
    server = None
    if mcp:
        refuse_forwarding(launch, "Gemini CLI")
        server = ("mcpServers", server_entry(launch))
    return hookbase.install_json(path, "Gemini CLI",
                                 dict.fromkeys(EVENTS, hook_entry(launch)), ours, server,
                                 dry_run)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    return hookbase.uninstall_json(path, "Gemini CLI", ours, "mcpServers" if mcp else None,
                                   dry_run)
