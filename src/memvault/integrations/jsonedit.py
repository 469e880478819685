"""Edits of an agent's JSON (or JSONC) settings that keep every byte mem does not own.

OpenCode's opencode.jsonc, Cursor's mcp.json and hooks.json, Copilot CLI's
mcp-config.json and Cline's MCP settings are the user's files, often written by hand
with comments and trailing commas. mem parses them here (JSON with `//` and `/* */`
comments and trailing commas) into nodes that know where each value is in the text, and
changes the text only where its own entry goes: a member added after the last one (or an
item after the last item), a member or item taken out with the comma that came with it.
Everything else stays byte for byte, so an install followed by an undo gives back the
file as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.errors import UsageError
from memvault.integrations.launch import Launch, refuse_forwarding
from memvault.integrations.launch import resolve as resolve_launch
from memvault.model.machine_results import HookInstallResult

Path_ = tuple[str | int, ...]
_WS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')


class Invalid(ValueError):
    """Text that is not JSON (with comments): the message says where."""


@dataclass
class Member:
    key: str
    key_start: int
    value: Node
    comma: int | None = None  # where the comma after it is, if one is


@dataclass
class Node:
    kind: str  # "object", "array" or "scalar"
    start: int
    end: int
    value: Any = None  # a scalar's
    members: list[Member] = field(default_factory=list)  # an object's (an array's items)


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line} column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def fail(self, what: str) -> Invalid:
        return Invalid(f"{what} at {_where(self.text, self.pos)}")

    def skip(self) -> None:
        match = _WS.match(self.text, self.pos)
        self.pos = match.end() if match else self.pos
        if self.text.startswith("/*", self.pos):
            raise self.fail("an unclosed comment")

    def value(self, depth: int = 0) -> Node:
        if depth > 200:
            raise self.fail("nesting too deep")
        self.skip()
        text, start = self.text, self.pos
        if start >= len(text):
            raise self.fail("a value expected")
        char = text[start]
        if char in "{[":
            return self.container(char, depth)
        if char == '"':
            return Node("scalar", start, self.string_end(), json.loads(text[start:self.pos]))
        for word, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, start):
                self.pos += len(word)
                return Node("scalar", start, self.pos, value)
        match = _NUMBER.match(text, start)
        if match is None:
            raise self.fail("a value expected")
        self.pos = match.end()
        return Node("scalar", start, self.pos, json.loads(match.group()))

    def string_end(self) -> int:
        match = _STRING.match(self.text, self.pos)
        if match is None:
            raise self.fail("an invalid string")
        self.pos = match.end()
        return self.pos

    def container(self, opening: str, depth: int) -> Node:
        closing = "}" if opening == "{" else "]"
        node = Node("object" if opening == "{" else "array", self.pos, -1)
        self.pos += 1
        while True:
            self.skip()
            if self.text.startswith(closing, self.pos):
                break
            key, key_start = "", self.pos
            if opening == "{":
                if not self.text.startswith('"', self.pos):
                    raise self.fail("a key expected")
                key = json.loads(self.text[key_start:self.string_end()])
                self.skip()
                if not self.text.startswith(":", self.pos):
                    raise self.fail("':' expected")
                self.pos += 1
            member = Member(key, key_start, self.value(depth + 1))
            node.members.append(member)
            self.skip()
            if self.text.startswith(",", self.pos):
                member.comma = self.pos
                self.pos += 1
            elif not self.text.startswith(closing, self.pos):
                raise self.fail(f"',' or '{closing}' expected")
        self.pos += 1
        node.end = self.pos
        return node


def parse(text: str) -> Node:
    """The document's root node; Invalid when the text is not JSON with comments."""
    parser = _Parser(text)
    root = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.fail("text after the document")
    return root


def loads(text: str) -> Any:
    """The document as Python values ({} for an empty file)."""
    return python(parse(text)) if text.strip() else {}


def python(node: Node) -> Any:
    if node.kind == "object":
        return {m.key: python(m.value) for m in node.members}
    if node.kind == "array":
        return [python(m.value) for m in node.members]
    return node.value


def find(root: Node, path: Path_) -> Node | None:
    node: Node | None = root
    for step in path:
        if node is None:
            return None
        if isinstance(step, int):
            node = node.members[step].value if node.kind == "array" and \
                step < len(node.members) else None
        else:
            node = next((m.value for m in reversed(node.members) if m.key == step), None) \
                if node.kind == "object" else None
    return node


