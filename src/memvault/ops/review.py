"""The review queue: what in the memory is probably junk, for a person or an agent to keep,
merge or forget (`mem review`, the viewer's review screen).

It looks at memories, the records that are not transcript messages (CLAUDE.md and
preferences.json: what the brief is made of), current ones only (a superseded record is
already settled). Each finding names its records, the one a merge keeps, and the rule
that found it (docs/guide.md, "Reviewing the memory"):

- duplicate: the same text, whatever its type, once case, spacing and a final full stop
  are set aside. A merge keeps the one the user stated (not a summariser's inference),
  then the most important, then the newest.
- near_duplicate: by words, the same stems (the index's stemming, stopwords aside) for
  at least NEAR_WORDS of their union (Jaccard), both with MIN_NEAR_STEMS stems or more;
  by meaning, where the memory has vectors of the configured model, a cosine of
  NEAR_MEANING or more. Kept as for duplicates.
- superseded_in_fact: the same subject stated twice with different values. A memory's
  first line is read as SUBJECT LINK VALUE, LINK the first of is, are, was, were, ":"
  or "=" (`Favourite editor is vim`, `deploy target: staging`); the subject is what
  comes before it without leading articles and possessives, one to six words, not a
  pronoun or "user" alone; of two current memories of the same category with the same
  subject and link and different values, the older is superseded in fact by the newer.
- noise: harness text or tool output stored as a memory (NOISE_RULES: an agent's
  harness tags and lines, mem's own brief, a tool call or result, a stack trace, a
  diff, terminal colour codes, a file listing, a long unbroken run of characters, JSON,
  text that is mostly not letters).
- unused: stored more than `unused_days` days ago and retrieved (returned by search,
  show or an agent's brief) on none of the last `unused_days` days. Retrieval is noted
  per day in reads.json, from this release on: a memory stored before it counts as
  never retrieved until it is.

A finding the user keeps is marked (reads.json, a keyed mark of its kind and records)
and not proposed again; a new record in it is a new finding.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from memvault.crypto import envelope
from memvault.errors import NotFound, Refused, UsageError
from memvault.index.base import Entry
from memvault.model.location import Location
from memvault.model.records import CLAUDE_MD, DOC_FILES, Record, clean_tags, now_iso
from memvault.model.review_results import (
    DUPLICATE,
    KINDS,
    MERGEABLE,
    NEAR_DUPLICATE,
    NOISE,
    SUPERSEDED_IN_FACT,
    UNUSED,
    EditResult,
    Inspection,
    ReviewDecision,
    ReviewItem,
    ReviewResult,
    SessionDay,
)
from memvault.storage.state import Superseded
from memvault.text.frame import FIRST_WORDS, NAME
from memvault.vault.vault import Vault

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from memvault.storage.state import UserState

UNUSED_DAYS = 90  # as compaction's archive_after_days
NEAR_WORDS = 0.8
MIN_NEAR_STEMS = 4
NEAR_MEANING = 0.95
MAX_SUBJECT_WORDS = 6

# Harness text and tool output: (the rule's name, what finds it). Said in the finding.
NOISE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("harness tag", re.compile(
        r"</?(?:system-reminder|task-notification|command-message|command-name|"
        r"command-args|local-command-caveat|local-command-stdout|local-command-stderr|"
        r"bash-input|bash-stdout|bash-stderr|session_context|environment_context|"
        r"user_instructions|user-prompt-submit-hook|tool_use_error)>", re.I)),
    ("harness line", re.compile(
        r"^[ \t]*(?:\[Request interrupted by user|Caveat: The messages below were generated "
        r"by the user|This session is being continued from a previous conversation|"
        r"# Context from my IDE setup)", re.M)),
    ("mem's own brief", re.compile(
        f"<{re.escape(NAME)}[ >]|{re.escape(FIRST_WORDS)}|^# What you know about this user",
        re.M)),
    ("tool call", re.compile(r"^\s*\[tool [^\]\n]{1,80}\]")),
    ("tool result", re.compile(r"\"type\"\s*:\s*\"tool_(?:use|result)\"|\"tool_use_id\"\s*:")),
    ("stack trace", re.compile(
        r"Traceback \(most recent call last\):|^\s+at [\w.$<>]+ \([^)\n]*:\d+:\d+\)$|"
        r"^\s+File \"[^\"\n]+\", line \d+", re.M)),
    ("diff", re.compile(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@)", re.M)),
    ("terminal colour codes", re.compile(r"\x1b\[|\\x1b\[|\[(?:\d{1,3};)*\d{1,3}m\S")),
    ("file listing", re.compile(r"(?:^|\s)[dl-][rwxsStT-]{9}[.@+]?\s+\d+\s", re.M)),
    # What agents' tools answer (Claude Code, Codex, Gemini CLI), as transcripts keep it.
    ("tool result", re.compile(
        r"^\s*(?:Success\. Updated the following files:|Successfully (?:overwrote|modified|"
        r"wrote to|created|deleted|updated) |Command running in background with ID:|"
        r"Web search results for query:|File created successfully at:|The file \S+ has been "
        r"updated|Todos have been modified successfully|No files found|Found \d+ files?\b|"
        r"Exit code:? \d+|Process exited with code|Current topic: )")),
    ("tool error", re.compile(r"^\s*\[error\] ")),
    ("git output", re.compile(r"^\s*(?:On branch \S+ |\[[\w./-]+ [0-9a-f]{7,}\] )")),
    ("log lines", re.compile(r"\d\d:\d\d:\d\d(?:\.\d+)? \[(?:info|debug|warn|warning|error)\]")),
    ("numbered file lines", re.compile(r"(?:^|\s)\d+→.*?\s\d+→", re.S)),
    ("search hits", re.compile(r"(?:^|\s)[\w./-]+\.\w+:\d+:.*?\s[\w./-]+\.\w+:\d+:", re.S)),
    ("source code", re.compile(
        r"^\s*(?:import [\w.]+\s|from [\w.]+ import |package \w|module \S+ go \d|#!/|"
        r"<\?php|<!DOCTYPE|<(?:div|html|span)\b|#include [<\"]|\[tool\.\w+|"
        r"(?:export |async )?function \w+\(|(?:const|let|var) \w+ = )")),
    ("a path or a command alone", re.compile(r"^\s*(?:/|~/|\./|[A-Za-z]:\\)\S*\s*$")),
    ("unbroken run", re.compile(r"[^\s]{120}")),
)
# Text is machine output when fewer than this share of its visible characters are letters.
MIN_LETTERS = 0.4
_LINK_WORDS = frozenset({"is", "are", "was", "were"})
_LEADING = frozenset({"the", "a", "an", "my", "our", "their", "his", "her", "its", "your",
                      "user's", "users'", "user"})
_NO_SUBJECT = frozenset({"i", "he", "she", "they", "it", "this", "that", "we", "you",
                         "there", "here", "what", "which", "who", "user", "everything",
                         "nothing", "something"})
_SUBJECT_LINE = re.compile(r"[\w'’-]+|[:=]")


def memories(vault: Vault, state: UserState) -> list[Record]:
    """The user's current memories (not messages, not superseded), oldest first."""
    out = [vault.linked(r, state) for home in DOC_FILES for r in vault.store.doc_records(home)]
    out = [r for r in out if r.superseded_by is None]
    out.sort(key=lambda r: (r.created_at, r.memory_id))
    return out


