"""Cursor: the hook handler, the hooks.json installer (sessionStart, sessionEnd,
preCompact) and mem's MCP server in mcp.json, both under ~/.cursor.

Cursor runs a hook's `command` through a shell with the event's JSON on stdin
(`hook_event_name`, `session_id`, `transcript_path`: the agent transcript that `mem ingest
--format cursor` reads) and takes `additional_context` from sessionStart's answer. Its
hooks.json is flat (event -> [handler]), beside a `version`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase, jsonedit
from memvault.integrations.hookbase import Agent
from memvault.integrations.launch import Launch, refuse_forwarding
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "cursor"
WHAT = "Cursor"
EVENTS = ("sessionStart", "sessionEnd", "preCompact")
CONTAINER = ("mcpServers",)
AGENT = Agent(
    name=NAME, ingest_format="cursor",
    brief_events=frozenset({"sessionStart"}),
    # stop (the end of each turn) is handled too, for those who add it themselves.
    ingest_events=frozenset({"sessionEnd", "preCompact", "stop"}),
    answer=lambda event, context: {"additional_context": context},
)


run, handle = hookbase.entry_points(AGENT)


def config_dir() -> Path:
    return Path.home() / ".cursor"


def _folder(scope: str) -> Path:
    if scope == "user":
        return config_dir()
    if scope == "project":
        return Path.cwd() / ".cursor"
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.cursor/hooks.json (the project's .cursor/hooks.json)."""
    return explicit if explicit is not None else _folder(scope) / "hooks.json"


def mcp_path(scope: str) -> Path:
    return _folder(scope) / "mcp.json"


ours = hookbase.hook_owner(NAME)


def hook_entry(launch: Launch) -> dict[str, Any]:
    return {"command": launch.shell_line("hook", NAME)}


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"type": "stdio", "command": program, "args": rest}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    from dataclasses import replace

    launch = resolve_launch(scope)
    if mcp:  # mcp.json can name a variable only by value: the key is never written
        refuse_forwarding(launch, "Cursor")
    result = jsonedit.install_hooks(path, "Cursor hooks", dict.fromkeys(EVENTS,
                                    hook_entry(launch)), ours, False, {"version": 1},
                                    dry_run)
    if not mcp:
        return result
    server = jsonedit.install_server(mcp_path(scope), "Cursor MCP", CONTAINER,
                                     server_entry(launch), dry_run)
    return replace(result, mcp=server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    from dataclasses import replace

    result = jsonedit.uninstall_hooks(path, "Cursor hooks", ours, False, dry_run)
    if not mcp:
        return result
    return replace(result, mcp=jsonedit.uninstall_server(mcp_path(scope), "Cursor MCP",
                                                         CONTAINER, dry_run))


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    """mem's entries here: the hooks file, its events with a hook of mem's, the first
    one's command line, whether it is in exec form, and the file holding mem's server."""
    path = settings_path("user")
    doc = jsonedit.loads(jsonedit.read(path, "Cursor hooks")[0])
    hooks = doc.get("hooks") if isinstance(doc.get("hooks"), dict) else {}
    events, first = [], None
    for event, handlers in hooks.items():
        for handler in handlers if isinstance(handlers, list) else []:
            if ours(handler):
                events.append(event)
                first = first or handler
    server_file = mcp_path("user")
    server = jsonedit.server_at(jsonedit.loads(jsonedit.read(server_file, "Cursor MCP")[0]),
                                CONTAINER)
    argv = tuple(hookbase.hook_argv(first)) if first else ()
    return path, tuple(dict.fromkeys(events)), argv, False, \
        server_file if server is not None else None
