"""Codex CLI: the hook handler, the hooks.json installer and the config.toml MCP server.

Codex runs a hook's `command` through a shell, caps SessionEnd hooks at 3 seconds, and
reads hooks.json in Claude Code's shape (event -> [{matcher?, hooks: [handler]}]).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.integrations.launch import MEM_VARIABLES, Launch
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "codex"
EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
# Codex skips a hook nobody trusted without a word; mem never trusts it for the user.
TRUST_NOTE = ("Codex runs new or changed hooks only once you trust them: start codex and "
              "review mem's under /hooks")
SESSION_END_TIMEOUT_S = 3  # Codex's own cap: a longer timeout is cut to it, with a warning
AGENT = Agent(
    name=NAME, ingest_format="codex",
    brief_events=frozenset({"SessionStart"}),
    # Stop (the end of each turn) is handled too, for those who add it themselves.
    ingest_events=frozenset({"SessionEnd", "PreCompact", "Stop"}),
    answer=hook_specific,
)


run, handle = hookbase.entry_points(AGENT)


def _home(scope: str) -> Path:
    if scope == "user":
        return Path(os.environ.get("CODEX_HOME") or str(Path.home() / ".codex"))
    if scope == "project":
        return Path.cwd() / ".codex"
    raise UsageError(f"unknown scope {scope!r}: use user or project")


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    """$CODEX_HOME/hooks.json (~/.codex), or the project's .codex/hooks.json (committed:
    its hooks run `mem` from PATH)."""
    return explicit if explicit is not None else _home(scope) / "hooks.json"


def config_path(scope: str) -> Path:
    return _home(scope) / "config.toml"


ours = hookbase.hook_owner(NAME)


def hook_entry(launch: Launch, event: str) -> dict[str, Any]:
    """Codex runs the command through a shell: mem's variables go before it."""
    timeout = SESSION_END_TIMEOUT_S if event == "SessionEnd" else hookbase.HOOK_TIMEOUT_S
    return {"type": "command", "command": launch.shell_line("hook", NAME), "timeout": timeout}


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    launch = resolve_launch(scope)  # the hooks and the server from one resolution
    if scope != "user":
        # A shared file names no value: the server gets mem's variables by name from
        # Codex's environment, as the hooks do, instead of Codex's short allow-list.
        launch = replace(launch, forward=MEM_VARIABLES)
    result = hookbase.install_json(path, "Codex hooks",
                                   {e: hook_entry(launch, e) for e in EVENTS}, ours,
                                   dry_run=dry_run)
    if not mcp:
        return result
    server = install_server(config_path(scope), launch, dry_run)
    return replace(result, mcp=server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    result = hookbase.uninstall_json(path, "Codex hooks", ours, dry_run=dry_run)
    if not mcp:
        return result
    server = uninstall_server(config_path(scope), dry_run)
    return replace(result, mcp=server)


# --- config.toml: [mcp_servers.mem] ---------------------------------------------------------
# config.toml is the user's: it keeps its comments, order and every key mem does not own.
# An existing [mcp_servers.mem] is edited in place with tomlkit, which writes back what it
# read; only `command`, `args` and mem's own variables in `env` and `env_vars` change. A new
# table goes at the end of the file; removing it keeps the comments above the next table.
# Every result is parsed again (tomllib) and compared with what was meant before it is
# saved.

MARK = "# Added by `mem hooks install codex --mcp`."
STARTUP_TIMEOUT_S = 60
HEADER_RE = re.compile(r'^\s*\[\s*mcp_servers\s*\.\s*(?:mem|"mem"|\'mem\')\s*(?:\.[^\]]*)?\]')
ANY_HEADER_RE = re.compile(r"^\s*\[")
# The user's own identity in mem's table: kept, but it must be the one mem installs for.
IDENTITY_ENV = {"MEM_VAULT": "--vault=", "MEM_ORG": "--org=", "MEM_USER": "--user=",
                "MEM_KEY_FILE": "--key-file="}


def _read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    import tomllib

    if not path.exists():
        return "", {}
    try:
        text = path.read_text()
        return text, tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML ({exc}); fix it first, nothing was "
                         "changed") from None


def server_fields(launch: Launch) -> dict[str, Any]:
    """What mem owns in [mcp_servers.mem]."""
    program, *rest = launch.argv("mcp")
    fields: dict[str, Any] = {"command": program, "args": rest}
    if launch.env:
        fields["env"] = launch.env_map
    if launch.forward:
        fields["env_vars"] = list(launch.forward)
    return fields


def _wanted(current: dict[str, Any] | None, fields: dict[str, Any]) -> dict[str, Any]:
    """The table after the install: the user's keys, with mem's set."""
    wanted = dict(current or {})
    wanted["command"], wanted["args"] = fields["command"], fields["args"]
    if "env" in fields:
        wanted["env"] = {**(wanted.get("env") or {}), **fields["env"]}
    if "env_vars" in fields:
        have = list(wanted.get("env_vars") or [])
        wanted["env_vars"] = have + [n for n in fields["env_vars"] if n not in have]
    return wanted


