"""GitHub Copilot CLI: mem's MCP server in ~/.copilot/mcp-config.json ($COPILOT_HOME).

The file is the one `copilot mcp add` writes (`mcpServers`, each server with `type`,
`command`, `args`, `env` and the `tools` it may use); mem edits only its own entry, every
other byte stays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memvault.integrations import hookbase, jsonedit
from memvault.integrations.launch import Launch

NAME = "copilot"
WHAT = "Copilot CLI MCP"
EVENTS: tuple[str, ...] = ()
CONTAINER = ("mcpServers",)


def config_dir() -> Path:
    return Path(os.environ.get("COPILOT_HOME") or str(Path.home() / ".copilot"))


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """$COPILOT_HOME/mcp-config.json (~/.copilot), or the project's .mcp.json."""
    return hookbase.scoped(scope, explicit, lambda: config_dir() / "mcp-config.json",
                           lambda: Path.cwd() / ".mcp.json")


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"type": "local", "command": program, "args": rest,
                             "tools": ["*"]}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


install, uninstall = jsonedit.server_installers(WHAT, CONTAINER, server_entry, "Copilot CLI")


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    path = settings_path("user")
    return jsonedit.server_wired(path, WHAT, CONTAINER)
