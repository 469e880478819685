"""OpenCode: mem's MCP server in its config's `mcp` section (opencode.json or .jsonc).

OpenCode starts a local server with its own environment and the entry's `environment`
added; the config is often written by hand, with comments and trailing commas, so it is
edited in place (jsonedit.py) and every byte that is not mem's entry stays.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase, jsonedit
from memvault.integrations.launch import Launch

NAME = "opencode"
WHAT = "OpenCode config"
EVENTS: tuple[str, ...] = ()  # its sessions are read by `mem ingest --scan`, no hooks
CONTAINER = ("mcp",)
# OpenCode gives a server 5 s to list its tools; mem opens the vault first, which may wait
# for a key command (up to 30 s).
TIMEOUT_MS = 60_000


def config_dir() -> Path:
    """$XDG_CONFIG_HOME/opencode (~/.config/opencode), where OpenCode reads its global
    config."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "opencode"


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """The global config: opencode.jsonc when there is one, else opencode.json (the
    project's, in its folder, for the project scope)."""
    if explicit is not None:
        return explicit
    if scope == "user":
        folder = config_dir()
    elif scope == "project":
        folder = Path.cwd()
    else:
        raise UsageError(f"unknown scope {scope!r}: use user or project")
    jsonc = folder / "opencode.jsonc"
    return jsonc if jsonc.exists() else folder / "opencode.json"


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    """OpenCode's local server: the whole command line in `command`; its environment is
    passed on, MEM_MASTER_KEY included, so nothing is forwarded by name."""
    entry: dict[str, Any] = {"type": "local", "command": launch.argv("mcp"), "enabled": True,
                             "timeout": TIMEOUT_MS}
    if launch.env:
        entry["environment"] = launch.env_map
    return entry


install, uninstall = jsonedit.server_installers(WHAT, CONTAINER, server_entry)


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    return jsonedit.server_wired(settings_path("user"), WHAT, CONTAINER)