def _check_identity(path: Path, current: dict[str, Any], launch: Launch) -> None:
    env = current.get("env")
    if not isinstance(env, dict) or not launch.flags:
        return
    for name, flag in IDENTITY_ENV.items():
        pinned = next((f[len(flag):] for f in launch.flags if f.startswith(flag)), None)
        if name in env and pinned is not None and str(env[name]) != pinned:
            raise UsageError(
                f"{path}: [mcp_servers.mem] sets {name} = {env[name]!r} in env, but mem "
                f"resolves {pinned!r} here, which the hooks would use: install with "
                f"{name} set to it (or take it out of the table); nothing was changed")


def install_server(path: Path, launch: Launch, dry_run: bool = False) -> HookInstallResult:
    import tomlkit

    text, doc = _read_toml(path)
    fields = server_fields(launch)
    servers = doc.get("mcp_servers")
    current = servers.get("mem") if isinstance(servers, dict) else None
    if current is not None and not isinstance(current, dict):
        raise UsageError(f"{path}: mcp_servers.mem is not a table; edit it by hand, nothing "
                         "was changed")
    if current is not None:
        _check_identity(path, current, launch)
    if current is None:
        # Codex waits 10 s for a server by default; mem's may first wait for its key
        # command (up to 30 s). A default only: a value the user sets is theirs.
        fields["startup_timeout_sec"] = STARTUP_TIMEOUT_S
    wanted = _wanted(current, fields) if current is not None else dict(fields)
    if current == wanted:
        return HookInstallResult(str(path), False, (), None)
    if current is None:
        table = tomlkit.dumps({"mcp_servers": {"mem": fields}})
        new = text + ("\n" if text and not text.endswith("\n") else "") + \
            ("\n" if text.strip() else "") + f"{MARK}\n{table}"
    else:
        edited = tomlkit.parse(text)
        server = edited["mcp_servers"]["mem"]
        owned: dict[str, Any] = {"command": fields["command"], "args": fields["args"]}
        if "env_vars" in fields:
            owned["env_vars"] = wanted["env_vars"]
        env = server.get("env")
        if "env" in fields and env is None:
            owned["env"] = tomlkit.inline_table()
            owned["env"].update(fields["env"])
        _set_keys(server, owned)
        if "env" in fields and env is not None:
            _set_keys(env, fields["env"])
        new = tomlkit.dumps(edited)
    _check(path, new, doc, wanted)
    if dry_run:
        return HookInstallResult(str(path), True, ("mcp",), None)
    backup = hookbase.save_bytes(path, new.encode(), text.encode() if path.exists() else None)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def _set_keys(table: Any, values: dict[str, Any]) -> None:
    """Set keys of a tomlkit table in place; a new key goes after the table's last key,
    above the comments and blank lines that end its text (they belong to the next
    table's header)."""
    body = getattr(getattr(table, "value", None), "body", None)
    trailing: list[Any] = []
    if isinstance(body, list):
        while body and body[-1][0] is None:
            trailing.insert(0, body.pop())
    for key, value in values.items():
        table[key] = value
    if isinstance(body, list):
        body.extend(trailing)


def _without_table(text: str) -> str:
    """The text without [mcp_servers.mem] and its sub-tables (and mem's mark above it);
    the comments and blank lines above the next table stay (they are that table's)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not HEADER_RE.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        if out and out[-1].strip() == MARK:
            out.pop()
        j = i + 1
        while j < len(lines) and (not ANY_HEADER_RE.match(lines[j])
                                  or HEADER_RE.match(lines[j])):
            j += 1
        # The comment block (and blank lines) right above the next header is that table's.
        k = j
        while k > i + 1 and (lines[k - 1].lstrip().startswith("#") or not lines[k - 1].strip()):
            k -= 1
        out.extend(lines[k:j])
        i = j
    while out and not out[-1].strip():
        out.pop()
    return "".join(out)


def uninstall_server(path: Path, dry_run: bool = False) -> HookInstallResult:
    text, doc = _read_toml(path)
    servers = doc.get("mcp_servers")
    if not isinstance(servers, dict) or "mem" not in servers:
        return HookInstallResult(str(path), False, (), None)
    new = _without_table(text)
    _check(path, new, doc, None)
    if dry_run:
        return HookInstallResult(str(path), True, ("mcp",), None)
    backup = hookbase.save_bytes(path, new.encode(), text.encode())
    return HookInstallResult(str(path), True, ("mcp",), backup)


def _check(path: Path, text: str, before: dict[str, Any],
           wanted: dict[str, Any] | None) -> None:
    """The edited file must parse, hold exactly `wanted` as mem's server (or none), and
    everything else as it was."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        doc = {"invalid": True}
    expected = {k: v for k, v in before.items() if k != "mcp_servers"}
    others = {k: v for k, v in (before.get("mcp_servers") or {}).items() if k != "mem"}
    if wanted is not None:
        others["mem"] = wanted
    if others:
        expected["mcp_servers"] = others
    got = dict(doc)
    if "mcp_servers" in got and not got["mcp_servers"] and "mcp_servers" not in expected:
        del got["mcp_servers"]
    if got != expected:
        raise UsageError(f"{path}: mem's [mcp_servers.mem] table could not be edited safely; "
                         "edit it by hand, nothing was changed")


