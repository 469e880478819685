"""Crush: mem's MCP server in its global config's `mcp` section
($XDG_CONFIG_HOME/crush/crush.json, ~/.config/crush/crush.json).

Crush starts a stdio server with the entry's `env` (its timeout in seconds); the file may
be written by hand, so mem edits only its own entry (jsonedit.py) and every other byte
stays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memvault.integrations import hookbase, jsonedit
from memvault.integrations.launch import Launch

NAME = "crush"
WHAT = "Crush config"
EVENTS: tuple[str, ...] = ()
CONTAINER = ("mcp",)
TIMEOUT_S = 60  # mem opens the vault first, which may wait for a key command


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "crush"


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.config/crush/crush.json, or the project's crush.json."""
    return hookbase.scoped(scope, explicit, lambda: config_dir() / "crush.json",
                           lambda: Path.cwd() / "crush.json")


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"type": "stdio", "command": program, "args": rest,
                             "timeout": TIMEOUT_S}
    if launch.env:
        entry["env"] = launch.env_map
    return entry


install, uninstall = jsonedit.server_installers(WHAT, CONTAINER, server_entry, "Crush")


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    return jsonedit.server_wired(settings_path("user"), WHAT, CONTAINER)