def queue(vault: Vault, unused_days: int = UNUSED_DAYS, kinds: Iterable[str] = KINDS,
          now: datetime | None = None, include_kept: bool = False) -> ReviewResult:
    """The review queue. Reads the two memory documents, the state and reads.json; with
    vectors of the configured model, embeds the memories to compare their meaning."""
    wanted = set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise UsageError(f"unknown kind {sorted(unknown)[0]!r}: choose from "
                         f"{', '.join(KINDS)}", field="kind")
    if unused_days < 1:
        raise UsageError("the days without retrieval must be 1 or more", field="unused_days")
    if not vault.exists():
        return ReviewResult((), 0, unused_days, 0, False)
    state = vault.state()
    found = memories(vault, state)
    by_id = {r.memory_id: r for r in found}
    items: list[ReviewItem] = []
    paired: set[frozenset[str]] = set()  # pairs a finding already holds

    def add(kind: str, ids: list[str], keep: str | None, reason: str,
            score: float | None = None) -> None:
        records = tuple(by_id[i] for i in ids)
        items.append(ReviewItem(_key(vault, kind, ids), kind, records, keep, reason,
                                score))
        paired.update(frozenset((a, b)) for a in ids for b in ids if a < b)

    for group in _duplicates(found):
        ids = [r.memory_id for r in group]
        add(DUPLICATE, ids, _keeper(group), f"the same text {len(group)} times")
    for newer, older, subject in _in_fact(found):
        if frozenset((newer.memory_id, older.memory_id)) not in paired:
            add(SUPERSEDED_IN_FACT, [older.memory_id, newer.memory_id], newer.memory_id,
                f"{subject!r} is stated again with another value")
    meaning, notice = False, None
    if wanted & {NEAR_DUPLICATE}:
        near, meaning, notice = _near(vault, state, found, paired)
        for group, score, how in near:
            add(NEAR_DUPLICATE, [r.memory_id for r in group], _keeper(group),
                f"alike by {how}", round(score, 3))
    for r in found:
        rule = noise_rule(r.content)
        if rule is not None:
            add(NOISE, [r.memory_id], None, rule)
    if UNUSED in wanted:
        for r in _unused(vault, found, unused_days, now or datetime.now(UTC)):
            add(UNUSED, [r.memory_id], None,
                f"not retrieved in the last {unused_days} days")
    kept = vault.reads.load().kept
    shown = [i for i in items if i.kind in wanted and (include_kept or i.key not in kept)]
    hidden = sum(1 for i in items if i.kind in wanted and i.key in kept and not include_kept)
    shown.sort(key=lambda i: KINDS.index(i.kind))
    vault.audit_read("review", [i for item in shown for i in item.memory_ids],
                     count=len(shown))
    return ReviewResult(tuple(shown), len(found), unused_days, hidden, meaning, notice)


