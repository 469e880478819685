"""Codex CLI: the hook handler, the hooks.json installer and the config.toml MCP server.

Codex runs a hook's `command` through a shell, caps SessionEnd hooks at 3 seconds, and
reads hooks.json in Claude Code's shape (event -> [{matcher?, hooks: [handler]}]).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from memvault.errors import UsageError
from memvault.integrations import hookbase
from memvault.integrations.hookbase import Agent, hook_specific
from memvault.model.results import HookInstallResult

NAME = "codex"
EVENTS = ("SessionStart", "SessionEnd", "PreCompact")
MARKER = "hook codex"
SESSION_END_TIMEOUT_S = 3  # Codex's own cap: a longer timeout is cut to it, with a warning
AGENT = Agent(
    name=NAME, ingest_format="codex",
    brief_events=frozenset({"SessionStart"}),
    # Stop (the end of each turn) is handled too, for those who add it themselves.
    ingest_events=frozenset({"SessionEnd", "PreCompact", "Stop"}),
    answer=hook_specific,
)
TABLE = "[mcp_servers.mem]"
# The table as mem writes it, up to the next table header (or the end of the file).
TABLE_RE = re.compile(r"(?m)^(# Added by `mem hooks install codex --mcp`\.\n)?"
                      r"\[mcp_servers\.mem\][^\n]*\n(?:(?!\[)[^\n]*(?:\n|\Z))*")


def run(settings_factory: Any, stdin: BinaryIO | None = None,
        stdout: TextIO | None = None) -> None:
    hookbase.run(AGENT, settings_factory, stdin, stdout)


def handle(settings_factory: Any, stdin: str | bytes) -> str | None:
    return hookbase.handle(AGENT, settings_factory, stdin)


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


def ours(hook: Any) -> bool:
    return isinstance(hook, dict) and MARKER in str(hook.get("command", ""))


def hook_entry(command: list[str], event: str) -> dict[str, Any]:
    timeout = SESSION_END_TIMEOUT_S if event == "SessionEnd" else hookbase.HOOK_TIMEOUT_S
    return {"type": "command", "command": hookbase.shell_line([*command, "hook", NAME]),
            "timeout": timeout}


def _command(scope: str) -> list[str]:
    return hookbase.mem_command() if scope == "user" else hookbase.portable_command()


def install(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    command = _command(scope)
    result = hookbase.install_json(path, "Codex hooks",
                                   {e: hook_entry(command, e) for e in EVENTS}, ours)
    if not mcp:
        return result
    server = install_server(config_path(scope), command)
    return replace(result, mcp=server)


def uninstall(path: Path, scope: str = "user", mcp: bool = False) -> HookInstallResult:
    result = hookbase.uninstall_json(path, "Codex hooks", ours)
    if not mcp:
        return result
    server = uninstall_server(config_path(scope))
    return replace(result, mcp=server)


# --- config.toml: [mcp_servers.mem] ---------------------------------------------------------
# The standard library reads TOML but does not write it: mem's table is written as text
# (TOML's basic strings are JSON's), replaced as a block, and the result is parsed again
# before anything is saved.


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


def server_table(command: list[str]) -> str:
    program, *rest = command
    return (f"# Added by `mem hooks install codex --mcp`.\n{TABLE}\n"
            f"command = {json.dumps(program)}\nargs = {json.dumps([*rest, 'mcp'])}\n")


def install_server(path: Path, command: list[str]) -> HookInstallResult:
    text, doc = _read_toml(path)
    program, *rest = command
    wanted = {"command": program, "args": [*rest, "mcp"]}
    current = doc.get("mcp_servers", {}).get("mem") if isinstance(
        doc.get("mcp_servers"), dict) else None
    if current == wanted:
        return HookInstallResult(str(path), False, (), None)
    table = server_table(command)
    if current is None:
        new = text + ("\n" if text and not text.endswith("\n") else "") + \
            ("\n" if text.strip() else "") + table
    else:
        new, count = TABLE_RE.subn(lambda _: table, text, count=1)
        if count != 1:
            raise UsageError(f"{path}: cannot find the {TABLE} table to replace; edit it "
                             "by hand, nothing was changed")
    _check(path, new, wanted)
    backup = hookbase.save_bytes(path, new.encode(), text.encode() if path.exists() else None)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def uninstall_server(path: Path) -> HookInstallResult:
    text, doc = _read_toml(path)
    servers = doc.get("mcp_servers")
    if not isinstance(servers, dict) or "mem" not in servers:
        return HookInstallResult(str(path), False, (), None)
    new, count = TABLE_RE.subn("", text, count=1)
    if count != 1:
        raise UsageError(f"{path}: cannot find the {TABLE} table to remove; edit it by "
                         "hand, nothing was changed")
    _check(path, new, None)
    backup = hookbase.save_bytes(path, new.encode(), text.encode())
    return HookInstallResult(str(path), True, ("mcp",), backup)


def _check(path: Path, text: str, wanted: dict[str, Any] | None) -> None:
    """The edited file must parse and hold exactly what was meant (or nothing of mem's)."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        doc = {"invalid": True}
    servers = doc.get("mcp_servers", {})
    if doc.get("invalid") or (servers.get("mem") if isinstance(servers, dict) else None) \
            != wanted:
        raise UsageError(f"{path}: mem's {TABLE} table could not be edited safely; edit "
                         "it by hand, nothing was changed")
