"""Cline: mem's MCP server in the Cline CLI's cline_mcp_settings.json
($CLINE_MCP_SETTINGS_PATH, else $CLINE_DATA_DIR/settings/, ~/.cline/data/settings/).

Cline starts a stdio server with the entry's `env` (timeouts in seconds); mem edits only
its own entry, every other byte of the file stays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase, jsonedit
from memvault.integrations.launch import Launch

NAME = "cline"
WHAT = "Cline MCP"
EVENTS: tuple[str, ...] = ()
CONTAINER = ("mcpServers",)
TIMEOUT_S = 60


def config_dir() -> Path:
    """~/.cline ($CLINE_DIR): the CLI's folder."""
    return Path(os.environ.get("CLINE_DIR") or str(Path.home() / ".cline"))


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    if scope != "user":
        raise UsageError("Cline keeps its MCP servers for the user only: use the user scope",
                         field="scope")
    given = os.environ.get("CLINE_MCP_SETTINGS_PATH", "").strip()
    if given:
        return Path(given)
    data = os.environ.get("CLINE_DATA_DIR", "").strip()
    return (Path(data) if data else config_dir() / "data") / "settings" / \
        "cline_mcp_settings.json"


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"type": "stdio", "command": program, "args": rest,
                             "disabled": False, "timeout": TIMEOUT_S}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


install, uninstall = jsonedit.server_installers(WHAT, CONTAINER, server_entry, "Cline")


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    return jsonedit.server_wired(settings_path("user"), WHAT, CONTAINER)