def _key(vault: Vault, kind: str, ids: Iterable[str]) -> str:
    """A finding's key: a keyed hash of its kind and records (no content, stable while
    they are the same), short enough to type."""
    body = "\0".join(["review", kind, *sorted(ids)]).encode()
    return envelope.keyed_hash(vault.audit.key, body, size=8)


def _keeper(group: Iterable[Record]) -> str:
    """The one a merge keeps: stated rather than inferred, most important, newest."""
    return max(group, key=lambda r: (not r.inferred, r.importance, r.created_at,
                                     r.memory_id)).memory_id


def normalised(text: str) -> str:
    """Text as duplicates are compared: case, spacing and a final full stop aside."""
    return " ".join(text.casefold().split()).rstrip(".!;。 ")


def _duplicates(found: list[Record]) -> list[list[Record]]:
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in found:
        groups[normalised(r.content)].append(r)
    return [g for g in groups.values() if len(g) > 1]


def subject_of(text: str) -> tuple[str, str, str] | None:
    """(subject, link, value) of a memory's first line, read as SUBJECT LINK VALUE; None
    when it is not said so (module notes)."""
    first = text.strip().split("\n", 1)[0].casefold()
    words = _SUBJECT_LINE.findall(first)
    link = next((i for i, w in enumerate(words) if w in _LINK_WORDS or w in (":", "=")),
                None)
    if link is None or link == 0:
        return None
    subject = words[:link]
    while subject and subject[0] in _LEADING:
        subject = subject[1:]
    value = " ".join(w for w in words[link + 1:] if w not in (":", "="))
    if not subject or len(subject) > MAX_SUBJECT_WORDS or not value:
        return None
    if len(subject) == 1 and subject[0] in _NO_SUBJECT:
        return None
    return " ".join(subject), words[link], normalised(value)


def _in_fact(found: list[Record]) -> list[tuple[Record, Record, str]]:
    """(newer, older, subject) for each older memory whose subject a newer one states
    with another value (same category)."""
    latest: dict[tuple[str, str, str], tuple[Record, str]] = {}
    out: list[tuple[Record, Record, str]] = []
    for r in reversed(found):  # newest first
        said = subject_of(r.content) if r.type != "summary" else None
        if said is None:
            continue
        subject, link, value = said
        key = (r.category, subject, link)
        if key in latest:
            newer, newer_value = latest[key]
            if newer_value != value:
                out.append((newer, r, subject))
        else:
            latest[key] = (r, value)
    return out


