"""Qwen Code: the hook handler and ~/.qwen/settings.json (hooks and mcpServers), as Gemini
CLI's, which it grew from.

Qwen Code runs a hook's `command` through a shell (event -> [{matcher?, hooks:
[handler]}], Claude Code's shape) with `hook_event_name`, `session_id`, `cwd` and
`transcript_path` (the chat file `mem ingest --format qwen` reads) on stdin, and takes
`hookSpecificOutput.additionalContext` from SessionStart. Its hook timeouts are in seconds,
an MCP server's in milliseconds; it passes its whole environment to both. The settings
are edited in place (jsonedit.py): comments and every byte not mem's stay.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from memvault.integrations import hookbase, jsonedit
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.integrations.launch import Launch
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "qwen"
WHAT = "Qwen Code"
EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
CONTAINER = ("mcpServers",)
SERVER_TIMEOUT_MS = 60_000  # mem opens the vault first, which may wait for a key command
AGENT = Agent(
    name=NAME, ingest_format="qwen",
    brief_events=frozenset({"SessionStart"}),
    ingest_events=frozenset({"SessionEnd", "PreCompact"}),
    answer=hook_specific,
)


run, handle = hookbase.entry_points(AGENT)


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.qwen/settings.json, or the project's .qwen/settings.json."""
    return hookbase.scoped(scope, explicit, lambda: Path.home() / ".qwen" / "settings.json",
                           lambda: Path.cwd() / ".qwen" / "settings.json")


ours = hookbase.hook_owner(NAME)


def hook_entry(launch: Launch) -> dict[str, Any]:
    return {"type": "command", "name": "mem", "command": launch.shell_line("hook", NAME),
            "timeout": hookbase.HOOK_TIMEOUT_S}


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"command": program, "args": rest, "timeout": SERVER_TIMEOUT_MS}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    launch = resolve_launch(scope)
    if dry_run or not mcp:
        result = jsonedit.install_hooks(path, WHAT, dict.fromkeys(EVENTS, hook_entry(launch)),
                                        ours, True, {}, dry_run)
        if not mcp:
            return result
        # A dry run writes nothing: the server's change is planned on the file as it is.
        server = jsonedit.install_server(path, WHAT, CONTAINER, server_entry(launch), True)
        events = result.events + server.events
        return replace(result, changed=bool(events), events=events)
    hooks = jsonedit.install_hooks(path, WHAT, dict.fromkeys(EVENTS, hook_entry(launch)),
                                   ours, True, {}, False)
    server = jsonedit.install_server(path, WHAT, CONTAINER, server_entry(launch), False)
    events = hooks.events + server.events
    return HookInstallResult(str(path), bool(events), events, hooks.backup or server.backup)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    hooks = jsonedit.uninstall_hooks(path, WHAT, ours, True, dry_run)
    if not mcp:
        return hooks
    # One file: a dry run plans the server's removal on it as it is.
    server = jsonedit.uninstall_server(path, WHAT, CONTAINER, True) if dry_run else \
        jsonedit.uninstall_server(path, WHAT, CONTAINER, False)
    events = hooks.events + server.events
    return HookInstallResult(str(path), bool(events), events, hooks.backup or server.backup)


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    path = settings_path("user")
    doc = jsonedit.loads(jsonedit.read(path, WHAT)[0])
    hooks = doc.get("hooks") if isinstance(doc.get("hooks"), dict) else {}
    events, first = [], None
    for event, groups in hooks.items():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                if ours(handler):
                    events.append(event)
                    first = first or handler
    server = jsonedit.server_at(doc, CONTAINER)
    argv = tuple(hookbase.hook_argv(first)) if first else ()
    return path, tuple(dict.fromkeys(events)), argv, False, path if server is not None else None
