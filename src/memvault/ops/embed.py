"""Embedding (SPEC §11): stored records become sealed vectors, after storing and never in
the time an agent waits on.

The work follows compaction's pattern: plan from what costs nothing (clear line headers
and the ids the vector store holds), embed without the user's lock (a model, local or
remote, may take seconds a batch), then add each batch under the lock only if every
record in it is unchanged since it was read. So a record forgotten, rewritten or moved
to the archive meanwhile never gets a vector back: its batch item is dropped and the
next run sees the record as it is then. Each batch added is kept: a run killed or
stopped half way resumes where it stopped. A record is checked where it was read: its
line at the offset it was read at (and the lines beside it), so a batch costs its own
lines, never its file's others (a long session's embedding is linear in its size).

A record has a current vector when the store holds one for its id: the store drops a
record's vector whenever a write changes the text it was embedded from (its digest, its
neighbours' included) and when a record is forgotten, so only the records without a
vector need reading: a line file's are found by its clear headers (nothing decrypted)
and read from where their lines start, with the turns beside a person's among them, so
one record waiting in a long session costs its few lines, never the session.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from memvault.errors import EX_FAILURE, EX_TEMPFAIL, Busy, ConfigError, MemError
from memvault.model.location import Location
from memvault.model.progress import NO_PROGRESS, Progress
from memvault.model.records import ARCHIVE, DOC_FILES, Record
from memvault.text.words import counted
from memvault.vault.vault import Vault, Written

if TYPE_CHECKING:
    from memvault.config import Settings
    from memvault.embed.base import Embedder, ModelId, Vectors
    from memvault.index.vectors import VectorStore
    from memvault.model.results import EmbedResult, UserProblem
    from memvault.storage.state import UserState
    from memvault.storage.userstore import SealedLine

BATCH = 256  # texts embedded at once, and records added under the lock at once


@dataclass(frozen=True)
class Pending:
    """A record to embed, as it was read, and what must be unchanged to add its vector:
    the digest of its line's bytes (a line file; a rewrite draws a new nonce, so any
    change changes it), or of its text (a document)."""

    memory_id: str
    file: str
    mark: str
    digest: bytes
    archived: bool
    text: str
    beside: tuple[str | None, str | None] = (None, None)  # what its vector borrows
    # A person's turn: the (id, mark) of the lines just before and after it as read
    # (None: no line there), which must be unchanged too; None: not checked.
    around: Around | None = None
    # A line file's record: where its line starts, and where the line before it starts
    # (a person's turn with one): where the check reads them, and nothing else.
    at: int | None = None
    before_at: int | None = None


Around = tuple["tuple[str, str] | None", "tuple[str, str] | None"]


@dataclass
class Outcome:
    """One user's embedding, summed into the EmbedResult."""

    org: str
    user: str
    embedded: int = 0
    pending: int = 0
    model: str | None = None
    problems: list[UserProblem] = field(default_factory=list)

    def problem(self, kind: str, message: str, exit_code: int,
                hint: str | None = None) -> None:
        from memvault.model.results import UserProblem

        self.problems.append(UserProblem(self.org, self.user, kind, message, exit_code,
                                          hint))


# --- what is pending ---------------------------------------------------------------------


def pending_count(vault: Vault) -> int:
    """Records that wait for a vector: the state's counters less the vectors stored (no
    record is decrypted). Vectors of a model other than the configured one are counted
    as stored: `check_model` says that they must be made again."""
    if not vault.exists():
        return 0
    state = vault.state()
    records = sum(state.live.values()) + sum(state.archived.values())
    return max(0, records - vault.vector_store(state.key_version).count())


def stored_model(vault: Vault) -> ModelId | None:
    """The model the user's vectors were made by (None: no vectors yet)."""
    if not vault.exists():
        return None
    return vault.vector_store(vault.state().key_version).model()