def _near(vault: Vault, state: UserState, found: list[Record],
          paired: set[frozenset[str]]
          ) -> tuple[list[tuple[list[Record], float, str]], bool, str | None]:
    """Groups of near duplicates (by words, then by meaning where there are vectors),
    their least likeness and how they were found; whether meaning was used, and why
    not when it could not be."""
    analyzer = vault.search_index(state.key_version).analyzer
    stems = [frozenset(analyzer.query_terms(r.content)) for r in found]
    pairs: dict[tuple[int, int], tuple[float, str]] = {}
    for a, b, score in _similar_sets(stems):
        pairs[(a, b)] = (score, "words")
    meaning, notice = False, None
    vectors = _vectors(vault, state, found)
    if isinstance(vectors, str):
        notice = vectors
    elif vectors is not None:
        meaning = True
        for a, b, score in _close(vectors):
            pairs.setdefault((a, b), (score, "meaning"))
    # Pairs joined into groups (a copy said three ways is one finding), minus pairs an
    # earlier finding holds.
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    kept: dict[tuple[int, int], tuple[float, str]] = {}
    for (a, b), value in pairs.items():
        if frozenset((found[a].memory_id, found[b].memory_id)) in paired:
            continue
        kept[(a, b)] = value
        parent[root(a)] = root(b)
    groups: dict[int, list[int]] = defaultdict(list)
    for a, b in kept:
        for i in (a, b):
            if i not in groups[root(i)]:
                groups[root(i)].append(i)
    out = []
    for members in groups.values():
        inside = [v for (a, b), v in kept.items() if a in members and b in members]
        how = "words" if all(h == "words" for _, h in inside) else \
            "meaning" if all(h == "meaning" for _, h in inside) else "words and meaning"
        out.append(([found[i] for i in sorted(members)], min(s for s, _ in inside), how))
    return out, meaning, notice


def _similar_sets(sets: list[frozenset[str]]) -> Iterable[tuple[int, int, float]]:
    """Pairs of sets with a Jaccard of NEAR_WORDS or more, by prefix filtering: each set's
    rarest stems are its prefix, and two sets that alike share a stem of their prefixes,
    so only those pairs are compared (not every pair of memories)."""
    import math

    frequency: dict[str, int] = defaultdict(int)
    for s in sets:
        for stem in s:
            frequency[stem] += 1
    by_prefix: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        if len(s) < MIN_NEAR_STEMS:
            continue
        ordered = sorted(s, key=lambda t: (frequency[t], t))
        for stem in ordered[:len(s) - math.ceil(NEAR_WORDS * len(s)) + 1]:
            by_prefix[stem].append(i)
    seen: set[tuple[int, int]] = set()
    for members in by_prefix.values():
        for x, a in enumerate(members):
            for b in members[x + 1:]:
                if (a, b) in seen:
                    continue
                seen.add((a, b))
                score = len(sets[a] & sets[b]) / len(sets[a] | sets[b])
                if score >= NEAR_WORDS:
                    yield a, b, score


def _vectors(vault: Vault, state: UserState, found: list[Record]) -> object:
    """The memories' vectors by the configured model when the memory has vectors of it
    (None when it has none; a string: why they could not be had)."""
    from memvault.embed import open_embedder
    from memvault.embed.base import EmbeddingsError
    from memvault.index.base import IndexUnavailable
    from memvault.index.vectors import embed_text

    if len(found) < 2:
        return None
    embedder = open_embedder(vault.settings.embeddings)
    if embedder is None:
        return None
    try:
        store = vault.vector_store(state.key_version)
        if not store.count() or store.model() != embedder.model:
            return None
        return embedder.embed([embed_text(r) for r in found])
    except IndexUnavailable:
        return None
    except EmbeddingsError as e:
        return f"{e.message}: near duplicates by words only"


def _close(vectors: object) -> Iterable[tuple[int, int, float]]:
    """Pairs of unit vectors with a cosine of NEAR_MEANING or more, a block at a time."""
    import numpy as np

    m = np.asarray(vectors, dtype=np.float32)
    block = 512
    for start in range(0, len(m), block):
        sims = m[start:start + block] @ m.T
        rows, cols = np.nonzero(sims >= NEAR_MEANING)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            a = start + r
            if a < c:
                yield a, c, float(sims[r, c])


