"""Claude Code: the hook handler, the settings.json installer, and the MCP server entry.

The hook machinery (error boundary, log, brief, background ingest) is shared by every
agent: integrations/hookbase.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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


run, handle = hookbase.entry_points(AGENT)


# --- installing into Claude Code's settings -----------------------------------------------


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """Where the hooks go. The project scope writes the project's local settings file
    (settings.local.json, which Claude Code keeps out of git): the hook names this
    machine's mem by its absolute path."""
    return hookbase.scoped(scope, explicit, lambda: _config_dir() / "settings.json",
                           lambda: Path.cwd() / ".claude" / "settings.local.json")


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


# --- the mem plugin, as Claude Code records it ---------------------------------------------
# `claude plugin install mem@memvault` (or /plugin install) enables the plugin in the user's
# settings.json (`enabledPlugins`: {"mem@memvault": true}; false or absent: off) and copies
# it into plugins/cache/, recorded in plugins/installed_plugins.json with its installPath;
# the marketplace it came from is in plugins/known_marketplaces.json (installLocation).
# Claude Code loads an enabled plugin from its marketplace when no copy is recorded.

PLUGINS_READ_LIMIT = 4 << 20  # Claude Code's own records: bounded reads, never trusted


@dataclass(frozen=True)
class Plugin:
    """A plugin of mem's that the user's settings enable: what Claude Code runs of it."""

    id: str  # NAME@MARKETPLACE, as `claude plugin disable` takes it
    folder: Path  # where Claude Code loads it from
    hooks: tuple[str, ...]  # the events with a hook of mem's
    exec_form: bool  # its hooks are `command` with `args`
    mcp: bool  # it starts a server that runs `mem mcp`


def plugin() -> Plugin | None:
    """The enabled plugin that brings mem to Claude Code for this user, or None. A plugin
    is mem's by what it runs (mem's hooks, a server running `mem mcp`), whatever its name
    or marketplace; one that is installed but not enabled is not there. A record mem
    cannot read is a plugin mem does not recognise, never an error."""
    settings = _read_json(settings_path("user"))
    enabled = settings.get("enabledPlugins")
    if not isinstance(enabled, dict):
        return None
    for ident, on in enabled.items():
        if on is not True or not isinstance(ident, str) or "@" not in ident:
            continue
        for folder in _plugin_folders(ident):
            found = _mem_plugin(ident, folder)
            if found is not None:
                return found
    return None


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        with open(path, "rb") as stream:
            doc = json.loads(stream.read(PLUGINS_READ_LIMIT) or b"{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _plugin_folders(ident: str) -> list[Path]:
    """Where Claude Code has the plugin: the user scope's installed copy, then the
    plugin's folder in its marketplace."""
    plugins = _config_dir() / "plugins"
    folders = []
    records = _read_json(plugins / "installed_plugins.json").get("plugins")
    entries = records.get(ident) if isinstance(records, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("scope", "user") == "user" \
                and isinstance(entry.get("installPath"), str):
            folders.append(Path(entry["installPath"]))
    name, _, market = ident.rpartition("@")
    known = _read_json(plugins / "known_marketplaces.json").get(market)
    place = known.get("installLocation") if isinstance(known, dict) else None
    if isinstance(place, str):
        listing = _read_json(Path(place) / ".claude-plugin" / "marketplace.json")
        for each in listing.get("plugins") or []:
            source = each.get("source") if isinstance(each, dict) else None
            if each.get("name") == name and isinstance(source, str):  # a folder in it
                folders.append(Path(place) / source)
    return folders


def _mem_plugin(ident: str, folder: Path) -> Plugin | None:
    """The plugin in `folder` when it runs mem: its hooks (hooks/hooks.json, or where its
    manifest says) and MCP servers (.mcp.json, or its manifest's)."""
    manifest = _read_json(folder / ".claude-plugin" / "plugin.json")
    hooks_doc = _part(folder, manifest.get("hooks"), "hooks/hooks.json")
    servers = _part(folder, manifest.get("mcpServers"), ".mcp.json")
    events: list[str] = []
    exec_form = True
    groups_by_event = hooks_doc.get("hooks")
    for event, groups in (groups_by_event if isinstance(groups_by_event, dict) else {}).items():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                if ours(handler):
                    events.append(event)
                    exec_form = exec_form and isinstance(handler.get("args"), list)
    table = servers.get("mcpServers", servers)
    mcp = isinstance(table, dict) and any(_runs_mem_mcp(s) for s in table.values())
    if not events and not mcp:
        return None
    return Plugin(ident, folder, tuple(dict.fromkeys(events)), exec_form and bool(events),
                  mcp)


def _part(folder: Path, given: Any, default: str) -> dict[str, Any]:
    """A part of a plugin: inline in its manifest, in the file the manifest names, or in
    its default file."""
    if isinstance(given, dict):
        return given
    place = given if isinstance(given, str) else default
    return _read_json(folder / place)


def _runs_mem_mcp(server: Any) -> bool:
    """A server entry that starts `mem mcp` (any path to mem, or `python -m memvault`)."""
    if not isinstance(server, dict) or not isinstance(server.get("command"), str):
        return False
    args = server.get("args") or []
    if not isinstance(args, list):
        return False
    argv = [server["command"], *map(str, args)]
    name = os.path.basename(argv[0])
    if name in ("mem", "memvault"):
        rest = argv[1:]
    elif name.startswith("python") and argv[1:3] == ["-m", "memvault"]:
        rest = argv[3:]
    else:
        return False
    return rest[:1] == ["mcp"]