def configured_model(settings: Settings) -> ModelId | None:
    """The model the settings name, known without loading it (the built-in one, or an
    endpoint's model when its dimensions are configured); None when it is not known."""
    cfg = settings.embeddings
    if cfg.provider == "builtin":
        from memvault.embed.builtin import MODEL

        return MODEL
    if cfg.provider == "none" or not cfg.dimensions:
        return None
    from memvault.embed.base import ModelId

    return ModelId(cfg.provider, str(cfg.model), int(cfg.dimensions))


def check_model(store: VectorStore, model: ModelId) -> None:
    """ConfigError when the stored vectors were made by another model than `model`: a
    vector is only ever compared with vectors of its own model."""
    stored = store.model()
    if stored is not None and stored != model:
        raise ConfigError(f"the vectors of this memory were made by {stored.key()}, the "
                          f"configured embeddings model is {model.key()}",
                          hint="embed-rebuild")


def _pending_in(vault: Vault, relpath: str, held: AbstractSet[bytes]) -> Iterator[Pending]:
    """The records of one file without a vector (`held`: the ids that have one, encoded).
    A line file is read a line at a time and a line decrypted only when its record has
    no vector, or is beside a person's turn that has none (what its vector borrows):
    the clear headers say which, so one record waiting in a long session costs its few
    lines, never the session's others. A document (small, one envelope) is always
    decrypted, and its records checked against their vectors' digests."""
    from memvault.index.base import beside, said_by_a_person
    from memvault.index.vectors import embed_text, text_digest, vector_digest

    store = vault.store
    archived = relpath.startswith(ARCHIVE + "/")
    if relpath in DOC_FILES:
        records = store.doc_records(relpath)
        digests = vault.vector_store(vault.state().key_version).digests(
            {r.memory_id for r in records if r.memory_id.encode() in held})
        for record in records:
            digest = text_digest(embed_text(record))
            if digests.get(record.memory_id) != digest:
                yield Pending(record.memory_id, relpath, digest.hex(), digest, archived,
                              embed_text(record))
        return
    opened: dict[int, Record | None] = {}  # the lines of the last window, once each

    def read(line: SealedLine) -> Record | None:
        if line.at not in opened:
            opened[line.at] = store.open_sealed(line)
        return opened[line.at]

    # Each waiting line with the ones just before and after it: memory holds three.
    for before, line, after in store.lines_without(relpath, held):
        for gone in [at for at in opened if before is None or at < before.at]:
            del opened[gone]
        mark = line.digest
        own = read(line) if mark is not None else None
        if own is None or mark is None:
            continue  # not a whole record's line: nor embedded (as read_lines skips it)
        person = said_by_a_person(own)
        b = read(before) if before is not None and person else None
        a = read(after) if after is not None and person else None
        row = [r for r in (b, own, a) if r is not None]
        text = embed_text(own)
        near = beside(row, 1 if b is not None else 0)
        around = ((before.memory_id or "", before.digest or "") if before else None,
                  (after.memory_id or "", after.digest or "") if after and a else None)
        yield Pending(own.memory_id, relpath, mark, vector_digest(text, near), archived, text,
                      near, around if person else None, line.at,
                      before.at if before and person else None)


def _batches(items: Iterable[Pending], size: int) -> Iterator[list[Pending]]:
    batch: list[Pending] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


# --- adding under the lock, if unchanged ---------------------------------------------------


def _unchanged(vault: Vault, batch: Sequence[Pending]) -> list[Pending]:
    """The items whose record is still what was read (caller holds the lock): the same
    line bytes at the same offset of the same file, or the same text in the same
    document. Of a line file only the batch's lines and those beside them are read (their
    bytes' digests, nothing decrypted): a file rewritten meanwhile (a forget, a
    compaction) re-seals every line it keeps, so no line of it has the digest read."""
    from memvault.index.vectors import embed_text, text_digest

    docs: dict[str, dict[str, str]] = {}
    lines: dict[str, dict[int, tuple[str | None, int]]] = {}
    for relpath in {item.file for item in batch}:
        if relpath in DOC_FILES:
            docs[relpath] = {r.memory_id: text_digest(embed_text(r)).hex()
                             for r in vault.store.doc_records(relpath)}
        else:
            lines[relpath] = vault.store.line_digests(relpath, (
                at for item in batch if item.file == relpath
                for at in (item.at, item.before_at) if at is not None))
    return [item for item in batch
            if (docs[item.file].get(item.memory_id) == item.mark if item.file in docs
                else _in_place(item, lines[item.file]))]


