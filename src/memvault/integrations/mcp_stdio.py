"""`mem mcp`'s stdin: every line a client sends is answered.

The SDK's stdio transport drops a line its parser or validator refuses (a lone surrogate
escape, nesting past its depth, a number out of range, a message missing its method...):
the client waits for an answer that never comes. Here stdin is read in front of it, line
by line and bounded: a line the SDK takes goes on to it unchanged, and any other line is
answered at once with a JSON-RPC error carrying the request's id when it can be read
(JSON-RPC 2.0: -32700 parse error, -32600 invalid request; id null when it cannot).
Imported only by `mem mcp`, with the SDK.
"""

import fcntl
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, cast

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

MAX_LINE = 1 << 20  # a tool's arguments are a few kilobytes; this is a client gone wrong
HEAD = 64 << 10  # what of an over-long line is read for its id (clients write it first)
RequestId = int | str
_SPACE = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{},]')
_DECODER = json.JSONDecoder(strict=False)  # a control character is no reason to stop


def screen(line: bytes, whole: bool = True) -> str | JSONRPCError | None:
    """What becomes of one line from the client: its text, for the SDK, when the SDK takes
    it; else the error that answers it; None for a blank line (nothing was asked).
    `whole` is False for a line cut at MAX_LINE bytes."""
    if not whole:
        head = line[:HEAD].decode("utf-8", "replace")
        return refusal(INVALID_REQUEST, f"a message longer than {MAX_LINE} bytes",
                       recover_id(head))
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:  # JSON text is UTF-8; a guess at what was meant is no answer
        return refusal(PARSE_ERROR, "not UTF-8 text", recover_id(line.decode("utf-8", "replace")))
    text = text.rstrip("\r\n")  # a parse error points into the line, not past it
    try:
        message = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            return refusal(PARSE_ERROR, _parse_reason(text, first["msg"]), recover_id(text))
        doc = _loads(text)
        return refusal(INVALID_REQUEST, _envelope_reason(doc), _id_of(doc))
    if isinstance(message, JSONRPCNotification):
        # The SDK reads a request whose id is not a string or an integer (1.5, null, true)
        # as a notification, which is never answered: the client would wait for good.
        doc = _loads(text)
        if isinstance(doc, dict) and "id" in doc:
            return refusal(INVALID_REQUEST, "id must be a string or an integer", None)
    return text


def refusal(code: int, reason: str, request_id: RequestId | None) -> JSONRPCError:
    title = "Parse error" if code == PARSE_ERROR else "Invalid Request"
    return JSONRPCError(jsonrpc="2.0", id=request_id,
                        error=ErrorData(code=code, message=f"{title}: {reason}"))


def _loads(text: str) -> Any:
    """The document, or None where Python's parser stops short of the SDK's (never raises)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return False
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # a lone surrogate cannot be sent back
        except UnicodeEncodeError:
            return False
    return True


def _id_of(doc: Any) -> RequestId | None:
    value = doc.get("id") if isinstance(doc, dict) else None
    return cast(RequestId, value) if _valid_id(value) else None


def _parse_reason(text: str, message: str) -> str:
    reason = message.removeprefix("Invalid JSON: ")
    doc = _loads(text)
    if doc is not None and _holds_surrogate(doc):  # well-formed, but not text
        return "a \\u escape of half a surrogate pair is not a character"
    return reason


def _holds_surrogate(doc: Any) -> bool:
    todo = [doc]
    while todo:  # not recursive: the document may nest deeper than Python's stack
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, str) and not _valid_id(item):
            return True
    return False


def _envelope_reason(doc: Any) -> str:
    """Why a JSON document is not a message the server takes, in the protocol's words."""
    if not isinstance(doc, dict):
        return "one JSON-RPC 2.0 object per line (no batches, no bare values)"
    if doc.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in doc and not _valid_id(doc["id"]):
        return "id must be a string or an integer"
    if "method" in doc:
        if not isinstance(doc["method"], str):
            return "method must be a string"
        if doc.get("params") is not None and not isinstance(doc["params"], dict):
            return "params must be an object"
    elif "result" in doc:
        return "a result must be an object"
    elif "error" in doc:
        return "an error must have an integer code and a message"
    else:
        return "a request needs a method"
    return "not a JSON-RPC 2.0 message"