def noise_rule(text: str) -> str | None:
    """The rule by which `text` is harness text or tool output, or None."""
    for name, pattern in NOISE_RULES:
        if pattern.search(text):
            return name
    stripped = text.strip()
    if stripped[:1] in "{[" and len(stripped) > 2:
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict | list) and len(parsed) > 1:
            return "JSON"
    visible = [c for c in stripped if not c.isspace()]
    if len(visible) >= 20 and sum(c.isalpha() for c in visible) < MIN_LETTERS * len(visible):
        return "mostly not letters"
    return None


def _unused(vault: Vault, found: list[Record], days: int, now: datetime) -> list[Record]:
    cut = (now - timedelta(days=days)).astimezone(UTC).isoformat(
        timespec="microseconds").replace("+00:00", "Z")  # as records' times are written
    retrieved = vault.reads.load().records
    day = cut[:10]
    return [r for r in found if r.created_at and r.created_at < cut
            and retrieved.get(vault.memory_mark(r.memory_id), "") < day]


# --- decisions ---------------------------------------------------------------------------


def find(vault: Vault, key: str, unused_days: int = UNUSED_DAYS) -> ReviewItem:
    """The finding with this key, as the queue has it now (kept findings included)."""
    for item in queue(vault, unused_days, include_kept=True).items:
        if item.key == key.strip().lower():
            return item
    raise NotFound(f"no review finding {key}: the queue changed since it was listed; "
                   "run mem review again")


def keep(vault: Vault, item: ReviewItem) -> ReviewDecision:
    """Keep what the finding names as it is: it is not proposed again."""
    vault.reads.keep(item.key)
    audit_id = vault.audit.append("review.keep", ids=list(item.memory_ids), kind=item.kind)
    return ReviewDecision(item.key, "keep", item.keep, (), audit_id)


def merge(vault: Vault, item: ReviewItem) -> ReviewDecision:
    """Settle a duplicate or a superseded fact: the record it keeps stays current and the
    others are superseded, in a chain (each record names one it replaces): the oldest
    first, the kept one last. A record that already replaces another cannot be a link
    but the first: such a finding is refused, nothing changed (forget the copies)."""
    if item.kind not in MERGEABLE or item.keep is None:
        raise UsageError(f"a {item.kind.replace('_', ' ')} finding has nothing to merge "
                         "into: keep it or forget it", field="merge")
    with vault.transaction() as tx:
        docs = {home: tx.store.read_doc(home) for home in DOC_FILES}
        records = {home: [Record.from_stored(r) for r in (doc or {}).get("records", [])]
                   for home, doc in docs.items()}
        by_id = {r.memory_id: (home, r) for home, rs in records.items() for r in rs}
        missing = [i for i in item.memory_ids if i not in by_id]
        if missing or any(tx.state.superseded_by(i) for i in item.memory_ids):
            raise NotFound(f"review finding {item.key} changed since it was listed; run "
                           "mem review again")
        others = sorted((by_id[i][1] for i in item.others),
                        key=lambda r: (r.supersedes is None, r.created_at, r.memory_id))
        chain = [*others, by_id[item.keep][1]]
        for r in chain[1:]:
            if r.supersedes is not None:
                raise Refused(f"cannot merge: {r.memory_id} already replaces "
                              f"{r.supersedes}; forget the copies instead",
                              field="merge")
        stamp = now_iso()
        changed: set[str] = set()
        for old, new in zip(chain, chain[1:], strict=False):
            new.supersedes, new.updated_at = old.memory_id, stamp
            tx.state.superseded[old.memory_id] = Superseded(new.memory_id, old.archived)
            old.superseded_by = new.memory_id
            changed.update((by_id[old.memory_id][0], by_id[new.memory_id][0]))
        for home in changed:
            doc = docs[home] or {"format": 1, "records": []}
            for r in records[home]:
                r.key_version = tx.epoch
            doc["records"] = [r.stored() for r in records[home]]
            tx.write_doc(home, doc)
        tx.index(Entry(r, Location.doc(by_id[r.memory_id][0])) for r in chain)
        tx.touch()
        audit_id = tx.audit("review.merge", [r.memory_id for r in chain], kind=item.kind,
                            keep=item.keep)
    return ReviewDecision(item.key, "merge", item.keep, tuple(r.memory_id for r in others),
                          audit_id)


