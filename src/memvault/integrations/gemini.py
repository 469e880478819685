"""Gemini CLI: the hook handler and the settings.json installer (hooks and mcpServers).

Gemini CLI runs a hook's `command` through a shell and waits for SessionStart; it does not
wait for SessionEnd, and PreCompress is advisory. Its timeouts are in milliseconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO, TextIO

from memvault.errors import UsageError
from memvault.integrations import hookbase
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.model.results import HookInstallResult

NAME = "gemini"
EVENTS = ("SessionStart", "SessionEnd", "PreCompress")
MARKER = "hook gemini"
TIMEOUT_MS = hookbase.HOOK_TIMEOUT_S * 1000
AGENT = Agent(
    name=NAME, ingest_format="gemini",
    brief_events=frozenset({"SessionStart"}),
    ingest_events=frozenset({"SessionEnd", "PreCompress"}),
    answer=hook_specific,
)


def run(settings_factory: Any, stdin: BinaryIO | None = None,
        stdout: TextIO | None = None) -> None:
    hookbase.run(AGENT, settings_factory, stdin, stdout)


def handle(settings_factory: Any, stdin: str | bytes) -> str | None:
    return hookbase.handle(AGENT, settings_factory, stdin)


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.gemini/settings.json, or the project's .gemini/settings.json (committed: the
    hooks and the server then run `mem` from PATH)."""
    if explicit is not None:
        return explicit
    if scope == "user":
        return Path.home() / ".gemini" / "settings.json"
    if scope == "project":
        return Path.cwd() / ".gemini" / "settings.json"
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def ours(hook: Any) -> bool:
    return isinstance(hook, dict) and MARKER in str(hook.get("command", ""))


def hook_entry(command: list[str]) -> dict[str, Any]:
    # Gemini CLI takes a shell command line only: each part is quoted.
    return {"type": "command", "name": "mem",
            "command": hookbase.shell_line([*command, "hook", NAME]), "timeout": TIMEOUT_MS,
            "description": "mem: the memory brief at start, the transcript kept at the end"}


def server_entry(command: list[str]) -> dict[str, Any]:
    program, *rest = command
    return {"command": program, "args": [*rest, "mcp"]}


def install(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    command = hookbase.mem_command() if scope == "user" else hookbase.portable_command()
    server = ("mcpServers", server_entry(command)) if mcp else None
    return hookbase.install_json(path, "Gemini CLI",
                                 dict.fromkeys(EVENTS, hook_entry(command)), ours, server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    return hookbase.uninstall_json(path, "Gemini CLI", ours, "mcpServers" if mcp else None)