def _in_place(item: Pending, lines: dict[int, tuple[str | None, int]]) -> bool:
    """Whether a line file's item is still its line, at the offset it was read at: the
    same bytes there and, a person's turn, the same lines just before and after it (one
    said beside it meanwhile, or a neighbour rewritten, changes what its vector borrows).
    `lines`: the digest and end of the lines read at the batch's offsets."""
    own = lines.get(item.at) if item.at is not None else None
    if own is None or own[0] != item.mark:
        return False
    if item.around is None:
        return True
    before, after = item.around
    if before is None:
        if item.at != 0:
            return False
    elif item.before_at is None or lines.get(item.before_at) != (before[1], item.at):
        return False
    # The line after it now (None: none, or only a torn or unfinished one, as read).
    now = lines.get(own[1], (None, 0))[0]
    return now is None if after is None else after[1] == now


def _add(vault: Vault, model: ModelId, batch: Sequence[Pending], vectors: Vectors) -> int:
    """Add the vectors of a batch, under the user's lock, for the records unchanged since
    they were read; how many were added. A user frozen, being compacted or re-keyed
    meanwhile gets nothing now (the next run adds them)."""
    from memvault.index.vectors import VectorItem

    rows = {item.memory_id: vectors[n] for n, item in enumerate(batch)}
    with vault.lock():
        state = vault.locked_state()
        if state.frozen or state.compacting is not None or state.retire_through is not None:
            return 0
        store = vault.vector_store(state.key_version)
        check_model(store, model)
        held = store.digests({item.memory_id for item in batch})  # not every vector's
        kept = [item for item in _unchanged(vault, batch)
                if held.get(item.memory_id) != item.digest]
        if not kept:
            return 0
        # Each with the file it was read from (checked unchanged above): the store
        # need not ask the index where the records live, which read its document store
        # (mapped pages that grew the run with the history held) for every batch.
        store.add(model, [VectorItem(item.memory_id, item.digest, item.archived,
                                     rows[item.memory_id], item.file) for item in kept])
    return len(kept)


def _embed_batch(embedder: Embedder, batch: Sequence[Pending]) -> Vectors:
    """The batch's vectors: a person's turn's mixed with the people's beside it
    (index/vectors.py `mixed_rows`), each text embedded once."""
    if all(item.beside == (None, None) for item in batch):
        return embedder.embed([item.text for item in batch])
    import numpy as np

    from memvault.index.vectors import mixed_rows

    texts = list(dict.fromkeys(t for item in batch for t in (item.text, *item.beside)
                               if t is not None))
    at = {t: n for n, t in enumerate(texts)}
    rows = embedder.embed(texts)
    before = [-1 if item.beside[0] is None else at[item.beside[0]] for item in batch]
    after = [-1 if item.beside[1] is None else at[item.beside[1]] for item in batch]
    out: Vectors = mixed_rows(rows, [at[item.text] for item in batch], before, after)
    # A record that borrows nothing keeps the row the model gave, as before.
    alone = [n for n, item in enumerate(batch) if item.beside == (None, None)]
    out[alone] = np.asarray(rows, dtype=np.float32)[[at[batch[n].text] for n in alone]]
    return out


# --- one user --------------------------------------------------------------------------------


def embed_pending(vault: Vault, embedder: Embedder, *, rebuild: bool = False,
                  progress: Progress = NO_PROGRESS, batch: int = BATCH) -> EmbedResult:
    """Embed every record of the user without a current vector (archived and superseded
    ones too: searches that ask for them rank them by meaning as well). `rebuild`: drop
    every vector first and embed everything again (the way to change model). Batches of
    `batch` records are embedded without the lock and each added under it if unchanged;
    `progress` counts the user's files, keeping the records added."""
    out = embed_user(vault, embedder, rebuild=rebuild, progress=progress, batch=batch)
    return summarise([out])


