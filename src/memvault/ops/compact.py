"""Compaction (SPEC §9): old conversation becomes summaries, the originals move to the
encrypted archive, exact duplicates go, and forgotten data leaves old key epochs.

For each user: plan (reads clear line headers, decrypts nothing) → summarise (decrypts
one unit at a time, holds no lock: an external summariser may take minutes) → apply
each unit under the user's lock only if the lines it was built from are unchanged
(else it is skipped and the next run retries). vault/archive.py makes each move one
step that a kill cannot split. A second run finds nothing to do.

Triggers (config `compaction:`): a session over `session_max_messages` keeps its newest
`session_keep_raw` raw; a session whose newest message is older than
`archive_after_days` and none of whose records was read since (the audit log's reads)
is compacted whole; active memory over `max_active_tokens` (estimated from the sizes
of the encrypted lines: about 4 bytes of text per token) → the oldest sessions, until
`compact_fraction` of it is compacted. Whole sessions shorter than
`short_session_messages` are summarised together, one summary per ISO week.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from memvault.config import CompactionConfig, Settings
from memvault.crypto.envelope import content_hash
from memvault.errors import EX_DATAERR, EX_FAILURE, EX_TEMPFAIL, Busy, MemError
from memvault.model.location import session_file, session_of
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import (
    BYTES_PER_TOKEN,
    COMPACTION_CHANNEL,
    DOC_FILES,
    LINE_OVERHEAD,
    TYPE_HOME,
    Record,
    clean_tags,
    normalise_time,
    now_iso,
    parse_time,
    uuid7,
)
from memvault.model.results import CompactPreview, CompactProblem, CompactResult
from memvault.ops import keys, pool
from memvault.ops.admission import AdmissionPolicy
from memvault.ops.budget import FactAllowance
from memvault.ops.pool import shard_of  # noqa: F401  (compaction's shards are the pool's)
from memvault.ops.projects import PREFIX as PROJECT
from memvault.ops.summarize import (
    Analyze,
    Digest,
    DocFreq,
    External,
    Fact,
    SummarizerBroken,
    card,
    is_builtin,
    summarizer_argv,
)
from memvault.storage.userstore import LineHeader
from memvault.text.words import counted
from memvault.vault import archive
from memvault.vault.vault import Transaction, Vault

READ_OPS = frozenset({"search", "show", "brief"})  # audit entries that name what was read
SUMMARY_TAG = "compacted"
# One apply (one lock hold) moves at most this much: a hook waiting on the lock waits
# for a fraction of a second, never for a whole night's compaction.
BATCH_MESSAGES = 5_000
BATCH_UNITS = 100


def tokens(header: LineHeader) -> int:
    """A line's estimated tokens, from the length of its ciphertext (base64)."""
    return max(1, (header.sealed_chars * 3 // 4 - 16 - LINE_OVERHEAD) // BYTES_PER_TOKEN)


@dataclass
class Unit:
    """What one summary replaces: lines of one session, or whole short sessions of a week."""

    reason: str
    lines: dict[str, list[LineHeader]]  # session → its lines to archive, in file order
    whole: bool  # the sessions move whole: nothing else may be in them when applied

    @property
    def sessions(self) -> tuple[str, ...]:
        return tuple(sorted(self.lines))

    @property
    def messages(self) -> int:
        return sum(len(v) for v in self.lines.values())

    @property
    def span(self) -> tuple[str, str]:
        times = [h.created_at for v in self.lines.values() for h in v]
        return min(times), max(times)


@dataclass
class Plan:
    units: list[Unit] = field(default_factory=list)
    active_tokens: int = 0
    duplicate_sessions: dict[str, list[LineHeader]] = field(default_factory=dict)


@dataclass
class Outcome:
    """One user's compaction, summed into the CompactResult."""

    org: str
    user: str
    sessions_compacted: int = 0
    summaries_added: int = 0
    facts_added: int = 0
    facts_capped: int = 0  # behavioural facts over the `compaction:` caps, not stored
    archived: int = 0
    deduplicated: int = 0
    rekeyed: int = 0
    problems: list[CompactProblem] = field(default_factory=list)
    previews: list[CompactPreview] = field(default_factory=list)

    def problem(self, kind: str, message: str, exit_code: int) -> None:
        self.problems.append(CompactProblem(self.org, self.user, kind, message, exit_code))


# --- planning: clear headers only ----------------------------------------------------------


def plan(vault: Vault, cfg: CompactionConfig, now: datetime,
         sessions: Sequence[str] = ()) -> Plan:
    """What to compact for this user, from the clear headers of their session files
    (nothing is decrypted but sessions whose shape says they may repeat another).
    `sessions`: compact these whole now, whatever the triggers."""
    store = vault.store
    files = {}
    for relpath in store.layout.line_files():
        name = session_of(relpath)
        headers = store.line_headers(relpath)
        if name is not None and headers:
            files[name] = headers
    result = Plan()
    docs = sum(_size(vault, name) for name in DOC_FILES) // BYTES_PER_TOKEN
    result.active_tokens = docs + sum(tokens(h) for v in files.values() for h in v)
    result.duplicate_sessions = _duplicates(vault, files)
    for name in result.duplicate_sessions:
        files.pop(name, None)
    taken: dict[str, Unit] = {}
    for name in sessions:
        if name in files:
            taken[name] = Unit("session", {name: files[name]}, whole=True)
    if cfg.archive_after_days:
        cutoff = now - timedelta(days=cfg.archive_after_days)
        since = cutoff.isoformat(timespec="microseconds").replace("+00:00", "Z")
        old = [n for n, h in files.items() if n not in taken and _newest(h) < since]
        if old:
            # Reads note the day each session was read (reads.json); entries of the
            # audit log written before that name what was read.
            read = vault.audit.ids_since(since, READ_OPS)
            lately = vault.sessions_read_since(since[:10])
            for name in old:
                if vault.session_mark(name) not in lately and \
                        not any(h.memory_id in read for h in files[name]):
                    taken[name] = Unit("old", {name: files[name]}, whole=True)
    # Long sessions keep their newest messages raw (an old one went whole above).
    for name, headers in files.items():
        if name not in taken and len(headers) > cfg.session_max_messages:
            cut = len(headers) - cfg.session_keep_raw
            taken[name] = Unit("long", {name: headers[:cut]}, whole=False)
    if result.active_tokens > cfg.max_active_tokens:
        target = cfg.compact_fraction * result.active_tokens
        done = sum(tokens(h) for u in taken.values() for v in u.lines.values() for h in v)
        for name in sorted(files, key=lambda n: (_newest(files[n]), n)):
            if done >= target:
                break
            if name not in taken:
                taken[name] = Unit("budget", {name: files[name]}, whole=True)
                done += sum(tokens(h) for h in files[name])
    result.units = _weekly(list(taken.values()), cfg.short_session_messages)
    return result


def _newest(headers: list[LineHeader]) -> str:
    """A session's last activity (lines are in the order they were stored, not
    necessarily in time order: a transcript may bring older messages later)."""
    return max(h.created_at for h in headers)


def _weekly(units: list[Unit], short: int) -> list[Unit]:
    """Whole short sessions summarised together, one unit per ISO week of their end."""
    out: list[Unit] = []
    weeks: dict[str, Unit] = {}
    for unit in units:
        if not (unit.whole and unit.messages < short and unit.reason != "session"):
            out.append(unit)
            continue
        year, week, _ = parse_time(unit.span[1]).isocalendar()
        key = f"{year}-W{week:02d}"
        if key in weeks:
            weeks[key].lines.update(unit.lines)
        else:
            weeks[key] = Unit("week", dict(unit.lines), whole=True)
    return out + [weeks[k] for k in sorted(weeks)]


def _duplicates(vault: Vault, files: dict[str, list[LineHeader]]
                ) -> dict[str, list[LineHeader]]:
    """Sessions that repeat another one message for message (same speakers, same
    content, in order), but the most recent copy. Only sessions with the same number of
    lines of the same sizes are decrypted to compare."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, headers in files.items():
        groups.setdefault(tuple(h.sealed_chars for h in headers), []).append(name)
    drop: dict[str, list[LineHeader]] = {}
    for names in groups.values():
        if len(names) < 2:
            continue
        shapes: dict[tuple[tuple[str, str], ...], list[tuple[str, str]]] = {}
        for name in sorted(names):
            records = vault.store.read_lines(session_file(name))
            shape = tuple((r.role or "", r.content_hash) for r in records)
            shapes.setdefault(shape, []).append((_newest(files[name]), name))
        for copies in shapes.values():
            for _, name in sorted(copies)[:-1]:
                drop[name] = files[name]
    return drop


def _size(vault: Vault, relpath: str) -> int:
    try:
        return vault.store.layout.path(relpath).stat().st_size
    except OSError:
        return 0


# --- one user ----------------------------------------------------------------------------


Summarise = Callable[[Vault, Unit, list[Record]], Digest]


def compact_user(vault: Vault, cfg: CompactionConfig, *, dry_run: bool = False,
                 sessions: Sequence[str] = (), now: datetime | None = None,
                 show_text: bool = True, external: External | None = None,
                 progress: Progress = NO_PROGRESS) -> Outcome:
    """Compact one user. Busy (the lock not had within `lock_wait`) and MemError pass
    to the caller; a unit whose summariser fails is reported and left for next time, a
    summariser that cannot work at all (SummarizerBroken) stops the run. `external`: the
    external summariser's run, when it began before this user (it has answered once or
    not). `progress` counts the units (one summary each), kept once applied."""
    out = Outcome(vault.org, vault.user)
    if not vault.exists():
        return out
    state = vault.state()
    if state.frozen:  # restricted: nothing is rewritten, not even by compaction
        out.problem("frozen", "the user's memory is frozen; not compacted", 0)
        return out
    summarise = _summariser(cfg, _Cards(vault), external)
    if cfg.summarizer and not is_builtin(cfg.summarizer):
        summarizer_argv(cfg.summarizer)  # a malformed command fails before any work
    # An external summariser may take a minute a unit: each is applied as it comes, so
    # that an interruption loses at most the one under way.
    batch_units = BATCH_UNITS if is_builtin(cfg.summarizer) else 1
    the_plan = plan(vault, cfg, now or _now(), sessions)
    progress.start(len(the_plan.units), "summaries")
    policy = AdmissionPolicy(vault.settings)
    allowance = FactAllowance.from_config(cfg)
    if the_plan.duplicate_sessions:
        out.deduplicated += (len(the_plan.duplicate_sessions) if dry_run else
                             _drop_sessions(vault, the_plan.duplicate_sessions))
    batch: list[Summarised] = []
    for unit in the_plan.units:
        progress.advance()
        records = _read(vault, unit)
        if records is None:
            out.problem("changed", "a session changed while it was planned; next run", 0)
            continue
        # What the summariser reads is admitted again for private spans: a record stored
        # before they were hidden must not pass them on into a summary.
        records = [replace(r, content=policy.private(r.content)) for r in records]
        if dry_run:
            preview = None
            if show_text and is_builtin(cfg.summarizer):
                try:  # exactly what a run would store: the same card, admitted alike
                    preview = policy.admit(_headed(unit, summarise(vault, unit, records)
                                                   .summary), "the summary")
                except MemError as exc:
                    out.problem("summarizer", f"{', '.join(unit.sessions)}: {exc.message}",
                                EX_TEMPFAIL)
                    continue
            out.previews.append(_preview(out, unit, preview))
            out.sessions_compacted += len(unit.sessions)
            out.summaries_added += 1
            out.archived += unit.messages
            continue
        try:
            digest = summarise(vault, unit, records)
            summary_text = policy.admit(_headed(unit, digest.summary), "the summary")
        except MemError as exc:  # SummarizerFailed, or admission refused the summary
            if isinstance(exc, Busy | SummarizerBroken):
                raise
            out.problem("summarizer", f"{', '.join(unit.sessions)}: {exc.message}",
                        EX_TEMPFAIL)
            continue
        # The summary keeps the projects its originals were tagged with, so that a
        # project-aware brief and search still find it first in that project.
        projects = sorted({t for r in records for t in r.tags if t.startswith(PROJECT)})
        batch.append(Summarised(unit, summary_text, _admitted_facts(policy, digest.facts),
                                projects))
        if sum(b.unit.messages for b in batch) >= BATCH_MESSAGES or len(batch) >= batch_units:
            _apply(vault, batch, out, allowance, progress)
            batch = []
    if batch:
        _apply(vault, batch, out, allowance, progress)
    if dry_run:
        out.rekeyed = int(state.rekey_pending)
        return out
    out.deduplicated += _dedupe_docs(vault)
    if vault.state().rekey_pending:
        with vault.transaction() as tx:
            keys.reencrypt(tx)
        out.rekeyed = 1
    _note_run(vault, out)
    return out


def _note_run(vault: Vault, out: Outcome) -> None:
    """Note in the user's state that compaction ran (`mem doctor` reports when): the
    state alone changes, under the lock; no content, no audit entry."""
    with vault.lock():
        state = vault.locked_state()
        if state.frozen:  # frozen meanwhile: nothing is written, not even this
            return
        state.last_compaction = {"at": now_iso(), "summaries_added": out.summaries_added,
                                 "archived": out.archived, "problems": len(out.problems)}
        vault.store.save_state(state)


def _now() -> datetime:
    return parse_time(now_iso())


def _summariser(cfg: CompactionConfig, cards: _Cards, external: External | None
                ) -> Summarise:
    if is_builtin(cfg.summarizer):
        return lambda vault, unit, records: Digest(cards.card(records))
    run = external if external is not None else External(cfg)
    return lambda vault, unit, records: run(records)


class _Cards:
    """The built-in memory cards of one run, every one weighted by the rarity of words
    in the user's memory as it was when the run began: summaries applied batch by batch
    change the index, and a run must store the cards its dry run showed."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._weigh: tuple[Analyze, DocFreq] | None = None

    def card(self, records: list[Record]) -> str:
        from memvault.index.keyed import STOPWORDS

        if self._weigh is None:  # on the first card: a run with nothing to do reads no index
            index = self.vault.ready_index()
            self._weigh = (index.analyzer.spans, index.doc_freqs_now())
        return card(records, self._weigh[0], STOPWORDS, self._weigh[1])


def _headed(unit: Unit, summary: str) -> str:
    """The summary under a line that says what it covers (the brief shows its start)."""
    start, end = unit.span
    label = (f"session {unit.sessions[0]}" if len(unit.sessions) == 1
             else f"{len(unit.sessions)} sessions")
    when = start[:10] if start[:10] == end[:10] else f"{start[:10]} to {end[:10]}"
    return f"Summary of {label}, {when} ({unit.messages} messages). {summary.strip()}"


def remade_summary(tx: Transaction, summary: Record, sources: list[Record]) -> Record:
    """`summary` made again, by the built-in summariser, from `sources` (some of what it
    was made from was forgotten): same id and date, new content."""
    from memvault.index.keyed import STOPWORDS

    sources = sorted(sources, key=lambda r: r.created_at)
    index = tx.vault.search_index(tx.epoch)
    lines: dict[str, list[LineHeader]] = {}
    for r in sources:
        lines.setdefault(r.session_id or "", []).append(
            LineHeader(r.memory_id, r.created_at, r.key_version, 0, ""))
    text = _headed(Unit("remade", lines, whole=False),
                   card(sources, index.analyzer.spans, STOPWORDS, index.doc_freqs))
    return replace(summary, content=text, content_hash=content_hash(text),
                   compacted_from=[r.memory_id for r in sources], updated_at=now_iso(),
                   span=[sources[0].created_at, sources[-1].created_at],
                   key_version=tx.epoch)


def _preview(out: Outcome, unit: Unit, summary: str | None) -> CompactPreview:
    return CompactPreview(out.org, out.user, unit.reason, unit.sessions, unit.messages,
                          unit.span, summary)


def _read(vault: Vault, unit: Unit) -> list[Record] | None:
    """The unit's records, decrypted (None when a line changed since planning)."""
    records: list[Record] = []
    for session in unit.sessions:
        wanted = {h.memory_id for h in unit.lines[session]}
        found = [r for r in vault.store.read_lines(session_file(session))
                 if r.memory_id in wanted]
        if len(found) != len(wanted):
            return None
        records += found
    records.sort(key=lambda r: r.created_at)
    return records


def _admitted_facts(policy: AdmissionPolicy, facts: Sequence[Fact]) -> list[Fact]:
    """The facts admission lets in (masked); one holding a secret is dropped."""
    kept = []
    for fact in facts:
        with contextlib.suppress(MemError):
            policy.admit_tags(fact.tags)
            kept.append(replace(fact, content=policy.admit(fact.content, "a fact"),
                                tags=tuple(clean_tags(list(fact.tags)))))
    return kept


def _unchanged(tx: Transaction, unit: Unit) -> bool:
    """Whether the lines a unit was built from are still there, byte for byte (a new
    nonce on any rewrite makes a new digest); for a whole unit, with nothing added."""
    for session, planned in unit.lines.items():
        now = tx.store.line_headers(session_file(session))
        digests = {h.digest for h in now}
        if any(h.digest not in digests for h in planned):
            return False
        if unit.whole and len(now) != len(planned):
            return False
    return True


@dataclass
class Summarised:
    unit: Unit
    summary: str
    facts: list[Fact]
    projects: list[str] = field(default_factory=list)


def _apply(vault: Vault, batch: list[Summarised], out: Outcome,
           allowance: FactAllowance, progress: Progress = NO_PROGRESS) -> None:
    """Under the lock, for the units whose inputs are unchanged: write their summaries
    (and facts), archive their originals, in one journalled step. The lock is held for
    one batch (at most BATCH_MESSAGES messages moved), never while summarising."""
    with vault.transaction() as tx:
        ready = []
        for item in batch:
            if _unchanged(tx, item.unit):
                ready.append(item)
            else:
                out.problem("changed", f"{', '.join(item.unit.sessions)} changed during "
                            "summarising; left for the next run", 0)
        if not ready:
            return
        summaries = [_summary_record(tx, item) for item in ready]
        dropped = allowance.dropped
        facts = _fact_records(tx, ready, summaries, allowance)
        moves = {s: [h.memory_id for h in v] for item in ready
                 for s, v in item.unit.lines.items()}
        # The facts go with the move, in the same journalled step: a kill at any point
        # leaves them written once with the summaries, or not at all with the originals.
        moved = archive.move(tx, moves, summaries, facts)
        tx.audit("compact", [r.memory_id for r in summaries],
                 [tx.hash_of(r.content_hash) for r in summaries], archived=moved,
                 sessions=len(moves), facts=len(facts))
    progress.keep(len(summaries))
    out.sessions_compacted += len(moves)
    out.summaries_added += len(summaries)
    out.archived += moved
    out.facts_added += len(facts)
    out.facts_capped += allowance.dropped - dropped


def _summary_record(tx: Transaction, item: Summarised) -> Record:
    unit = item.unit
    start, end = unit.span
    week = [] if len(unit.sessions) == 1 else \
        ["week-{}-W{:02d}".format(*parse_time(end).isocalendar()[:2])]
    return Record(
        memory_id=uuid7(), org_id=tx.vault.org, user_id=tx.vault.user, type="summary",
        content=item.summary, content_hash=content_hash(item.summary),
        category=TYPE_HOME["summary"][1], tags=[SUMMARY_TAG, *week, *item.projects],
        session_id=unit.sessions[0] if len(unit.sessions) == 1 else None,
        compacted_from=[h.memory_id for v in unit.lines.values() for h in v],
        span=[start, end], created_at=normalise_time(end), updated_at=normalise_time(end),
        key_version=tx.epoch)


def _fact_records(tx: Transaction, ready: list[Summarised], summaries: list[Record],
                  allowance: FactAllowance) -> list[Record]:
    """A summariser's facts as records, each once: one that restates a record already
    there (same type and content), or another fact of this batch, is not stored; nor is
    a behavioural one over the allowance. Each is marked as the summariser's (its
    channel), which the brief puts below what the user stated."""
    known = {(r.type, r.content_hash) for home in DOC_FILES
             for r in tx.store.doc_records(home)}
    out = []
    for item, summary in zip(ready, summaries, strict=True):
        new = []
        for fact in item.facts:
            digest = content_hash(fact.content)
            if (fact.type, digest) not in known:
                known.add((fact.type, digest))
                new.append((fact, digest))
        kept = allowance.admit([fact.type for fact, _ in new])
        out += [Record(
            memory_id=uuid7(), org_id=tx.vault.org, user_id=tx.vault.user,
            type=fact.type, content=fact.content, content_hash=digest,
            category=TYPE_HOME[fact.type][1], tags=list(fact.tags),
            session_id=summary.session_id, channel=COMPACTION_CHANNEL,
            compacted_from=list(summary.compacted_from),
            created_at=summary.created_at, updated_at=summary.created_at,
            key_version=tx.epoch) for (fact, digest), ok in zip(new, kept, strict=True) if ok]
    return out


# --- duplicates ----------------------------------------------------------------------------


def _dedupe_docs(vault: Vault) -> int:
    """Exact duplicates among current facts, context, patterns, preferences and summaries
    (same type and content): the most recent stays, the others go; a supersede link to
    one that goes moves to the one that stays."""
    state = vault.state()
    plans: dict[str, list[str]] = {}
    for home in DOC_FILES:
        records = vault.store.doc_records(home)
        groups: dict[tuple[str, str], list[Record]] = {}
        for r in records:
            if state.superseded_by(r.memory_id) is None:
                groups.setdefault((r.type, r.content_hash), []).append(r)
        drop = [r.memory_id for g in groups.values() if len(g) > 1
                for r in sorted(g, key=lambda r: (r.created_at, r.memory_id))[:-1]]
        if drop:
            plans[home] = drop
    if not plans:
        return 0
    removed = 0
    with vault.transaction() as tx:
        for home, drop in plans.items():
            doc = tx.store.read_doc(home) or {"records": []}
            records = [Record.from_stored(r) for r in doc.get("records", [])]
            gone = {r.memory_id: r for r in records if r.memory_id in drop}
            kept = [r for r in records if r.memory_id not in gone]
            keeper = {(r.type, r.content_hash): r.memory_id for r in kept}
            for r in kept:
                r.key_version = tx.epoch
            doc["records"] = [r.stored() for r in kept]
            tx.write_doc(home, doc)
            for link in tx.state.superseded.values():
                if link.by in gone:
                    r = gone[link.by]
                    link.by = keeper.get((r.type, r.content_hash), link.by)
            for r in gone.values():
                tx.state.count(r.type, -1)
            tx.state.erased |= gone.keys()
            tx.unindex(gone)
            tx.audit("compact.dedupe", sorted(gone),
                     [tx.hash_of(r.content_hash) for r in gone.values()], file=home)
            removed += len(gone)
        tx.touch()
    return removed


def _drop_sessions(vault: Vault, drop: dict[str, list[LineHeader]]) -> int:
    """Remove the older copies of duplicated sessions (each only if unchanged since it
    was compared)."""
    removed = 0
    with vault.transaction() as tx:
        for name, planned in sorted(drop.items()):
            relpath = session_file(name)
            headers = tx.store.line_headers(relpath)
            if [h.digest for h in headers] != [h.digest for h in planned]:
                continue  # written since: left for the next run
            ids = [h.memory_id for h in headers]
            tx.rewrite(relpath, [])
            tx.unindex(ids)
            tx.state.count("message", -len(ids))
            tx.state.erased.update(ids)
            tx.audit("compact.dedupe", ids, session_file=relpath)
            removed += 1
        tx.touch()
    return removed


# --- many users ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What every worker needs: the settings and the master key, loaded once by the
    parent, resolved (a forked worker has it in memory, and no MEM_* variable)."""

    settings: Settings
    master: object
    cfg: CompactionConfig
    dry_run: bool
    sessions: tuple[str, ...] = ()
    # A dry run shows the built-in cards (decrypted memory) only for one user: over a
    # whole org it lists what would be compacted, not what each user said.
    show_text: bool = True
    debug: bool = field(default_factory=lambda: bool(os.environ.get("MEM_DEBUG")))


def open_user(job: Job, org: str, user: str) -> Vault:
    """The vault opened for one user, waiting at most `lock_wait` for their lock."""
    values = {**job.settings.values, "org": org, "user": user,
              "lock_timeout": job.cfg.lock_wait}
    settings = replace(job.settings, values=values)
    return Vault(settings, master=job.master, actor=job.settings.actor)  # type: ignore[arg-type]


def run_one(job: Job, org: str, user: str, external: External | None = None,
            progress: Progress = NO_PROGRESS) -> Outcome:
    """Compact one user, turning what stops it into a reported problem (but a summariser
    that cannot work: it would fail for every user alike)."""
    out = Outcome(org, user)
    try:
        return compact_user(open_user(job, org, user), job.cfg, dry_run=job.dry_run,
                            sessions=job.sessions, show_text=job.show_text,
                            external=external, progress=progress)
    except SummarizerBroken:
        raise
    except Busy:
        out.problem("busy", "the user's lock is held (a hook or a command is writing); "
                    "skipped, the next run retries", EX_TEMPFAIL)
    except MemError as exc:
        out.problem("failed", exc.message, exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one user's failure must not stop the others
        if job.debug:
            raise
        out.problem("failed", f"unexpected {type(exc).__name__}", EX_FAILURE)
    return out


def revive(doc: Any) -> Outcome:
    """An Outcome again from a pool worker's JSON answer (plain data: nothing a worker
    sends is unpickled), with the tuples JSON made lists."""
    previews = [CompactPreview(**{**p, "sessions": tuple(p["sessions"]),
                                  "span": tuple(p["span"])}) for p in doc["previews"]]
    return Outcome(**{**doc, "problems": [CompactProblem(**p) for p in doc["problems"]],
                      "previews": previews})


def users(job: Job, org: str | None, shard: tuple[int, int] | None) -> list[tuple[str, str]]:
    return pool.users(job.settings.vault, org, shard)


_JOB: Job | None = None
_EXTERNAL: External | None = None  # a worker's run of the external summariser


def _init_worker(job: Job, parent: int, watch: tuple[int, int] | None,
                 inherited: list[int]) -> None:
    """A pool worker's start: it dies with the parent (killed, it must not go on holding
    the key and users' locks), and closes what the parent held before the pool, such as
    the lock fd of a `flock -n` wrapper, so that nothing it holds keeps that lock once
    the parent is gone. (`watch` and `inherited` are fd numbers of a forked worker.)
    Ctrl-C on the terminal reaches every process of the group: a worker leaves it to
    the parent, which stops the pool."""
    global _JOB, _EXTERNAL
    import signal

    from memvault.process import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    if watch is not None:
        os.close(watch[1])  # only the parent holds the write end: its death closes it
    die_with_parent(parent, None if watch is None else watch[0])
    for fd in inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    _JOB = job
    _EXTERNAL = _external(job)


def _external(job: Job) -> External | None:
    return None if is_builtin(job.cfg.summarizer) else External(job.cfg)


def _work_many(who: list[tuple[str, str]]) -> list[Outcome]:
    assert _JOB is not None
    return [run_one(_JOB, *one, external=_EXTERNAL) for one in who]


class _Users:
    """Progress over users: done and total, who is under way, messages archived."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress, self.archived = progress, 0
        progress.start(total, "users")

    def begin(self, org: str, user: str) -> None:
        archived = counted(self.archived, "message", grouped=True)
        self.progress.note(f"{org}/{user}, {archived} archived")

    def done(self, out: Outcome) -> None:
        self.archived += out.archived
        self.progress.advance()
        self.progress.keep()
        self.progress.note(f"{counted(self.archived, 'message', grouped=True)} archived")