def _indent_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    line = text[start:pos]
    return line if not line.strip() else line[: len(line) - len(line.lstrip())]


def _dump(value: Any, indent: str, multiline: bool) -> str:
    if not multiline:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n" + indent)


def insert(text: str, path: Path_, key: str | None, value: Any) -> str:
    """`value` added as the last member `key` of the object at `path` (as the last item
    of the array there when `key` is None); the object or array must exist."""
    root = parse(text) if text.strip() else None
    node = find(root, path) if root is not None else None
    if node is None or node.kind != ("array" if key is None else "object"):
        raise Invalid(f"no {'array' if key is None else 'object'} at {'.'.join(map(str, path))}")
    name = "" if key is None else json.dumps(key, ensure_ascii=False) + ": "
    if node.members:
        last = node.members[-1]
        at = last.key_start
        multiline = "\n" in text[node.start:last.key_start]
        indent = _indent_at(text, at) if multiline else ""
        if multiline and not indent and text[at - 1:at] != "\n":
            multiline = False
        gap = f",\n{indent}" if multiline else ", "
        return text[:last.value.end] + gap + name + _dump(value, indent, multiline) + \
            text[last.value.end:]
    outer = _indent_at(text, node.start)
    indent = outer + "  "
    entry = f"\n{indent}{name}{_dump(value, indent, True)}"
    inner = text[node.start + 1:node.end - 1]
    tail = f"\n{outer}" if not inner.strip() else ""
    return text[:node.start + 1] + entry + tail + (inner if inner.strip() else "") + \
        text[node.end - 1:]


def replace(text: str, path: Path_, value: Any) -> str:
    """The value at `path` (which exists) replaced, laid out at its place's indent."""
    node = find(parse(text), path)
    if node is None:
        raise Invalid(f"nothing at {'.'.join(map(str, path))}")
    multiline = "\n" in text[node.start:node.end] or node.kind != "scalar"
    indent = _indent_at(text, node.start)
    return text[:node.start] + _dump(value, indent, multiline) + text[node.end:]


def remove(text: str, path: Path_, index: int) -> str:
    """The member (or item) number `index` of the container at `path` taken out, with
    the comma and the layout that came with it, as insert() made them."""
    node = find(parse(text), path)
    if node is None or index >= len(node.members):
        raise Invalid(f"nothing at {'.'.join(map(str, path))}[{index}]")
    members, member = node.members, node.members[index]
    end = member.value.end
    if index > 0:
        prev = members[index - 1]
        between = text[prev.value.end:member.key_start]
        if between.replace(",", "", 1).strip() == "":
            return text[:prev.value.end] + text[end:]
        # A comment between them stays; this member's own comma (or the one before it,
        # when it is the last) goes with it.
        if member.comma is not None:
            return text[:member.key_start] + text[member.comma + 1:]
        assert prev.comma is not None
        return text[:prev.comma] + text[prev.comma + 1:member.key_start] + text[end:]
    if len(members) > 1:
        return text[:member.key_start] + text[members[1].key_start:]
    inner = text[node.start + 1:member.key_start] + text[(member.comma or end - 1) + 1:
                                                          node.end - 1]
    if not inner.strip():
        return text[:node.start + 1] + text[node.end - 1:]
    return text[:member.key_start] + text[(member.comma + 1 if member.comma else end):]


# --- mem's entries in an agent's file ---------------------------------------------------------


def read(path: Path, what: str) -> tuple[str, bytes | None]:
    """The file's text ("" when absent) and its bytes (None when absent); UsageError, in
    one line, when it is not JSON (comments and trailing commas allowed) or not an object:
    nothing is changed then."""
    if not path.exists():
        return "", None
    try:
        data = path.read_bytes()
        text = data.decode()
        if text.strip() and parse(text).kind != "object":
            raise Invalid("not a JSON object")
    except (OSError, UnicodeDecodeError, Invalid) as exc:
        raise UsageError(f"{path} is not valid {what} JSON ({exc}); fix it first, nothing "
                         "was changed") from None
    return text, data


def _keys(node: Node | None, key: str) -> list[int]:
    """The places of the members named `key` (JSON keeps the last; mem takes out all)."""
    return [i for i, m in enumerate(node.members) if m.key == key] \
        if node is not None and node.kind == "object" else []