def recover_id(text: str) -> RequestId | None:
    """The id of a message that cannot be read whole: its top-level "id" member, read as
    far as the text holds together (clients write jsonrpc and id before the params)."""
    found: RequestId | None = None
    at = _skip_space(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    try:
        while True:
            at = _skip_space(text, at)
            if not text.startswith('"', at):
                return found
            key, at = _DECODER.raw_decode(text, at)
            at = _skip_space(text, at)
            if not text.startswith(":", at):
                return found
            at = _skip_space(text, at + 1)
            if key == "id":
                value, at = _DECODER.raw_decode(text, at)
                found = value if _valid_id(value) else None
            else:
                at = _skip_value(text, at)
            at = _skip_space(text, at)
            if not text.startswith(",", at):
                return found
            at += 1
    except (ValueError, RecursionError):  # where the text breaks: what was read holds
        return found


def _skip_space(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


def _skip_value(text: str, at: int) -> int:
    """Past one JSON value, however deep, without building it."""
    depth = 0
    while True:
        match = _STRUCTURE.search(text, at)
        if match is None:
            raise ValueError("the text ends inside a value")
        at, char = match.start(), match.group()
        if char == '"':
            at = _DECODER.raw_decode(text, at)[1]
            if depth == 0:
                return at
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                return at  # the end of the object this value is in
            depth -= 1
            if depth == 0:
                return at + 1
        elif depth == 0:  # a comma after a scalar
            return at
        at += 1


def read_line(wire: BinaryIO) -> tuple[bytes, bool] | None:
    """The next line and whether it is whole (an over-long one is cut at MAX_LINE bytes and
    the rest of it read away); None at the end of input."""
    line = wire.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) <= MAX_LINE or line.endswith(b"\n"):
        return line, True
    while True:
        rest = wire.readline(HEAD)
        if not rest or rest.endswith(b"\n"):
            return line, False


class Lines:
    """The lines of stdin that the SDK's stdio reader gets: only those it takes. The others
    are answered here, through the SDK's own writer, once `answer_with` names it."""

    def __init__(self, wire: BinaryIO) -> None:
        self._wire = wire
        self._answers: Any = None
        self._ready = anyio.Event()

    def answer_with(self, write_stream: Any) -> None:
        self._answers = write_stream
        self._ready.set()

    def __aiter__(self) -> "Lines":
        return self

    async def __anext__(self) -> str:
        from mcp.shared.message import SessionMessage

        await self._ready.wait()
        while True:
            read = await anyio.to_thread.run_sync(read_line, self._wire,
                                                  abandon_on_cancel=True)
            if read is None:
                raise StopAsyncIteration
            outcome = screen(*read)
            if isinstance(outcome, str):
                return outcome
            if outcome is not None:
                try:
                    await self._answers.send(SessionMessage(outcome))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    raise StopAsyncIteration from None  # the server has stopped


@contextmanager
def claimed_stdin() -> Iterator[BinaryIO]:
    """stdin's wire, read only by `Lines`: while the server runs, fd 0 points at the null
    device, so a child process a tool starts reads nothing of the protocol (as the SDK's
    own reader does)."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:  # no descriptor to move: read it where it is
        yield os.fdopen(0, "rb", closefd=False)
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        # Never closed: a reader thread may still block on it when the server stops.
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


async def serve(server: MCPServer[Any]) -> None:
    """Run an MCPServer over stdio as its own `run_stdio_async` does, with stdin screened."""
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # what run_stdio_async runs, with our stdin
    with claimed_stdin() as wire:
        lines = Lines(wire)
        async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
            lines.answer_with(write_stream)
            await lowlevel.run(read_stream, write_stream,
                               lowlevel.create_initialization_options())