def run_many(job: Job, who: list[tuple[str, str]], jobs: int,
             progress: Progress = NO_PROGRESS) -> Iterator[Outcome]:
    """Compact each user; with `jobs` > 1, in a pool of that many worker processes
    (each handles many users: a process per user would cost more than the work).

    Workers are forked (ops/pool.py), so the key reaches them in memory, never pickled,
    and no new interpreter reads the current folder; where the platform cannot fork,
    the users are compacted here, one after the other. A worker has no MEM_* variable,
    and sends back each Outcome as JSON, made again by `revive`: nothing a worker sends
    is unpickled (an external summariser's answer is parsed as text in the worker).

    `progress` counts users; one is kept once its compaction is over. Stopped (Ctrl-C,
    a summariser that cannot work, a worker that fails or dies: one line, the error's
    exit code), the pool is ended at once, its workers killed
    where they are (each step of theirs is atomic or journalled: the next run finishes
    or undoes it) and waited for: none is left behind."""
    tally = _Users(progress, len(who))
    if jobs <= 1 or len(who) <= 1 or not pool.can_fork():
        external = _external(job)
        for org, user in who:
            tally.begin(org, user)
            out = run_one(job, org, user, external)
            tally.done(out)
            yield out
        return
    yield from pool.over_users(who, jobs, job, _init_worker, _work_many, tally.done,
                               revive)


