"""OpenCode: mem's MCP server in its config's `mcp` section (opencode.json or .jsonc), and a
plugin file of mem's (plugins/mem.js beside it) that runs `mem hook opencode` at a
session's edges.

OpenCode starts a local server with its own environment and the entry's `environment`
added; the config is often written by hand, with comments and trailing commas, so it is
edited in place (jsonedit.py) and every byte that is not mem's entry stays.

OpenCode runs code at session events only through plugins: each .js or .ts file in the
config folder's plugins/ (a project's .opencode/plugins/) is loaded at start. mem's file
asks for the brief the first time a session builds its system prompt
(`experimental.chat.system.transform`) and adds it there on every turn, and keeps the
session when it goes idle (each answer's end) or is compacted (`session.idle`,
`session.compacted`): the hook's ingest reads OpenCode's store, which names each
message's session. The file is mem's while it is exactly what mem writes; a copy its user
changed is theirs, left as it is by setup and undo alike.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase, jsonedit
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.integrations.launch import Launch
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "opencode"
WHAT = "OpenCode config"
# The events the plugin hands to `mem hook opencode` (its brief is asked at the first
# system prompt of a session: "session.start").
EVENTS = ("session.start", "session.idle", "session.compacted")
CONTAINER = ("mcp",)
# OpenCode gives a server 5 s to list its tools; mem opens the vault first, which may wait
# for a key command (up to 30 s).
TIMEOUT_MS = 60_000
PLUGIN = "mem.js"
MARK = "// mem: written by `mem setup` (memvault)."


def _store(payload: dict[str, Any]) -> str | None:
    """OpenCode's store (opencode.db in its data folder): its events name no file."""
    from memvault.text.transcripts.opencode import places

    return str(places(Path.home(), os.environ)[0])


AGENT = Agent(
    name=NAME, ingest_format="opencode",
    brief_events=frozenset({"session.start"}),
    ingest_events=frozenset({"session.idle", "session.compacted"}),
    answer=hook_specific, transcript=_store, one_session=False,
)


run, handle = hookbase.entry_points(AGENT)


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


def plugin_path(scope: str) -> Path:
    """plugins/mem.js in the config folder (the project's .opencode/plugins/)."""
    if scope == "project":
        return Path.cwd() / ".opencode" / "plugins" / PLUGIN
    return config_dir() / "plugins" / PLUGIN


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    """OpenCode's local server: the whole command line in `command`; its environment is
    passed on, MEM_MASTER_KEY included, so nothing is forwarded by name."""
    entry: dict[str, Any] = {"type": "local", "command": launch.argv("mcp"), "enabled": True,
                             "timeout": TIMEOUT_MS}
    if launch.env:
        entry["environment"] = launch.env_map
    return entry


_PLUGIN_BODY = """\
// It briefs each OpenCode session from your memory and keeps the session when it goes
// idle or is compacted. `mem setup --undo` takes it out; once you change it, it is yours
// and mem leaves it.
import { spawn } from "node:child_process"

const MEM = @ARGV@
const ENV = @ENV@
const TIMEOUT_MS = @TIMEOUT@

// One hook run: the event on stdin as JSON, its answer from stdout ("" on any failure:
// mem never fails the session).
function hook(event, sessionID, directory) {
  return new Promise((resolve) => {
    let out = ""
    let child
    try {
      child = spawn(MEM[0], MEM.slice(1), {
        env: { ...process.env, ...ENV }, stdio: ["pipe", "pipe", "ignore"],
      })
    } catch {
      resolve("")
      return
    }
    const timer = setTimeout(() => child.kill(), TIMEOUT_MS)
    child.on("error", () => {
      clearTimeout(timer)
      resolve("")
    })
    child.stdout.on("data", (chunk) => {
      out += chunk
    })
    child.on("close", () => {
      clearTimeout(timer)
      resolve(out)
    })
    child.stdin.on("error", () => {})
    const payload = { hook_event_name: event, session_id: sessionID, cwd: directory }
    child.stdin.end(JSON.stringify(payload))
  })
}

function context(answer) {
  try {
    return JSON.parse(answer).hookSpecificOutput.additionalContext || ""
  } catch {
    return ""
  }
}

export const MemPlugin = async ({ directory }) => {
  const briefs = new Map()
  return {
    // Asked once a session, added to its system prompt on every turn.
    "experimental.chat.system.transform": async (input, output) => {
      const id = input && input.sessionID
      if (!id) return
      if (!briefs.has(id)) briefs.set(id, hook("session.start", id, directory).then(context))
      const brief = await briefs.get(id)
      if (brief) output.system.push(brief)
    },
    event: async ({ event }) => {
      if (event.type !== "session.idle" && event.type !== "session.compacted") return
      const id = event.properties && event.properties.sessionID
      if (id) await hook(event.type, id, directory)
    },
  }
}
"""
_ARGV = re.compile(r"^const MEM = (.*)$", re.M)
_ENV = re.compile(r"^const ENV = (.*)$", re.M)


