"""Ingest: transcripts in, admitted and encrypted messages out (SPEC §6, §7).

Parsing is text/transcripts.py's job and admission is admission.py's; this module
decides what is stored. Only messages not stored yet are admitted (the costly scan),
and a session is appended to in one write, one fsync and one index commit.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from memvault.config import NAME_RE, validate_name
from memvault.crypto.envelope import content_hash
from memvault.errors import DataError, MemError, NotFound, Refused, UsageError
from memvault.index.base import file_entries
from memvault.model.location import session_file
from memvault.model.records import (
    CONTEXT_NEIGHBOURS,
    MAX_CONTENT,
    NewMessage,
    Record,
    clean_tags,
    normalise_time,
    now_iso,
    uuid7,
)
from memvault.model.results import IngestResult, Preview, Redactions, ScanError, ScanResult
from memvault.ops import remember
from memvault.ops.admission import AdmissionPolicy, Screened
from memvault.vault.vault import Vault

MAX_TRANSCRIPT = 256 * 1024 * 1024
SCAN_SUFFIXES = (".jsonl", ".json")


def read_file(path: Path) -> str:
    """A transcript file's text (bounded in size; NotFound, DataError, UsageError)."""
    try:
        if path.stat().st_size > MAX_TRANSCRIPT:
            raise DataError(f"{path} is larger than {MAX_TRANSCRIPT >> 20} MiB")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NotFound(f"no transcript at {path}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", hint="scan") from None
    except PermissionError:
        raise NotFound(f"cannot read {path}: permission denied") from None
    return decode(raw, str(path))


def decode(raw: bytes, where: str) -> str:
    if len(raw) > MAX_TRANSCRIPT:
        raise DataError(f"transcript is larger than {MAX_TRANSCRIPT >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{where} is not UTF-8 text") from None


def session_name(candidate: str) -> str:
    """A valid session name: the candidate itself, or a readable, unique stand-in."""
    if NAME_RE.fullmatch(candidate):
        return candidate
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", candidate).strip("-.")[:40] or "session"
    digest = hashlib.sha256(candidate.encode()).hexdigest()[:12]
    return f"{safe}-{digest}" if safe[0].isalnum() else f"s-{digest}"


def ingest_file(vault: Vault, path: Path, fmt: str = "auto", session: str | None = None,
                dry_run: bool = False, strict: bool = False,
                fallback_name: str | None = None) -> IngestResult:
    return ingest_text(vault, read_file(path), path.stem, fmt, session, dry_run, strict,
                       fallback_name)


def ingest_text(vault: Vault, text: str, name: str | None, fmt: str = "auto",
                session: str | None = None, dry_run: bool = False, strict: bool = False,
                fallback_name: str | None = None) -> IngestResult:
    """Ingest one transcript. Its session is `session`, else the transcript's own id,
    else `fallback_name` (a scan passes the path under the scanned folder), else `name`
    (the file's name)."""
    from memvault.text.transcripts import parse

    transcript = parse(text, fmt)
    if session:
        validate_name("session", session)
    chosen = session or transcript.session_id or fallback_name or name
    if not chosen:
        raise UsageError("a transcript without a session id needs a session name",
                         field="session")
    session_id = session if session else session_name(chosen)
    policy = AdmissionPolicy(vault.settings)
    if strict:  # refuse before anything is touched, not halfway through the write
        policy.screen([*transcript.messages, *transcript.summaries], strict=True)
    screened = Screened()

    def admit(batch: list[NewMessage]) -> list[NewMessage]:
        result = policy.screen(batch, strict)
        screened.withheld += result.withheld
        screened.add_counts(result.counts)
        return result.kept

    # Ids first (from what the transcript said), so that messages already stored are
    # skipped before the costly admission scan; only new messages are scanned.
    done = add_messages(vault, session_id, with_ids(vault, transcript.messages), admit,
                        dry_run)
    # A summary the user forgot is not brought back by ingesting its transcript again.
    forgotten = vault.state().forgotten if transcript.summaries else set()
    summaries = admit([s for s in transcript.summaries if not (
        s.message_id and vault.message_mark(session_id, s.message_id) in forgotten)])
    if not dry_run:
        for summary in summaries:
            # Dated when the agent wrote it, in the session's past, not at ingest.
            remember.add(vault, _fit(summary.content), "summary", session=session_id,
                         message_id=summary.message_id, created_at=summary.created_at)
    return IngestResult(
        session_id=session_id, format=transcript.format, messages_added=done.added,
        messages_updated=done.updated, messages_skipped=done.skipped,
        lines_ignored=transcript.skipped,
        withheld=screened.withheld,
        redactions=tuple(Redactions(rule, n) for rule, n in sorted(screened.counts.items())),
        dry_run=dry_run, messages=tuple(_preview(m) for m in done.would_add),
        summaries=tuple(_preview(m) for m in summaries) if dry_run else (),
        summaries_added=0 if dry_run else len(summaries),
    )


