"""Amp: mem's MCP server in its settings' `amp.mcpServers` ($XDG_CONFIG_HOME/amp/settings.json,
~/.config/amp/settings.json; a workspace's .amp/settings.json), the shape `amp mcp add`
writes: `{command, args, env}`.

Amp starts a local server with its own whole environment and the entry's `env` (tried:
it passed a server MEM_USER and MEM_MASTER_KEY), and reads `${NAME}` in the command, its
arguments and `env` as its variable NAME, with no way to write it otherwise: a launch
holding one (a path with `${...}` in it) is refused rather than written to be read as
something else. The settings may be JSON with comments written by hand: mem edits only
its own entry (jsonedit.py) and every other byte stays.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase, jsonedit
from memvault.integrations.launch import Launch

NAME = "amp"
WHAT = "Amp settings"
EVENTS: tuple[str, ...] = ()
CONTAINER = ("amp.mcpServers",)
_VARIABLE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "amp"


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """~/.config/amp/settings.json, or the workspace's .amp/settings.json."""
    return hookbase.scoped(scope, explicit, lambda: config_dir() / "settings.json",
                           lambda: Path.cwd() / ".amp" / "settings.json")


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    entry: dict[str, Any] = {"command": program, "args": rest}
    if launch.env:
        entry["env"] = launch.env_map
    for value in (program, *rest, *launch.env_map.values()):
        if (found := _VARIABLE.search(value)) is not None:
            raise UsageError(f"Amp would read {found.group()} in mem's command line "
                             f"({value!r}) as one of its variables: move what names it, "
                             "then set up again; nothing was changed")
    return entry


install, uninstall = jsonedit.server_installers(WHAT, CONTAINER, server_entry)


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    return jsonedit.server_wired(settings_path("user"), WHAT, CONTAINER)