def plugin_text(argv: list[str], env: dict[str, str]) -> str:
    """The plugin file for a hook command line and its variables."""
    return f"{MARK}\n" + _PLUGIN_BODY.replace("@ARGV@", json.dumps(argv)).replace(
        "@ENV@", json.dumps(env, sort_keys=True)).replace(
        "@TIMEOUT@", str(hookbase.HOOK_TIMEOUT_S * 1000))


def plugin_launch(text: str) -> tuple[list[str], dict[str, str]] | None:
    """The command line and variables of a plugin file that is mem's: exactly what
    plugin_text() writes, for a `mem hook opencode` line with mem's own variables only;
    None for anything else (a file its user changed, another tool's)."""
    argv_line, env_line = _ARGV.search(text), _ENV.search(text)
    if not text.startswith(MARK + "\n") or argv_line is None or env_line is None:
        return None
    try:
        argv, env = json.loads(argv_line.group(1)), json.loads(env_line.group(1))
    except ValueError:
        return None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or \
            not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        return None
    if set(env) - hookbase.PINNED_ENV or not hookbase.is_mem_hook_argv(argv, NAME):
        return None
    return (argv, env) if plugin_text(argv, env) == text else None


def _read_plugin(path: Path) -> tuple[str | None, bytes | None]:
    """The plugin file's text (None when absent) and bytes; UsageError when it cannot be
    read as text."""
    if not path.exists():
        return None, None
    try:
        data = path.read_bytes()
        return data.decode(), data
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} cannot be read ({exc}); nothing was changed") from None


def _not_ours(path: Path) -> UsageError:
    return UsageError(f"{path} is not the plugin mem writes (changed by hand, or another "
                      "tool's): mem leaves it; move it away to have mem's put there, "
                      "nothing was changed")


def install_plugin(path: Path, launch: Launch, dry_run: bool = False) -> HookInstallResult:
    """mem's plugin file at `path`: written when absent or an older one of mem's; a file
    that is not mem's is refused (UsageError), nothing written."""
    text, before = _read_plugin(path)
    wanted = plugin_text(launch.argv("hook", NAME), launch.env_map)
    if text == wanted:
        return HookInstallResult(str(path), False, (), None)
    if text is not None and plugin_launch(text) is None:
        raise _not_ours(path)
    backup = None if dry_run else hookbase.save_bytes(path, wanted.encode(), before)
    return HookInstallResult(str(path), True, EVENTS, backup)


def uninstall_plugin(path: Path, dry_run: bool = False) -> HookInstallResult:
    """mem's plugin file taken out; a file its user changed (or another tool's) stays."""
    text, _ = _read_plugin(path)
    if text is None or plugin_launch(text) is None:
        return HookInstallResult(str(path), False, (), None)
    if not dry_run:
        path.unlink()
        try:  # the folder too, when mem's file was all it held
            path.parent.rmdir()
        except OSError:
            pass
    return HookInstallResult(str(path), True, EVENTS, None)


_install_server, _uninstall_server = jsonedit.server_installers(WHAT, CONTAINER, server_entry)


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    """The plugin, and with `mcp` the server in `path` (both checked before either is
    written)."""
    launch = resolve_launch(scope)
    plugin = plugin_path(scope)
    install_plugin(plugin, launch, True)
    if mcp:
        _install_server(path, scope, True, True)
    result = install_plugin(plugin, launch, dry_run)
    if not mcp:
        return result
    return replace(result, mcp=_install_server(path, scope, True, dry_run))


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    plugin = plugin_path(scope)
    if mcp:  # checked first: an undo that cannot edit the config takes nothing out
        _uninstall_server(path, scope, True, True)
    result = uninstall_plugin(plugin, dry_run)
    if not mcp:
        return result
    return replace(result, mcp=_uninstall_server(path, scope, True, dry_run))


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    """mem's plugin (its events and command line) and the file holding mem's server."""
    config, _, _, _, server = jsonedit.server_wired(settings_path("user"), WHAT, CONTAINER)
    plugin = plugin_path("user")
    text, _ = _read_plugin(plugin)
    found = plugin_launch(text) if text is not None else None
    if found is None:
        return plugin, (), (), True, server
    return plugin, EVENTS, tuple(found[0]), True, server
