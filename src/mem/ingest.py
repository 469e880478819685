"""Ingest: transcripts in, redacted and encrypted messages out (SPEC §6, §7).

Parsing is transcripts.py's job and redaction is redact.py's; this module decides what
is stored. A message holding a critical secret is withheld (or, with `strict`, the whole
session is refused); other personal data is replaced by typed placeholders.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mem import crypto
from mem.config import NAME_RE
from mem.errors import DataError, MemError, NotFound, Refused, UsageError

if TYPE_CHECKING:
    from mem.redact import RedactionConfig
    from mem.vault import NewMessage, Vault

MAX_TRANSCRIPT = 256 * 1024 * 1024
SCAN_SUFFIXES = (".jsonl", ".json")


def read_source(source: str) -> tuple[str, str | None]:
    """The transcript text and a name to derive a session id from (None for stdin)."""
    if source == "-":
        raw = sys.stdin.buffer.read(MAX_TRANSCRIPT + 1)
        name = None
    else:
        path = Path(source)
        try:
            if path.stat().st_size > MAX_TRANSCRIPT:
                raise DataError(f"{path} is larger than {MAX_TRANSCRIPT >> 20} MiB")
            raw = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no transcript at {path}") from None
        except IsADirectoryError:
            raise UsageError(f"{path} is a directory: use --scan to ingest a folder") from None
        except PermissionError:
            raise NotFound(f"cannot read {path}: permission denied") from None
        name = path.stem
    if len(raw) > MAX_TRANSCRIPT:
        raise DataError(f"transcript is larger than {MAX_TRANSCRIPT >> 20} MiB")
    try:
        return raw.decode("utf-8"), name
    except UnicodeDecodeError:
        raise DataError(f"{source} is not UTF-8 text") from None


def session_name(candidate: str) -> str:
    """A valid session name: the candidate itself, or a readable, unique stand-in."""
    if NAME_RE.fullmatch(candidate):
        return candidate
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", candidate).strip("-.")[:40] or "session"
    digest = hashlib.sha256(candidate.encode()).hexdigest()[:12]
    return f"{safe}-{digest}" if safe[0].isalnum() else f"s-{digest}"


def redact_messages(messages: list[NewMessage], config: RedactionConfig,
                    strict: bool) -> tuple[list[NewMessage], int, dict[str, int]]:
    """Redacted copies of the messages, how many were withheld, and the counts per rule."""
    from mem.redact import scan

    kept: list[NewMessage] = []
    withheld = 0
    counts: dict[str, int] = {}
    for message in messages:
        result = scan(message.content, config)
        for rule, n in result.counts.items():
            counts[rule] = counts.get(rule, 0) + n
        if not result.clean:
            if strict:
                rules = ", ".join(sorted(set(result.refused)))
                raise Refused(f"the transcript holds a secret ({rules}); --strict refuses "
                              "the whole session and nothing was stored")
            withheld += 1
            continue
        kept.append(replace(message, content=result.text))
    return kept, withheld, counts


def ingest(vault: Vault, source: str, fmt: str = "auto", session: str | None = None,
           dry_run: bool = False, strict: bool = False,
           fallback_name: str | None = None) -> dict[str, Any]:
    """Ingest one transcript. Its session is --session, else the transcript's own id,
    else `fallback_name` (a scan passes the path under the scanned folder), else the
    file's name."""
    from mem.transcripts import parse

    text, name = read_source(source)
    transcript = parse(text, fmt)
    chosen = session or transcript.session_id or fallback_name or name
    if not chosen:
        raise UsageError("a transcript from stdin without a session id needs --session")
    session_id = session if session else session_name(chosen)
    if session:
        from mem.config import validate_name

        validate_name("session", session)
    config = vault.settings.redaction()
    # Ids first (from what the transcript said), so that messages already stored are
    # skipped before the costly redaction scan; only new messages are scanned.
    messages = with_ids(transcript.messages)
    report: dict[str, int] = {}
    withheld = 0

    def prepare(batch: list[NewMessage]) -> list[NewMessage]:
        nonlocal withheld
        kept, dropped, counts = redact_messages(batch, config, strict)
        withheld += dropped
        for rule, n in counts.items():
            report[rule] = report.get(rule, 0) + n
        return kept

    if strict:  # refuse before anything is touched, not halfway through the write
        redact_messages([*transcript.messages, *transcript.summaries], config, strict=True)
    result = vault.add_messages(session_id, messages, prepare=prepare, dry_run=dry_run)
    summaries = prepare(transcript.summaries)
    doc: dict[str, Any] = {
        "session_id": session_id, "format": transcript.format,
        "messages_added": result["messages_added"],
        "messages_skipped": result["messages_skipped"], "lines_ignored": transcript.skipped,
        "withheld": withheld,
        "redactions": [{"rule": rule, "count": n} for rule, n in sorted(report.items())],
    }
    if dry_run:
        doc.update(dry_run=True, messages=[_preview(m) for m in result["would_add"]],
                   summaries=[_preview(m) for m in summaries])
        return doc
    for summary in summaries:
        vault.add(_fit(summary.content), "summary", session=session_id,
                  message_id=summary.message_id)
    return doc