def set_member(text: str, path: Path_, key: str, value: Any) -> str:
    """`path.key` set to `value`: replaced where it stands, or added (with the objects on
    `path` that are missing); the text unchanged when it holds that already."""
    if not text.strip():
        text = "{}\n"
    root = parse(text)
    for depth in range(len(path) + 1):
        node = find(root, path[:depth])
        if node is None or node.kind != "object":
            where = ".".join(map(str, path[:depth])) or "the file"
            raise Invalid(f"{where} is not an object")
        if depth == len(path):
            break
        if find(node, (path[depth],)) is None:  # the rest of the path is new: one member
            new: Any = {key: value}
            for step in reversed(path[depth + 1:]):
                new = {step: new}
            return insert(text, path[:depth], str(path[depth]), new)
    places = _keys(find(root, path), key)
    if not places:
        return insert(text, path, key, value)
    for index in reversed(places[:-1]):  # earlier copies go: the file says it once
        text = remove(text, path, index)
    current = find(parse(text), (*path, key))
    if current is not None and python(current) == value:
        return text
    return replace(text, (*path, key), value)


def drop_member(text: str, path: Path_, key: str) -> str:
    """`path.key` taken out (every copy); an object on `path` that this leaves empty goes
    too (the root stays)."""
    if not text.strip():
        return text
    for index in reversed(_keys(find(parse(text), path), key)):
        text = remove(text, path, index)
    while path:
        node = find(parse(text), path)
        if node is None or node.members:
            break
        *rest, last = path
        parent = tuple(rest)
        for index in reversed(_keys(find(parse(text), parent), str(last))):
            text = remove(text, parent, index)
        path = parent
    return text


def save(path: Path, text: str, before: bytes | None, wanted: Any, what: str,
         dry_run: bool) -> str | None:
    """Write the edited text (after a backup of what the file held), once it parses to
    exactly `wanted`; UsageError, nothing written, when it does not. The backup's path."""
    from memvault.integrations.hookbase import save_bytes

    try:
        got = loads(text)
    except Invalid:
        got = None
    if got != wanted:
        raise UsageError(f"{path}: mem's entry in this {what} file could not be edited "
                         "safely; edit it by hand, nothing was changed")
    return None if dry_run else save_bytes(path, text.encode(), before)


def install_server(path: Path, what: str, container: Path_, entry: dict[str, Any],
                   dry_run: bool = False) -> HookInstallResult:
    """mem's MCP server as `container.mem` of a JSON settings file (`mcpServers`, `mcp`),
    everything else in it kept byte for byte; nothing written when it is there as is."""
    text, before = read(path, what)
    doc = loads(text)
    if _at(doc, container) == entry:
        return HookInstallResult(str(path), False, (), None)
    try:
        new = set_member(text, container, "mem", entry)
    except Invalid as exc:
        raise UsageError(f"{path}: {exc}, where mem's server goes; nothing was "
                         "changed") from None
    backup = save(path, new, before, _with(doc, container, entry), what, dry_run)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def uninstall_server(path: Path, what: str, container: Path_, dry_run: bool = False
                     ) -> HookInstallResult:
    text, before = read(path, what)
    doc = loads(text)
    if _at(doc, container) is None:
        return HookInstallResult(str(path), False, (), None)
    # The servers' object goes when that empties it (mem added it beside the user's
    # settings), unless it is all the file holds: the agent's own (Cline writes
    # `{"mcpServers": {}}`), or the one mem made.
    alone = len(doc) == 1 and len(container) == 1
    new = drop_member(text, container, "mem") if not alone else text
    if alone:
        for index in reversed(_keys(find(parse(new), container), "mem")):
            new = remove(new, container, index)
    backup = save(path, new, before, _with(doc, container, None, not alone), what, dry_run)
    return HookInstallResult(str(path), True, ("mcp",), backup)


def _at(doc: Any, container: Path_) -> Any:
    """What `container.mem` holds in a parsed document, or None."""
    for step in (*container, "mem"):
        doc = doc.get(step) if isinstance(doc, dict) else None
    return doc