def add_messages(vault: Vault, session: str, messages: list[NewMessage],
                 admit: Callable[[list[NewMessage]], list[NewMessage]] | None = None,
                 dry_run: bool = False) -> Added:
    """Store a transcript's messages in a session: those not stored yet, and those whose
    id is stored with other content (a message the agent was still writing when the
    transcript was read last time: its stored line is replaced).

    A message is already stored when its message_id is (or, without an id, when the
    same role said the same thing at the same time), and never again once forgotten.
    `admit` sees only new and grown messages and may drop some."""
    validate_name("session", session)
    relpath = session_file(session)
    if dry_run:
        state = vault.state()
        existing = vault.store.read_lines(relpath) if vault.exists() else []
        plan = _plan(vault, session, existing, messages, state.forgotten)
        fresh = admit(plan.fresh) if admit else plan.fresh
        return Added(0, 0, plan.skipped, fresh)
    with vault.transaction() as tx:
        scan = tx.store.read_scan(relpath)
        existing = scan.records
        plan = _plan(vault, session, existing, messages, tx.state.forgotten)
        fresh = admit(plan.fresh) if admit else plan.fresh
        grown = admit(list(plan.grown.values())) if admit and plan.grown else \
            list(plan.grown.values())
        new = [Record(
            memory_id=uuid7(), org_id=vault.org, user_id=vault.user, type="message",
            content=m.content, content_hash=content_hash(m.content), category="conversation",
            tags=clean_tags(m.tags), session_id=session, message_id=m.message_id,
            channel=m.channel, role=m.role, name=m.name, created_at=m.created_at or "",
            updated_at=m.created_at or "", key_version=tx.epoch,
        ) for m in fresh]
        updated = _grow(existing, plan.grown, grown, tx.epoch)
        turns = [*existing, *new]
        if updated:
            # Lines after the grown one move: the file is rewritten and indexed again.
            locations = tx.rewrite(relpath, turns)
            tx.index(file_entries(turns, locations))
        elif new:
            locations = [*scan.locations(relpath), *tx.append(relpath, new)]
            # The new turns, and the last stored ones, which gain successors as context.
            tx.index(file_entries(turns, locations,
                                  range(max(0, len(existing) - CONTEXT_NEIGHBOURS),
                                        len(turns))))
        if new or updated:
            tx.state.count("message", len(new))
            tx.touch()
            tx.audit("ingest", [r.memory_id for r in [*new, *updated]],
                     [tx.hash_of(r.content_hash) for r in [*new, *updated]],
                     session_file=relpath, skipped=plan.skipped, updated=len(updated))
    return Added(len(new), len(updated), plan.skipped, [])


@dataclass
class Added:
    """What add_messages did: messages added, grown ones replaced, skipped (stored
    already, forgotten or empty), and what a dry run would add."""

    added: int
    updated: int
    skipped: int
    would_add: list[NewMessage]


@dataclass
class _Plan:
    fresh: list[NewMessage] = field(default_factory=list)
    grown: dict[int, NewMessage] = field(default_factory=dict)  # position in the file → new
    skipped: int = 0