def _fit(text: str) -> str:
    """An agent's compaction summary can be long; keep what fits in one record."""
    from mem.vault import MAX_CONTENT

    raw = text.encode()
    if len(raw) <= MAX_CONTENT:
        return text
    return raw[: MAX_CONTENT - 3].decode(errors="ignore") + "…"


def with_ids(messages: list[NewMessage]) -> list[NewMessage]:
    """Give each message without an id a stable one, so that ingesting the transcript again
    (or a longer version of it) stores nothing twice: its position in the transcript and
    a digest of who spoke when. Never of what was said: the id would let anyone test a
    guess at text that redaction removed."""
    out = []
    for n, m in enumerate(messages, start=1):
        if m.message_id:
            out.append(m)
            continue
        digest = hashlib.sha256(f"{m.role}\0{m.created_at or ''}".encode()).hexdigest()[:8]
        out.append(replace(m, message_id=f"n{n}-{digest}"))
    return out


def _preview(message: NewMessage) -> dict[str, Any]:
    return {"role": message.role, "content": message.content,
            "message_id": message.message_id, "created_at": message.created_at}


def scan_dir(vault: Vault, directory: Path, fmt: str = "auto",
             strict: bool = False) -> dict[str, Any]:
    """Ingest every transcript under `directory` that is new or has grown since last time.

    For a periodic job: Claude Code never fires SessionEnd for a session suspended with
    Ctrl-C, and deletes old transcripts after a month. What was seen is kept in state.json
    as keyed hashes of the paths (paths name projects; they are not written in clear).
    """
    if not directory.is_dir():
        raise NotFound(f"no directory at {directory}")
    files = sorted(p for p in directory.rglob("*") if p.suffix in SCAN_SUFFIXES
                   and p.is_file())
    seen = vault.scan_marks()
    summary: dict[str, Any] = {"files_scanned": len(files), "files_ingested": 0,
                               "messages_added": 0, "withheld": 0, "errors": []}
    for path in files:
        st = path.stat()
        mark = [st.st_size, st.st_mtime_ns]
        key = crypto.keyed_hash(vault.audit.key, os.fsencode(path.resolve()))
        if seen.get(key) == mark:
            continue
        try:
            # Two notes.jsonl in different folders are different sessions.
            relative = str(path.relative_to(directory).with_suffix(""))
            result = ingest(vault, str(path), fmt, strict=strict, fallback_name=relative)
        except MemError as exc:
            summary["errors"].append({"file": str(path), "error": exc.message,
                                      "exit_code": exc.exit_code})
            if isinstance(exc, DataError | Refused):
                vault.set_scan_mark(key, mark)  # not a transcript: retry when it changes
            continue
        summary["files_ingested"] += 1
        summary["messages_added"] += result["messages_added"]
        summary["withheld"] += result["withheld"]
        vault.set_scan_mark(key, mark)
    return summary