def embed_user(vault: Vault, embedder: Embedder, *, rebuild: bool = False,
               progress: Progress = NO_PROGRESS, batch: int = BATCH) -> Outcome:
    """embed_pending for one user, as an Outcome. Busy and MemError pass to the caller."""
    model = embedder.model
    out = Outcome(vault.org, vault.user, model=model.key())
    if not vault.exists():
        return out
    state = vault.state()  # finishes what a killed compaction step left
    if state.frozen:  # restricted: no processing of the memory, derived or not
        out.problem("frozen", "the user's memory is frozen; not embedded", 0)
        out.pending = pending_count(vault)
        return out
    if rebuild:
        with vault.lock():
            state = vault.locked_state()
            vault.vector_store(state.key_version).clear()
    store = vault.vector_store(state.key_version)
    check_model(store, model)
    held = store.ids()
    files = list(vault.layout.content_files(include_archive=True))
    progress.start(len(files), "files")

    def pending() -> Iterator[Pending]:
        for relpath in files:
            yield from _pending_in(vault, relpath, held)
            progress.advance()

    for group in _batches(pending(), batch):
        added = _add(vault, model, group, _embed_batch(embedder, group))
        out.embedded += added
        progress.keep(added)
        progress.note(f"{counted(out.embedded, 'record', grouped=True)} embedded")
    out.pending = pending_count(vault)
    return out


def embed_new(vault: Vault, embedder: Embedder, memory_ids: Collection[str],
              batch: int = BATCH) -> int:
    """Embed the records with these ids that have no vector (what an add or an ingest
    just stored), and the person's turns beside them whose vector they made stale: the
    index locates each, one line (or one document) is decrypted per record and per turn
    beside one, so the work is proportional to them, never to the user's history. Records
    gone since are passed over. Returns how many vectors were added; 0 when the stored
    vectors are of another model (`mem doctor` says so)."""
    if not memory_ids or not vault.exists():
        return 0
    if isinstance(memory_ids, Written) and memory_ids.more:
        # More were written than are named (a large pull): whatever waits is embedded.
        return embed_user(vault, embedder, batch=batch).embedded
    state = vault.state()
    if state.frozen:
        return 0
    store = vault.vector_store(state.key_version)
    stored = store.model()
    if stored is not None and stored != embedder.model:
        return 0
    held = store.ids()
    wanted = sorted(i for i in memory_ids if i.encode() not in held)
    added = 0
    for at in range(0, len(wanted), batch):
        items = list(_located(vault, state, wanted[at:at + batch], held))
        if items:
            added += _add(vault, embedder.model, items, _embed_batch(embedder, items))
    return added