def retag(vault: Vault, memory_id: str, tags: list[str]) -> EditResult:
    """Set a memory's tags (a message's tags are its transcript's: refused)."""
    return _edit(vault, memory_id, "retag", lambda r: setattr(r, "tags", clean_tags(tags)))


def _edit(vault: Vault, memory_id: str, op: str, change: Callable[[Record], None]
          ) -> EditResult:
    """Change one memory in its document, in place (a newer `updated_at`, which sync
    takes over an older copy), and re-index it."""
    memory_id = vault.resolve_ids([memory_id])[0]
    with vault.transaction() as tx:
        for home in DOC_FILES:
            doc = tx.store.read_doc(home)
            records = [Record.from_stored(r) for r in (doc or {}).get("records", [])]
            target = next((r for r in records if r.memory_id == memory_id), None)
            if doc is None or target is None:
                continue
            change(target)
            target.updated_at = now_iso()
            for r in records:
                r.key_version = tx.epoch
            doc["records"] = [r.stored() for r in records]
            tx.write_doc(home, doc)
            tx.index([Entry(tx.vault.linked(target, tx.state), Location.doc(home))])
            tx.touch()
            audit_id = tx.audit(op, [memory_id])
            return EditResult(memory_id, tuple(target.tags), target.updated_at, audit_id)
    if vault.fetch([memory_id]):
        raise UsageError(f"{memory_id} is a transcript message: its tags are the "
                         "transcript's; only memories are retagged", field="id")
    raise NotFound(f"no memory with id {memory_id}")


# --- what the viewer reads --------------------------------------------------------------


def inspect(vault: Vault, memory_id: str) -> Inspection:
    """One record with its supersession chain, a summary's originals and the summaries
    made from it. Audited as the viewer's read ("browse.show"), which is a person's look,
    not a retrieval (`unused` is about what agents are given)."""
    state = vault.state()
    record = vault.fetch([memory_id], state).get(memory_id)
    if record is None:
        raise NotFound(f"no memory with id {memory_id}")
    replaced: list[str] = []
    seen = {memory_id}
    back = {link.by: old for old, link in state.superseded.items()}
    at = memory_id
    while (old := back.get(at)) is not None and old not in seen:
        replaced.append(old)
        seen.add(old)
        at = old
    replaced_by: list[str] = []
    at = memory_id
    while (by := state.superseded_by(at)) is not None and by not in seen:
        replaced_by.append(by)
        seen.add(by)
        at = by
    # Only an archived record was compacted into a summary (compaction archives what it
    # summarises): a live one costs no read of the documents.
    summaries = tuple(r.memory_id for r in vault.store.doc_records(CLAUDE_MD)
                      if r.type == "summary" and memory_id in r.compacted_from) \
        if record.archived else ()
    vault.audit_read("browse.show", [memory_id])
    return Inspection(record, tuple(replaced), tuple(replaced_by),
                      tuple(record.compacted_from), summaries)


def sessions(vault: Vault) -> list[SessionDay]:
    """Every session (live and archived), newest first, from the line files' clear
    headers (id and time; nothing decrypted) and each file's first line (its agent)."""
    from memvault.model.location import session_of
    from memvault.ops.projects import PREFIX

    if not vault.exists():
        return []
    merged: dict[str, SessionDay] = {}
    for archived in (False, True):
        for relpath in vault.store.layout.line_files(archived):
            heads = vault.store.line_headers(relpath)
            name = session_of(relpath)
            if not heads or name is None:
                continue
            opening = vault.store.read_at(Location.line(relpath, 0), heads[0].memory_id)
            # The agent its transcript came from (a session mem stored before it kept
            # one, or of generic JSON lines, has none).
            agent = opening.agent if opening is not None else None
            project = next((t for t in (opening.tags if opening else [])
                            if t.startswith(PREFIX)), None)
            times = [h.created_at for h in heads]
            day = SessionDay(name, min(times), max(times), len(heads), archived, agent,
                             project)
            prior = merged.get(name)  # a session partly compacted lives in both folders
            merged[name] = day if prior is None else SessionDay(
                name, min(prior.first, day.first), max(prior.last, day.last),
                prior.messages + day.messages, False, prior.agent or day.agent,
                prior.project or day.project)
    vault.audit_read("browse.timeline", count=len(merged))
    return sorted(merged.values(), key=lambda s: s.first, reverse=True)