# --- config.toml: [features] codex_hooks ------------------------------------------------------
# Codex from 0.114.0 to 0.123.x runs hooks only with `[features] codex_hooks = true`; later
# releases run them by default (and call the key `hooks`, `codex_hooks` staying an alias).
# `mem setup` adds the key for such a release, with mem's mark as its comment, and takes
# out only a key that carries the mark: a flag the user wrote is theirs, whatever it says.

FEATURE_KEYS = ("hooks", "codex_hooks")  # the current name first
FLAG = "codex_hooks"  # the name the releases that need it know
FLAG_MARK = "# added by mem setup: Codex runs hooks without it from 0.124.0"
FLAG_ENTRY = "features.codex_hooks"


def hooks_feature(doc: dict[str, Any], keys: tuple[str, ...] = FEATURE_KEYS) -> bool | None:
    """What a parsed config.toml says of Codex's hooks (under any of `keys`): on, off, or
    nothing (None)."""
    features = doc.get("features")
    if isinstance(features, dict):
        for key in keys:
            if isinstance(features.get(key), bool):
                return bool(features[key])
    return None


def read_config(path: Path) -> dict[str, Any]:
    """config.toml parsed ({} when absent); UsageError when it is not valid TOML."""
    return _read_toml(path)[1]


def _features(edited: Any, path: Path) -> Any:
    """The [features] table of a parsed config.toml, or None; UsageError when it is written
    in another form (inline, dotted keys) that mem does not edit."""
    from tomlkit.items import Table

    features = edited.get("features")
    if features is not None and (not isinstance(features, Table) or features.is_super_table()):
        raise UsageError(f"{path}: [features] is not a plain table; add `codex_hooks = true` "
                         "under it by hand, nothing was changed")
    return features


def flag_is_ours(path: Path) -> bool:
    """Whether config.toml holds the flag that `mem setup` added (its mark beside it)."""
    import tomlkit

    text, doc = _read_toml(path)
    features = doc.get("features")
    if not isinstance(features, dict) or FLAG not in features:
        return False
    item = tomlkit.parse(text)["features"].item(FLAG)
    return bool(item.trivia.comment.strip() == FLAG_MARK)


def set_hooks_flag(path: Path, dry_run: bool = False) -> HookInstallResult:
    """Turn Codex's hooks on with `[features] codex_hooks = true`, unless config.toml sets
    that key already (the user's choice stands, on or off; the releases that need it do
    not know the newer name `hooks`)."""
    import tomlkit

    text, doc = _read_toml(path)
    if hooks_feature(doc, (FLAG,)) is not None:
        return HookInstallResult(str(path), False, (), None)
    edited = tomlkit.parse(text)
    features = _features(edited, path)
    value = tomlkit.item(True)
    value.comment(FLAG_MARK)
    if features is None:
        features = tomlkit.table()
        features.comment(FLAG_MARK)  # the table is mem's too: it goes with the key
        features[FLAG] = value
        edited["features"] = features
    else:
        _set_keys(features, {FLAG: value})
    new = tomlkit.dumps(edited)
    expected = dict(doc)
    expected["features"] = {**(doc.get("features") or {}), FLAG: True}
    _check_flag(path, new, expected)
    if dry_run:
        return HookInstallResult(str(path), True, (FLAG_ENTRY,), None)
    backup = hookbase.save_bytes(path, new.encode(), text.encode() if path.exists() else None)
    return HookInstallResult(str(path), True, (FLAG_ENTRY,), backup)


def unset_hooks_flag(path: Path, dry_run: bool = False) -> HookInstallResult:
    """Take out the flag `mem setup` added (and its [features] table, when mem made it
    and nothing else is in it); a flag without mem's mark stays."""
    import tomlkit

    if not path.exists() or not flag_is_ours(path):
        return HookInstallResult(str(path), False, (), None)
    text, doc = _read_toml(path)
    edited = tomlkit.parse(text)
    features = edited["features"]
    del features[FLAG]
    expected = dict(doc)
    expected["features"] = {k: v for k, v in doc["features"].items() if k != FLAG}
    if not len(features) and features.trivia.comment.strip() == FLAG_MARK:
        del edited["features"]
        del expected["features"]
    new = tomlkit.dumps(edited)
    if text.endswith("\n"):  # the blank line that went before mem's table goes with it
        new = new.rstrip("\n") + "\n" if new.strip() else ""
    _check_flag(path, new, expected)
    if dry_run:
        return HookInstallResult(str(path), True, (FLAG_ENTRY,), None)
    backup = hookbase.save_bytes(path, new.encode(), text.encode())
    return HookInstallResult(str(path), True, (FLAG_ENTRY,), backup)


def _check_flag(path: Path, text: str, expected: dict[str, Any]) -> None:
    """The edited file must parse to exactly what was meant."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        doc = {"invalid": True}
    if doc != expected:
        raise UsageError(f"{path}: [features] could not be edited safely; edit it by hand, "
                         "nothing was changed")