def summarise_outcomes(outcomes: Sequence[Outcome], dry_run: bool) -> CompactResult:
    problems = tuple(p for o in outcomes for p in o.problems)
    failed = sum(1 for p in problems if p.problem == "failed")
    busy = sum(1 for p in problems if p.problem == "busy")
    summarizer = sum(1 for p in problems if p.problem == "summarizer")
    changed = sum(1 for p in problems if p.problem == "changed")
    codes = [p.exit_code for p in problems if p.problem == "failed"]
    if codes:
        exit_code = EX_DATAERR if EX_DATAERR in codes else codes[0]
    elif busy or summarizer:
        exit_code = EX_TEMPFAIL
    else:
        exit_code = 0
    return CompactResult(
        users=len(outcomes),
        sessions_compacted=sum(o.sessions_compacted for o in outcomes),
        summaries_added=sum(o.summaries_added for o in outcomes),
        facts_added=sum(o.facts_added for o in outcomes),
        facts_capped=sum(o.facts_capped for o in outcomes),
        archived=sum(o.archived for o in outcomes),
        deduplicated=sum(o.deduplicated for o in outcomes),
        rekeyed=sum(o.rekeyed for o in outcomes),
        skipped_busy=busy, skipped_changed=changed, summarizer_failed=summarizer,
        failed=failed, dry_run=dry_run, problems=problems,
        previews=tuple(p for o in outcomes for p in o.previews), exit_code=exit_code)


def check_sessions(names: Sequence[str]) -> None:
    from memvault.config import validate_name

    for name in names:
        validate_name("session", name)


def unknown_sessions(vault: Vault, names: Sequence[str]) -> list[str]:
    return [n for n in names if not vault.store.layout.path(session_file(n)).exists()]

