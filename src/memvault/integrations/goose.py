"""Goose: mem's MCP server as a stdio extension in its config.yaml
($XDG_CONFIG_HOME/goose/config.yaml, ~/.config/goose/config.yaml): `extensions.mem`, in
the shape Goose's own ExtensionConfig reads (`type: stdio`, `name`, `description`, `cmd`,
`args`, `envs`, `timeout` in seconds, and `enabled`).

The file is YAML its user may have written by hand, with comments. mem edits its text the
way jsonedit.py edits JSON: only the lines of its own entry are added (after the last of
`extensions:`, at that block's indentation), replaced or taken out; everything else stays
byte for byte, and each edit is parsed again and compared with what was meant before it
is saved. A file mem cannot edit so (`extensions` written in flow style, say) is left as
it is, with one line.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations import hookbase
from memvault.integrations.launch import Launch, refuse_forwarding
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

NAME = "goose"
WHAT = "Goose config"
EVENTS: tuple[str, ...] = ()
KEY = "mem"
TIMEOUT_S = 300  # Goose's default for an extension
DESCRIPTION = "mem: the user's encrypted memory (search, store, brief)"
_HEAD = re.compile(r"^extensions:[ \t]*(#.*)?$")


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "goose"


def settings_path(scope: str, explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit
    if scope != "user":
        raise UsageError("Goose keeps its extensions for the user only: use the user scope",
                         field="scope")
    return config_dir() / "config.yaml"


ours = hookbase.hook_owner(NAME)


def server_entry(launch: Launch) -> dict[str, Any]:
    program, *rest = launch.argv("mcp")
    return {"enabled": True, "type": "stdio", "name": KEY, "description": DESCRIPTION,
            "cmd": program, "args": rest, "envs": launch.env_map, "timeout": TIMEOUT_S}


def _load(text: str, path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise UsageError(f"{path} is not valid {WHAT} YAML{at}; fix it first, nothing was "
                         "changed") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("extensions") or {}, dict):
        raise UsageError(f"{path} does not look like {WHAT} (extensions); nothing was "
                         "changed")
    return doc


def _read(path: Path) -> tuple[str, bytes | None, dict[str, Any]]:
    if not path.exists():
        return "", None, {}
    try:
        data = path.read_bytes()
        text = data.decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} cannot be read as text ({exc}); nothing was "
                         "changed") from None
    return text, data, _load(text, path)


def _scalar(value: Any) -> str:
    """A YAML scalar: JSON's double-quoted strings, numbers and booleans are YAML's too."""
    return json.dumps(value)


def _block(entry: dict[str, Any], indent: str) -> list[str]:
    """mem's entry as YAML lines under `extensions:`, `indent` deep."""
    inner = indent * 2
    lines = [f"{indent}{KEY}:"]
    for key, value in entry.items():
        if isinstance(value, list):
            lines.append(f"{inner}{key}:" + ("" if value else " []"))
            lines += [f"{inner}- {_scalar(v)}" for v in value]
        elif isinstance(value, dict):
            lines.append(f"{inner}{key}:" + ("" if value else " {}"))
            lines += [f"{inner}{indent}{_scalar(k)}: {_scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{inner}{key}: {_scalar(value)}")
    return lines


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _section(lines: list[str]) -> tuple[int, int] | None:
    """The `extensions:` line and the end of its block (the next top-level line)."""
    head = next((i for i, line in enumerate(lines) if _HEAD.match(line.rstrip("\r\n"))),
                None)
    if head is None:
        return None
    end = head + 1
    for i in range(head + 1, len(lines)):
        if _content(lines[i]) and not lines[i][0].isspace():
            break
        if _content(lines[i]):
            end = i + 1
    return head, end


def _indent(lines: list[str], head: int, end: int) -> str:
    for line in lines[head + 1:end]:
        if _content(line):
            return line[: len(line) - len(line.lstrip())]
    return "  "


def _ours_at(lines: list[str], head: int, end: int, indent: str) -> list[tuple[int, int]]:
    """Where each `mem:` child of extensions is: its first line and the end of its lines."""
    spans = []
    for i in range(head + 1, end):
        if re.match(rf"^{re.escape(indent)}{KEY}:[ \t]*(#.*)?$", lines[i].rstrip("\r\n")):
            stop = i + 1
            for j in range(i + 1, end):
                line = lines[j]
                if _content(line) and len(line) - len(line.lstrip()) <= len(indent):
                    break
                if _content(line):
                    stop = j + 1
            spans.append((i, stop))
    return spans


def _edit(text: str, entry: dict[str, Any] | None, path: Path) -> str:
    """The text with mem's entry set to `entry` (taken out when None)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    found = _section(lines)
    if found is None:
        if entry is None:
            return text
        return "".join(lines) + "extensions:\n" + \
            "".join(line + "\n" for line in _block(entry, "  "))
    head, end = found
    indent = _indent(lines, head, end)
    spans = _ours_at(lines, head, end, indent)
    new = [line + "\n" for line in _block(entry, indent)] if entry is not None else []
    if spans:
        first = spans[0][0]
        for start, stop in reversed(spans):
            del lines[start:stop]
        lines[first:first] = new
    else:
        lines[end:end] = new
    section = _section(lines) if entry is None else None
    if section is not None and section[1] == section[0] + 1 and "#" not in lines[section[0]]:
        del lines[section[0]]  # the block that mem's entry alone filled goes with it
    return "".join(lines)


def _save(path: Path, text: str, before: bytes | None, wanted: Any,
          dry_run: bool) -> str | None:
    import yaml

    try:
        got = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError:
        got = None
    if (got or {}) != wanted:
        raise UsageError(f"{path}: mem's entry in this {WHAT} file could not be edited "
                         "safely (extensions in flow style?); edit it by hand, nothing was "
                         "changed")
    return None if dry_run else hookbase.save_bytes(path, text.encode(), before)


def install(path: Path, scope: str = "user", mcp: bool = False,
            dry_run: bool = False) -> HookInstallResult:
    if not mcp:
        return HookInstallResult(str(path), False, (), None)
    launch = resolve_launch(scope)
    refuse_forwarding(launch, "Goose")
    text, before, doc = _read(path)
    entry = server_entry(launch)
    if (doc.get("extensions") or {}).get(KEY) == entry:
        return HookInstallResult(str(path), False, (), None)
    wanted = {**doc, "extensions": {**(doc.get("extensions") or {}), KEY: entry}}
    backup = _save(path, _edit(text, entry, path), before, wanted, dry_run)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def uninstall(path: Path, scope: str = "user", mcp: bool = False,
              dry_run: bool = False) -> HookInstallResult:
    if not mcp:
        return HookInstallResult(str(path), False, (), None)
    text, before, doc = _read(path)
    extensions = doc.get("extensions") or {}
    if KEY not in extensions:
        return HookInstallResult(str(path), False, (), None)
    rest = {k: v for k, v in extensions.items() if k != KEY}
    new = _edit(text, None, path)
    wanted = {**doc, "extensions": rest or None}
    if _section(new.splitlines(keepends=True)) is None:
        wanted.pop("extensions")
    backup = _save(path, new, before, wanted, dry_run)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def wired_in() -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    path = settings_path("user")
    _, _, doc = _read(path)
    entry = (doc.get("extensions") or {}).get(KEY)
    if not isinstance(entry, dict):
        return path, (), (), True, None
    args = entry.get("args")
    argv = [str(entry.get("cmd", "")), *map(str, args if isinstance(args, list) else [])]
    return path, (), tuple(argv), True, path