def _with(doc: Any, container: Path_, entry: Any, prune: bool = False) -> Any:
    """The document with `container.mem` set to `entry` (taken out when None; with
    `prune`, an object on the way that this empties goes too), as the edit must parse."""
    import copy

    doc = copy.deepcopy(doc)
    chain = [doc]
    for step in container:
        nxt = chain[-1].get(step) if isinstance(chain[-1], dict) else None
        if not isinstance(nxt, dict):
            if entry is None:
                return doc
            nxt = chain[-1][step] = {}
        chain.append(nxt)
    if entry is not None:
        chain[-1]["mem"] = entry
        return doc
    chain[-1].pop("mem", None)
    for depth in range(len(container), 0, -1):
        if chain[depth] or not prune:
            break
        del chain[depth - 1][container[depth - 1]]
    return doc


def server_at(doc: Any, container: Path_) -> Any:
    """mem's server entry in a parsed document (`container.mem`), or None."""
    return _at(doc, container)


def server_wired(path: Path, what: str, container: Path_
                 ) -> tuple[Path, tuple[str, ...], tuple[str, ...], bool, Path | None]:
    """What an agent with mem's server only has of mem's (wiring.Wired's fields): no
    hooks; the server's command line (`command` and `args`, or `command` as a list)."""
    server = _at(loads(read(path, what)[0]), container)
    if not isinstance(server, dict):
        return path, (), (), True, None
    command, args = server.get("command"), server.get("args")
    argv = [str(c) for c in command] if isinstance(command, list) else \
        [str(command), *map(str, args if isinstance(args, list) else [])]
    return path, (), tuple(argv), True, path


Installer = Callable[..., HookInstallResult]


def server_installers(what: str, container: Path_,
                      entry: Callable[[Launch], dict[str, Any]],
                      names_variables: str | None = None) -> tuple[Installer, Installer]:
    """`install` and `uninstall` for an agent mem gives its MCP server only, in a JSON
    file (OpenCode, Copilot CLI, Cline): with `mcp` the entry `entry(launch)` made for
    the scope, without it nothing. `names_variables`: the agent (as a user calls it)
    when it passes a server only the variables its entry names, so a key held in
    MEM_MASTER_KEY is refused rather than written into its file (refuse_forwarding)."""
    def install(path: Path, scope: str = "user", mcp: bool = False,
                dry_run: bool = False) -> HookInstallResult:
        if not mcp:
            return HookInstallResult(str(path), False, (), None)
        launch = resolve_launch(scope)
        if names_variables is not None:
            refuse_forwarding(launch, names_variables)
        return install_server(path, what, container, entry(launch), dry_run)

    def uninstall(path: Path, scope: str = "user", mcp: bool = False,
                  dry_run: bool = False) -> HookInstallResult:
        if not mcp:
            return HookInstallResult(str(path), False, (), None)
        return uninstall_server(path, what, container, dry_run)

    return install, uninstall


# --- mem's hooks in an agent's file -------------------------------------------------------------
# Two shapes: Claude Code's, which Qwen Code shares (event -> [{matcher?, hooks: [handler]}]),
# and Cursor's flat one (event -> [handler]). A handler is mem's by `ours`; an install
# replaces mem's where it stands and adds one where there is none, an uninstall takes out
# mem's only, and a group, an event or `hooks` only when that emptied it.


def _places(doc: Any, event: str, ours: Callable[[Any], bool], grouped: bool
            ) -> list[tuple[int, ...]]:
    """Where mem's handlers for `event` are: (item,) or (group, handler)."""
    items = (doc.get("hooks") or {}).get(event) if isinstance(doc, dict) else None
    out: list[tuple[int, ...]] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not grouped:
            if ours(item):
                out.append((i,))
            continue
        handlers = item.get("hooks") if isinstance(item, dict) else None
        for j, handler in enumerate(handlers if isinstance(handlers, list) else []):
            if ours(handler):
                out.append((i, j))
    return out


def _handler_path(event: str, place: tuple[int, ...]) -> Path_:
    return ("hooks", event, place[0]) if len(place) == 1 else \
        ("hooks", event, place[0], "hooks", place[1])


def _take_out(text: str, event: str, place: tuple[int, ...]) -> str:
    """One handler out; its group when that emptied it, the event and `hooks` likewise."""
    *container, index = _handler_path(event, place)
    text = remove(text, tuple(container), int(index))
    if len(place) == 2 and not python(find(parse(text), tuple(container))):  # type: ignore[arg-type]
        text = remove(text, ("hooks", event), place[0])
    if not python(find(parse(text), ("hooks", event))):  # type: ignore[arg-type]
        text = drop_member(text, ("hooks",), event)
    return text