def _plan(vault: Vault, session: str, existing: list[Record], messages: list[NewMessage],
          forgotten: set[str]) -> _Plan:
    """Sort a transcript's messages (with their times normalised) into new, grown (an id
    stored with other content) and skipped."""
    by_id = {r.message_id: i for i, r in enumerate(existing) if r.message_id}
    seen = {_message_key(r.message_id, r.role, r.content_hash, r.created_at)
            for r in existing}
    plan = _Plan()
    for n, m in enumerate(messages, start=1):
        if not m.content.strip() or (m.message_id and forgotten and
                                     vault.message_mark(session, m.message_id) in forgotten):
            plan.skipped += 1
            continue
        try:
            stamp = normalise_time(m.created_at) if m.created_at else now_iso()
        except UsageError:
            raise DataError(f"message {m.message_id or n} has an invalid time "
                            f"{m.created_at!r}; nothing was stored") from None
        digest = content_hash(m.content)
        key = _message_key(m.message_id, m.role, digest, stamp)
        at = by_id.get(m.message_id) if m.message_id else None
        if at is not None and existing[at].content_hash != digest and at not in plan.grown:
            plan.grown[at] = replace(m, created_at=stamp)
            continue
        if key in seen:
            plan.skipped += 1
            continue
        seen.add(key)
        plan.fresh.append(replace(m, created_at=stamp))
    return plan


def _grow(existing: list[Record], grown: dict[int, NewMessage], admitted: list[NewMessage],
          epoch: int) -> list[Record]:
    """Give the stored messages that grew their new content (those admission kept); the
    record keeps its id and first time, so a search hit on it stays valid."""
    kept = {m.message_id: m for m in admitted}
    updated = []
    for at, message in grown.items():
        new = kept.get(message.message_id)
        if new is None:
            continue  # withheld: the stored version stays
        record = existing[at]
        record.content, record.content_hash = new.content, content_hash(new.content)
        record.updated_at = now_iso()
        record.key_version = epoch
        updated.append(record)
    return updated


def _message_key(message_id: str | None, role: str | None, digest: str,
                 created_at: str) -> tuple[str, ...]:
    if message_id:
        return ("id", message_id)
    return ("content", role or "", digest, created_at)


def _fit(text: str) -> str:
    """An agent's compaction summary can be long; keep what fits in one record."""
    raw = text.encode()
    if len(raw) <= MAX_CONTENT:
        return text
    return raw[: MAX_CONTENT - 3].decode(errors="ignore") + "…"


def with_ids(vault: Vault, messages: list[NewMessage]) -> list[NewMessage]:
    """Give each message without an id a stable one, so that ingesting the transcript again
    (or a longer one, or another file of the same session) stores nothing twice and
    nothing less: a keyed hash of who spoke, when, and what was said (SPEC §6). Keyed
    (with the user's metadata key): the id of a redacted message must not let anyone
    without the key test a guess at what redaction removed."""
    return [m if m.message_id else
            replace(m, message_id=vault.message_digest(m.role, m.created_at, m.content))
            for m in messages]


def _preview(message: NewMessage) -> Preview:
    return Preview(message.role, message.content, message.message_id, message.created_at)


def scan_dir(vault: Vault, directory: Path, fmt: str = "auto",
             strict: bool = False) -> ScanResult:
    """Ingest every transcript under `directory` that is new or has grown since last time.

    For a periodic job: Claude Code never fires SessionEnd for a session suspended with
    Ctrl-C, and deletes old transcripts after a month. What was seen is kept in the
    user's state as keyed hashes of the paths (paths name projects; never in clear).
    """
    if not directory.is_dir():
        raise NotFound(f"no directory at {directory}")
    files = sorted(p for p in directory.rglob("*") if p.suffix in SCAN_SUFFIXES
                   and p.is_file())
    seen = vault.state().scan_marks
    ingested = added = withheld = 0
    errors: list[ScanError] = []
    for path in files:
        st = path.stat()
        mark = [st.st_size, st.st_mtime_ns]
        key = vault.path_mark(os.fsencode(path.resolve()))
        if seen.get(key) == mark:
            continue
        try:
            # Two notes.jsonl in different folders are different sessions.
            relative = str(path.relative_to(directory).with_suffix(""))
            result = ingest_file(vault, path, fmt, strict=strict, fallback_name=relative)
        except MemError as exc:
            errors.append(ScanError(str(path), exc.message, exc.exit_code))
            if isinstance(exc, DataError | Refused):
                _set_scan_mark(vault, key, mark)  # not a transcript: retry when it changes
            continue
        ingested += 1
        added += result.messages_added
        withheld += result.withheld
        _set_scan_mark(vault, key, mark)
    return ScanResult(len(files), ingested, added, withheld, tuple(errors))


def _set_scan_mark(vault: Vault, key: str, mark: list[int]) -> None:
    with vault.transaction() as tx:
        tx.state.scan_marks[key] = mark
        tx.touch()