def _located(vault: Vault, state: UserState, ids: list[str], held: AbstractSet[bytes]
             ) -> Iterator[Pending]:
    """The records with these ids as Pending items, and the turns beside them that have no
    vector (a person's turn whose vector a turn said after it made stale), read through
    the index: the clear headers of the lines around each first, read from where the
    index puts it (then a record read after them is at least as new as the mark it is
    added under), then one line per record and per turn beside one (what it borrows, and
    whether it is a person's). A long session's other lines are never read."""
    from memvault.index.base import IndexUnavailable, beside, said_by_a_person
    from memvault.index.vectors import embed_text, text_digest, vector_digest

    index = vault.ready_index(state)
    try:
        located: dict[str, Location] = index.locate(ids)
    except IndexUnavailable:
        return
    docs: dict[str, dict[str, Record]] = {}
    lines: dict[str, list[tuple[str, int]]] = {}
    for memory_id, location in sorted(located.items(), key=lambda kv: kv[1].file):
        relpath = location.file
        if location.offset is not None:
            lines.setdefault(relpath, []).append((memory_id, location.offset))
            continue
        if relpath not in docs:
            docs[relpath] = {r.memory_id: r for r in vault.store.doc_records(relpath)}
        record = docs[relpath].get(memory_id)
        if record is not None:
            text = embed_text(record)
            digest = text_digest(text)
            yield Pending(memory_id, relpath, digest.hex(), digest,
                          relpath.startswith(ARCHIVE + "/"), text)
    for relpath, wanted in lines.items():
        archived = relpath.startswith(ARCHIVE + "/")
        # Two lines each side: a turn beside a record may be embedded too, beside its own.
        heads = vault.store.lines_near(relpath, [at for _, at in wanted], 2)
        after = {at: end for at, (_, _, end) in heads.items() if end in heads}
        before = {end: at for at, end in after.items()}
        todo = {at for memory_id, at in wanted if at in heads and heads[at][0] == memory_id}
        todo |= {k for at in list(todo) for k in _row(at, before, after)
                 if (m := heads[k][0]) is not None and m.encode() not in held}
        records = {k: r for k in {k for at in todo for k in _row(at, before, after)}
                   if (m := heads[k][0]) is not None
                   and (r := vault.store.read_at(Location.line(relpath, k), m)) is not None}
        for at in sorted(todo):
            seq = _row(at, before, after)
            if any(k not in records for k in seq):
                continue  # gone meanwhile: the next run sees the file as it is then
            record = records[at]
            text = embed_text(record)
            near = beside([records[k] for k in seq], seq.index(at))
            person = said_by_a_person(record)
            b, a = before.get(at), after.get(at)
            around = ((records[b].memory_id, heads[b][1]) if b is not None else None,
                      (records[a].memory_id, heads[a][1]) if a is not None else None)
            yield Pending(record.memory_id, relpath, heads[at][1], vector_digest(text, near),
                          archived, text, near, around if person else None, at,
                          b if person else None)


def _row(at: int, before: dict[int, int], after: dict[int, int]) -> list[int]:
    """The offsets of the line at `at` and of the lines just before and after it."""
    return [k for k in (before.get(at), at, after.get(at)) if k is not None]


# --- many users --------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What every worker needs: the settings and the master key, loaded once by the
    parent, resolved (a forked worker has no MEM_* variable); the embedder is opened in
    each worker."""

    settings: Settings
    master: object
    rebuild: bool
    debug: bool = field(default_factory=lambda: bool(os.environ.get("MEM_DEBUG")))


def open_user(job: Job, org: str, user: str) -> Vault:
    values = {**job.settings.values, "org": org, "user": user}
    return Vault(replace(job.settings, values=values), master=job.master,  # type: ignore[arg-type]
                 actor=job.settings.actor)


def run_one(job: Job, embedder: Embedder, org: str, user: str,
            progress: Progress = NO_PROGRESS) -> Outcome:
    """Embed one user, turning what stops them into a reported problem (but a provider
    that fails: it would fail for every user alike)."""
    from memvault.embed.base import EmbeddingsError

    out = Outcome(org, user, model=embedder.model.key())
    try:
        return embed_user(open_user(job, org, user), embedder, rebuild=job.rebuild,
                          progress=progress)
    except EmbeddingsError:
        raise
    except Busy:
        out.problem("busy", "the user's lock is held (a hook or a command is writing); "
                    "skipped, the next run retries", EX_TEMPFAIL)
    except MemError as exc:
        out.problem("failed", exc.message, exc.exit_code, exc.hint)
    except Exception as exc:  # noqa: BLE001 - one user's failure must not stop the others
        if job.debug:
            raise
        out.problem("failed", f"unexpected {type(exc).__name__}", EX_FAILURE)
    return out


def revive(doc: Any) -> Outcome:
    """An Outcome again from a pool worker's JSON answer (plain data: nothing a worker
    sends is unpickled)."""
    from memvault.model.results import UserProblem

    return Outcome(**{**doc, "problems": [UserProblem(**p) for p in doc["problems"]]})


def users(job: Job, org: str | None, shard: tuple[int, int] | None
          ) -> list[tuple[str, str]]:
    """Every user of the org (or of the vault), or of one stable shard of them: the
    same split as compaction's, so that a host compacts and embeds the same users."""
    from memvault.ops import pool

    return pool.users(job.settings.vault, org, shard)