def install_hooks(path: Path, what: str, entries: dict[str, dict[str, Any]],
                  ours: Callable[[Any], bool], grouped: bool, new_file: dict[str, Any],
                  dry_run: bool = False) -> HookInstallResult:
    """mem's handler for each event in `path` (a new file starts as `new_file`)."""
    text, before = read(path, what)
    if not text.strip():
        text = json.dumps(new_file, indent=2) + "\n"
    doc = loads(text)
    hooks = doc.get("hooks", {})
    if not isinstance(hooks, dict) or any(not isinstance(hooks.get(e, []), list)
                                          for e in entries):
        raise UsageError(f"{path} does not look like {what} settings (hooks); nothing was "
                         "changed")
    changed = []
    for event, entry in entries.items():
        places = _places(loads(text), event, ours, grouped)
        item = {"hooks": [entry]} if grouped else entry
        if len(places) == 1 and _value(loads(text), _handler_path(event, places[0])) == entry:
            continue
        if not places:
            if event in (loads(text).get("hooks") or {}):
                text = insert(text, ("hooks", event), None, item)
            else:
                text = set_member(text, ("hooks",), event, [item])
        else:
            for place in reversed(places[1:]):  # further copies go
                text = _take_out(text, event, place)
            text = replace(text, _handler_path(event, places[0]), entry)
        changed.append(event)
    if not changed:
        return HookInstallResult(str(path), False, (), None)
    wanted = _hooks_wanted(doc if before is not None else new_file, entries, ours, grouped)
    backup = save(path, text, before, wanted, what, dry_run)
    return HookInstallResult(str(path), True, tuple(changed), backup)


def uninstall_hooks(path: Path, what: str, ours: Callable[[Any], bool], grouped: bool,
                    dry_run: bool = False) -> HookInstallResult:
    text, before = read(path, what)
    doc = loads(text)
    hooks = doc.get("hooks")
    if before is None or not isinstance(hooks, dict):
        return HookInstallResult(str(path), False, (), None)
    removed = []
    for event in list(hooks):
        places = _places(loads(text), event, ours, grouped)
        for place in reversed(places):
            text = _take_out(text, event, place)
        if places:
            removed.append(event)
    if not removed:
        return HookInstallResult(str(path), False, (), None)
    backup = save(path, text, before, _hooks_wanted(doc, {}, ours, grouped), what, dry_run)
    return HookInstallResult(str(path), True, tuple(removed), backup)


def _value(doc: Any, path: Path_) -> Any:
    for step in path:
        try:
            doc = doc[step]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def _hooks_wanted(doc: Any, entries: dict[str, dict[str, Any]], ours: Callable[[Any], bool],
                  grouped: bool) -> Any:
    """The document as the edit must parse: mem's handlers out (and what that emptied),
    then one for each event of `entries`, where the first of mem's stood."""
    import copy

    doc = copy.deepcopy(doc)
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        hooks = None
    for event in list(hooks or {}):
        items = hooks[event]
        if not isinstance(items, list) or entries and event not in entries:
            continue
        first = _places(doc, event, ours, grouped)[:1]
        entry = entries.get(event)
        kept = []
        for i, item in enumerate(items):
            if not grouped:
                if not ours(item):
                    kept.append(item)
                elif entry is not None and first == [(i,)]:
                    kept.append(entry)
                continue
            handlers = item.get("hooks") if isinstance(item, dict) else None
            if not isinstance(handlers, list) or not any(ours(h) for h in handlers):
                kept.append(item)
                continue
            new = [entry if entry is not None and first == [(i, j)] else h
                   for j, h in enumerate(handlers)
                   if not ours(h) or entry is not None and first == [(i, j)]]
            if new:
                kept.append({**item, "hooks": new})
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    for event, entry in entries.items():
        if hooks is None:
            hooks = doc["hooks"] = {}
        items = hooks.setdefault(event, [])
        if not _places(doc, event, ours, grouped):
            items.append({"hooks": [entry]} if grouped else entry)
    if hooks is not None and not hooks and "hooks" in doc:
        del doc["hooks"]
    return doc