_JOB: Job | None = None
_EMBEDDER: Embedder | None = None  # a worker's own, opened once


def _init_worker(job: Job, parent: int, watch: tuple[int, int] | None,
                 inherited: list[int]) -> None:
    """A pool worker's start, as compaction's (it dies with the parent, leaves Ctrl-C
    to it, closes what the parent held before the pool); it opens its embedder once."""
    global _JOB, _EMBEDDER
    import contextlib
    import signal

    from memvault.process import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if watch is not None:
        os.close(watch[1])
    die_with_parent(parent, None if watch is None else watch[0])
    for fd in inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    _JOB = job
    _EMBEDDER = open_embedder(job.settings)


def open_embedder(settings: Settings) -> Embedder:
    """The configured embedder; EmbeddingsUnavailable when the provider is none."""
    from memvault.embed import open_embedder as opened
    from memvault.embed.base import EmbeddingsUnavailable

    embedder = opened(settings.embeddings)
    if embedder is None:
        raise EmbeddingsUnavailable("embeddings are turned off (provider: none)",
                                    hint="embeddings-none")
    return embedder


def _work_many(who: list[tuple[str, str]]) -> list[Outcome]:
    assert _JOB is not None and _EMBEDDER is not None
    return [run_one(_JOB, _EMBEDDER, *one) for one in who]


def run_many(job: Job, who: list[tuple[str, str]], jobs: int,
             progress: Progress = NO_PROGRESS) -> Iterator[Outcome]:
    """Embed each user; with `jobs` > 1 in a pool of forked workers, each with its own
    embedder (compaction's run_many says why forked, how outcomes come back as JSON,
    never pickled, and how a stop ends the pool); where the platform cannot fork, here,
    one after the other. A worker keeps no MEM_* variable but the one
    `embeddings.key_env` may name (the provider's key is its to read). `progress` counts
    users, kept once a user's run is over."""
    progress.start(len(who), "users")
    embedded = 0

    def done(out: Outcome) -> None:
        nonlocal embedded
        embedded += out.embedded
        progress.advance()
        progress.keep()
        progress.note(f"{counted(embedded, 'record', grouped=True)} embedded")

    from memvault.ops import pool

    if jobs <= 1 or len(who) <= 1 or not pool.can_fork():
        embedder = open_embedder(job.settings)
        for org, user in who:
            progress.note(f"{org}/{user}, {counted(embedded, 'record', grouped=True)} embedded")
            out = run_one(job, embedder, org, user)
            done(out)
            yield out
        return
    key_env = job.settings.embeddings.key_env
    yield from pool.over_users(who, jobs, job, _init_worker, _work_many, done, revive,
                               keep=(key_env,) if key_env else ())


def summarise(outcomes: Sequence[Outcome]) -> EmbedResult:
    from memvault.model.results import EmbedResult

    problems = tuple(p for o in outcomes for p in o.problems)
    codes = [p.exit_code for p in problems if p.exit_code]
    models = sorted({o.model for o in outcomes if o.model})
    return EmbedResult(
        users=len(outcomes), embedded=sum(o.embedded for o in outcomes),
        pending=sum(o.pending for o in outcomes),
        model=models[0] if len(models) == 1 else None, problems=problems,
        exit_code=_exit_code(codes))


def _exit_code(codes: list[int]) -> int:
    from memvault.errors import EX_DATAERR

    if not codes:
        return 0
    if EX_DATAERR in codes:
        return EX_DATAERR
    failed = [c for c in codes if c != EX_TEMPFAIL]
    return failed[0] if failed else EX_TEMPFAIL
