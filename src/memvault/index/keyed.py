"""The keyed-term index: a per-user Tantivy index that holds no plaintext.

Text is analysed (English stemming), then each token is replaced by an HMAC-SHA256 of
it under the user's index key (128 bits, hex) and the hashed tokens are indexed in
whitespace-tokenised fields. The index stores record ids, type, category, creation
time and where a record lives (sealed); tags and session ids are hashed. It is derived
data (index/base.py): `rebuild` recreates it from the vault at any time.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memvault.crypto import envelope
from memvault.crypto.keys import location_key
from memvault.errors import StorageError
from memvault.index import when
from memvault.index.base import Entry, IndexUnavailable, Stamp
from memvault.model.location import Location, session_of
from memvault.model.records import ARCHIVE, CONTEXT_NEIGHBOURS, TYPE_HOME, Filters, parse_time
from memvault.storage import fsio

INDEX_FORMAT = 8  # 2: `loc` sealed (it names the session); 3: token digests stored;
# 4: a line's offset and the archived flag stored, so a rewrite opens no location;
# 5: the assistant's turns without context, `who` spoke indexed on its own;
# 6: a record's own words in a field of their own (`own`, with the positions phrases use);
# 7: the agent a session came from (`agent`, keyed like the session);
# 8: `loc` stored as bytes and not indexed (each was a unique term, a third of the cost
# of a segment's term dictionary, and never searched)
META_FILE = "mem-index.json"
WRITER_HEAP = 32_000_000
# A write indexes on one thread: each indexing thread makes its own segment at a commit,
# and Tantivy merges segments once eight of a size gather, while the writer that made
# them waits under the user's lock. A scan commits batch after batch: with one segment
# a batch it seldom waits for a merge (and one thread keeps up with the rest of the
# write). A rebuild commits once, on two.
REBUILD_THREADS = 2
MAX_TOKEN_CHARS = 40
# Analyzer.digests hashes a text up to this long word by word, keeping up to _WORDS_KEPT
# words of up to _WORD_MAX characters (about 15 MB at most).
_BY_WORD_MAX = 4096
_WORD_MAX = 48
_WORDS_KEPT = 65_536
# Analyzer.digest keeps up to this many tokens' digests (some 150 bytes each: about 20
# MB), then starts again: a long transcript's ids, hashes and paths are distinct tokens
# by the hundred thousand, and a kept-until-full memo of 500,000 held 76 MB for good.
_TOKENS_KEPT = 131_072
# Its memo of whole texts (a turn is hashed again as each neighbour's context) keeps up
# to _TEXTS_KEPT texts and _TEXTS_BYTES of them and their hashes, each memo: a tool's
# long output is one entry of about a megabyte of hex, and no count alone bounds that.
_TEXTS_KEPT = 4096
_TEXTS_BYTES = 8 << 20
CTX_BOOST = 0.7  # neighbouring turns help, but a turn's own words count most
PHRASE_BOOST = 2.0
TIME_BOOST = 4.0  # a record from when the question says counts like a few shared words
WHO_BOOST = 4.0  # so does a message from whom it names

_MONTHS = ("january february march april may june july august september october "
           "november december").split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()

# Query-side stopwords: whole questions ("what did she say about ...") would otherwise be
# dominated by function words. The index keeps every token, so phrases still match.
STOPWORDS = frozenset("""
a about above after again against all am an and any are aren't as at be because been
before being below between both but by can can't cannot could couldn't did didn't do does
doesn't doing don't down during each few for from further had hadn't has hasn't have
haven't having he he'd he'll he's her here here's hers herself him himself his how how's
i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
myself no nor not of off on once only or other ought our ours ourselves out over own same
shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up very was wasn't we we'd we'll we're we've were weren't
what what's when when's where where's which while who who's whom why why's with won't would
wouldn't you you'd you'll you're you've your yours yourself yourselves s t d ll m re ve
aren couldn didn doesn don hadn hasn haven isn mustn shan shouldn wasn weren won wouldn
""".split())
# Words that name a role, not a topic: "what does the user prefer", "what did Claude
# suggest". Every message is indexed with its speaker's role, so as evidence "user"
# would match every turn the user typed (a short one best), and an agent's name the
# files named after it. A question drops them as it drops stopwords (kept when nothing
# else is left, and inside quotes); `forget --query` and `--mode words` keep them as
# words. "I", "me", "my" and "you" are stopwords already. The user's own name is given
# per query (build_query's `names`).
ROLE_WORDS = frozenset("""
user users assistant assistants
claude codex gemini copilot chatgpt qwen aider cline opencode
""".split())


@dataclass
class Hit:
    memory_id: str
    score: float
    location: Location | None  # None: the sealed location did not open (stale index)
    kind: str = "message"  # the record's type


class Analyzer:
    """Stemmed tokens and their keyed hashes (one instance per index key)."""

    def __init__(self, key: bytes) -> None:
        import tantivy

        self._analyzer = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .filter(tantivy.Filter.stemmer("english"))
            .build()
        )
        self._plain = (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
            .filter(tantivy.Filter.remove_long(MAX_TOKEN_CHARS))
            .filter(tantivy.Filter.lowercase())
            .filter(tantivy.Filter.ascii_fold())
            .build()
        )
        self._mac = hmac.new(key, digestmod=hashlib.sha256)
        self._cache: dict[str, bytes] = {}
        self._texts: dict[str, bytes] = {}
        self._words: dict[str, bytes] = {}
        self._hex: dict[str, str] = {}
        self._held = {"texts": 0, "hex": 0}  # the bytes each memo of whole texts holds

    def tokens(self, text: str) -> list[str]:
        tokens: list[str] = self._analyzer.analyze(text)
        return tokens

    def spans(self, text: str) -> list[tuple[str, int, int]]:
        """Stemmed tokens with their character offsets (for snippets)."""
        return [(t.text, t.char_offset_from, t.char_offset_to)
                for t in self._analyzer.pre_tokenize(text).tokens]

    def words(self, text: str) -> list[str]:
        """The words of a text before stemming: lower-cased, accents folded."""
        words: list[str] = self._plain.analyze(text)
        return words

    def query_terms(self, text: str, roles: Collection[str] = ()) -> list[str]:
        """The stems a query searches for: stopwords (and the words in `roles`) dropped
        unless nothing else is left."""
        words = self._plain.analyze(text)
        kept = [w for w in words if w not in STOPWORDS and w not in roles] or words
        stems: list[str] = []
        for word in kept:
            for stem in self._analyzer.analyze(word):
                if stem not in stems:
                    stems.append(stem)
        return stems

    def digest(self, token: str) -> bytes:
        cached = self._cache.get(token)
        if cached is None:
            mac = self._mac.copy()
            mac.update(token.encode())
            cached = mac.digest()[:16]
            if len(self._cache) >= _TOKENS_KEPT:
                self._cache.clear()
            self._cache[token] = cached
        return cached

    def hash(self, token: str) -> str:
        return self.digest(token).hex()

    def digests(self, text: str) -> bytes:
        """The text's tokens, hashed: 16 bytes each, in order. Memoised: in a session every
        turn is also context for its neighbours, so the same text is hashed several times.

        A message is hashed word by word (what lies between whitespace), each word's
        digests memoised: words repeat from message to message, and analysing a text
        costs more than looking its words up. The tokens are the same either way, since
        the tokenizer splits at whitespace and every filter works on one token."""
        cached = self._texts.get(text)
        if cached is None:
            if len(text) > _BY_WORD_MAX:
                cached = self._analysed(text)  # a tool's output: few words repeat
            else:
                words, parts = self._words, []
                for word in text.split():
                    found = words.get(word)
                    if found is None:
                        found = self._analysed(word)
                        if len(word) <= _WORD_MAX:
                            if len(words) >= _WORDS_KEPT:
                                words.clear()
                            words[word] = found
                    parts.append(found)
                cached = b"".join(parts)
            self._memo(self._texts, "texts", text, cached, len(cached))
        return cached

    def _analysed(self, text: str) -> bytes:
        cache, digest = self._cache, self.digest
        return b"".join([cache.get(t) or digest(t) for t in self.tokens(text)])

    def hashed(self, text: str) -> str:
        """The text's tokens, hashed, as the space-separated hex the index holds. Memoised
        like `digests`: a turn is hashed again as each neighbour's context."""
        cached = self._hex.get(text)
        if cached is None:
            cached = spaced(self.digests(text))
            self._memo(self._hex, "hex", text, cached, len(cached))
        return cached

    def _memo(self, memo: dict[str, Any], name: str, text: str, value: Any,
              size: int) -> None:
        """Keep `value` for `text` within the memo's bounds: emptied when it would pass
        either; a text that alone would pass its bytes is not kept."""
        size += sys.getsizeof(text)
        if len(memo) >= _TEXTS_KEPT or self._held[name] + size > _TEXTS_BYTES:
            memo.clear()
            self._held[name] = 0
        if size <= _TEXTS_BYTES:
            memo[text] = value
            self._held[name] += size

    def opaque(self, kind: str, value: str) -> str:
        """A keyed hash for a tag or session id (exact match, not analysed)."""
        return self.hash(f"\x00{kind}\x00{value}")


def spaced(digests: bytes) -> str:
    """16-byte token digests as the whitespace-separated hex terms of a text field."""
    return digests.hex(" ", 16)


def _day_words(year: int, month: int, day: int) -> str:
    """Words that let a question about a date find records of that day."""
    weekday = _WEEKDAYS[datetime(year, month, day).weekday()]
    return f"{day} {_MONTHS[month - 1]} {year} {weekday}"


_UTC_OFFSET = timedelta(0)


def _micros(created_at: str) -> int:
    # A time as mem stores it (UTC, a trailing Z) read without parse_time's checks.
    at = _stored_time(created_at) if created_at[-1:] == "Z" and \
        created_at.isascii() else None
    return int((at or parse_time(created_at)).timestamp() * 1_000_000)


def _stored_time(value: str) -> datetime | None:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.utcoffset() == _UTC_OFFSET else None


class SearchIndex:
    """The keyed-term index (a DerivedIndex)."""

    name = "search"

    def __init__(self, path: Path, key: bytes) -> None:
        self.path = path
        self.analyzer = Analyzer(key)
        self._loc_key = location_key(key)
        self._seal_loc = envelope.token_sealer(self._loc_key)
        self._index: Any = None
        # The writer feed() added to as a transaction wrote its files, and apply() commits;
        # while held (hold()), kept open from one transaction to the next.
        self._fed: IndexWriter | None = None
        self._fed_ids: set[str] = set()
        self.held = False
        self._days: dict[int, str] = {}
        self._assistant = self.analyzer.digests("assistant")  # a role's first digest
        self.stamp = Stamp(path)

    # --- the derived-index protocol --------------------------------------------------

    def is_current(self) -> bool:
        """Current when its stamp is there and it opens."""
        if not self.stamp.present():
            return False
        try:
            self.open()
        except IndexUnavailable:
            return False
        return True

    def mark_stale(self) -> None:
        self.stamp.remove()

    def mark_current(self) -> None:
        self.stamp.write()

    def apply(self, upserts: Sequence[Entry], deletes: Sequence[str],
              created: Collection[str] = ()) -> None:
        """Replace the documents of `upserts` and drop `deletes`; a record in `created`
        is new to the index, and only added."""
        if not upserts and not deletes and self._fed is None:
            return
        with self.writer() as w:
            fed, self._fed_ids = self._fed_ids, set()
            for memory_id in deletes:
                w.delete(memory_id)
            for entry in upserts:
                memory_id = entry.record.memory_id
                if memory_id in fed and memory_id in created:
                    continue  # added as its file was written
                if memory_id in created:
                    w.add(entry)
                else:
                    w.upsert(entry)

    def feed(self, entries: Iterable[Entry]) -> None:
        """Add new records' documents now, while the transaction that wrote them goes on
        writing its other files, so Tantivy indexes on its own thread meanwhile; the
        transaction's apply() commits them (and skips them). Only records this write made
        (no document to replace), and only in a transaction that found the index current
        (one that did not is rebuilt whole, and drops them). Nothing fed is visible before
        that commit: a kill leaves the index as it was, and without its stamp."""
        w = self._open_writer()
        for entry in entries:
            w.add(entry)
            self._fed_ids.add(entry.record.memory_id)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One writer for a run of transactions (a large pull's batches), each committing
        what it added: one indexing thread and its memory for the run, where a writer a
        transaction grew memory by each thread's heap. Released (and what no transaction
        committed dropped) at the end."""
        self.held = True
        try:
            yield
        finally:
            self.held = False
            self.drop_fed()

    def _open_writer(self) -> IndexWriter:
        if self._fed is not None and self._fed.ino != _inode(self.path):
            self.drop_fed()  # another process rebuilt the index since: not this one's
        if self._fed is None:
            index = self.open()
            self._fed = IndexWriter(self, index.writer(heap_size=WRITER_HEAP, num_threads=1),
                                    _inode(self.path))
        return self._fed

    def drop_fed(self) -> None:
        """Forget what was fed and not committed (the transaction failed, or the index is
        being rebuilt from the files, which hold it), and close the writer."""
        w, self._fed, self._fed_ids = self._fed, None, set()
        if w is not None:
            with contextlib.suppress(Exception):
                w.raw.rollback()
            w.close()

    def rebuild(self, entries: Iterable[Entry]) -> int:
        count = self.build(entries)
        self.mark_current()
        return count

    def locate(self, memory_ids: Sequence[str]) -> dict[str, Location]:
        """Where each of these records lives, from the index (ids it lacks are left out)."""
        import tantivy

        searcher = self.searcher()
        schema = self.open().schema
        out: dict[str, Location] = {}
        for memory_id in dict.fromkeys(memory_ids):
            query = tantivy.Query.term_query(schema, "id", memory_id)
            for _, address in searcher.search(query, 1).hits:
                location = self.open_loc(memory_id, searcher.doc(address).get_first("loc"))
                if location is not None:
                    out[memory_id] = location
        return out

    def ids_starting(self, prefix: str, limit: int) -> tuple[list[str], int]:
        """Up to `limit` ids that start with `prefix`, and how many there are (a pattern
        over the id terms: `prefix` must be hex digits and '-' only, as ids are)."""
        import tantivy

        assert all(c in "0123456789abcdef-" for c in prefix), "not an id prefix"
        searcher = self.searcher()
        query = tantivy.Query.regex_query(self.open().schema, "id", prefix + ".*")
        found = searcher.search(query, max(limit, 1), count=True)
        return ([str(searcher.doc(address).get_first("id")) for _, address in found.hits],
                int(found.count or 0))

    # --- schema and opening -----------------------------------------------------------

    @staticmethod
    def _schema() -> Any:
        import tantivy

        sb = tantivy.SchemaBuilder()
        sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        # The record's own words and nothing else (no speaker, no day, no neighbour): what
        # a quoted phrase must appear in, and all that `forget --query` selects by.
        sb.add_text_field("own", tokenizer_name="whitespace", index_option="position")
        sb.add_text_field("ctx", tokenizer_name="whitespace", index_option="freq")
        sb.add_text_field("type", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_text_field("category", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_text_field("tag", stored=True, tokenizer_name="whitespace", index_option="basic")
        sb.add_text_field("session", stored=True, tokenizer_name="raw", index_option="basic")
        # Stored, so that a rewrite carries it over without opening the record.
        sb.add_text_field("agent", stored=True, tokenizer_name="raw", index_option="basic")
        sb.add_integer_field("created", stored=True, indexed=True, fast=True)
        sb.add_unsigned_field("archived", stored=True, indexed=True, fast=True)
        sb.add_unsigned_field("superseded", indexed=True, fast=True)
        # Stored only: where a line starts in its file, so that a rewrite orders a
        # session's turns without opening their sealed locations. The offsets are no
        # news: the line file shows them to anyone who can read the index.
        sb.add_unsigned_field("pos", stored=True, indexed=False)
        # Stored only (sealed: nonce and ciphertext); never searched.
        sb.add_bytes_field("loc", stored=True, indexed=False)
        # Stored only: the digests of a record's words and speaker, in order, so that a
        # rewrite carries a document over without decrypting or analysing it again (the
        # order is no news: `body` is indexed with positions).
        sb.add_bytes_field("text", stored=True, indexed=False)
        sb.add_bytes_field("role", stored=True, indexed=False)
        # Who spoke (a message's role and speaker's name, the tokens `body` holds too), on
        # its own: a question naming a chat member ranks what they said above what others
        # said about them.
        sb.add_text_field("who", tokenizer_name="whitespace", index_option="basic")
        return sb.build()

    def _meta(self) -> dict[str, Any]:
        return {"format": INDEX_FORMAT, "analyzer": "simple+lowercase+asciifold+stem-en",
                "token": "hmac-sha256-128-hex", "loc": "aes-256-gcm"}

    def seal_loc(self, memory_id: str, location: Location) -> bytes:
        """Where a record lives, sealed: the session id in a file name is not the index's
        to show. The record id is the AAD, so a location cannot be moved to another doc."""
        return self._seal_loc(str(location).encode(), memory_id.encode())

    def open_loc(self, memory_id: str, sealed: Any) -> Location | None:
        """The location of a hit; None when it does not open (the caller rebuilds)."""
        if not isinstance(sealed, bytes) or len(sealed) <= envelope.NONCE_LEN:
            return None
        try:
            plain = envelope.open_raw(self._loc_key, sealed[:envelope.NONCE_LEN],
                                      sealed[envelope.NONCE_LEN:], memory_id.encode())
            return Location.parse(plain.decode())
        except (envelope.AuthError, UnicodeDecodeError):
            return None

    def open(self) -> Any:
        """Open the existing index; IndexUnavailable when missing, stale-format or corrupt."""
        if self._index is not None:
            return self._index
        import tantivy

        try:
            meta = json.loads((self.path / META_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise IndexUnavailable("index missing or without its description") from exc
        if meta != self._meta():
            raise IndexUnavailable("index built by another format")
        try:
            self._index = tantivy.Index.open(str(self.path))
            # Reload by hand (searcher()): the default policy keeps a thread watching the
            # folder, which takes a lock file in it, even while a rebuild removes it.
            self._index.config_reader("Manual")
            self._index.searcher()
        except BaseException as exc:
            self._index = None
            if not _damaged(exc):
                raise
            raise IndexUnavailable(f"index unreadable: {exc}") from exc
        return self._index

    def create_empty(self, path: Path | None = None) -> Any:
        import tantivy

        target = path or self.path
        fsio.ensure_dir(target)
        index = tantivy.Index(self._schema(), path=str(target))
        fsio.atomic_write(target / META_FILE, json.dumps(self._meta()).encode())
        return index

    # --- documents --------------------------------------------------------------------

    def document(self, entry: Entry) -> Any:
        """The Tantivy document of a record: its stored fields, then its indexed ones."""
        import tantivy

        record, a = entry.record, self.analyzer
        created = _micros(record.created_at)
        # Who spoke is searchable: the role, and a chat member's name ("what did Ana say").
        speaker = ""
        if record.type == "message":
            said, name = record.role, record.name
            speaker = f"{said} {name}" if said and name else said or name or ""
        role = a.digests(speaker) if speaker else b""
        location = entry.location
        memory_id = record.memory_id
        # Field by field (a call each is cheaper than the constructor's keywords): a
        # pull builds a document a record.
        doc = tantivy.Document()
        doc.add_text("id", memory_id)
        doc.add_text("type", record.type)
        doc.add_text("category", record.category)
        doc.add_integer("created", created)
        doc.add_bytes("loc", self._seal_loc(str(location).encode(), memory_id.encode()))
        doc.add_unsigned("archived", 1 if location.archived else 0)
        doc.add_unsigned("pos", location.offset or 0)
        doc.add_bytes("text", a.digests(record.content))
        if role:
            doc.add_bytes("role", role)
        if record.tags:
            doc.add_text("tag", " ".join([a.opaque("tag", t) for t in record.tags]))
        if record.session_id:
            doc.add_text("session", a.opaque("session", record.session_id))
        if record.agent:
            doc.add_text("agent", a.opaque("agent", record.agent))
        # Hex made once a text (memoised): a turn is its neighbours' context too.
        return self._indexed(doc, record.type, created, a.hashed(record.content), role,
                             " ".join(map(a.hashed, entry.context)),
                             bool(record.superseded_by), a.hashed(speaker) if role else "")

    def _indexed(self, doc: Any, kind: str, created: int, words: str, role: bytes,
                 context: str, superseded: bool, who: str = "") -> Any:
        """Add the fields that are searched but not stored, from what is stored: so a
        document is built the same way from a record (`document`) and carried over from
        the index (`rewrite`). `words` and `context` are hashed terms, space-separated."""
        body = words
        if kind == "message":
            # Speakers and dates are searchable too ("what did Ana say in May?").
            who = who or spaced(role)
            body = " ".join(filter(None, (who, body, self._day_terms(created))))
            if role:
                doc.add_text("who", who)
        doc.add_text("body", body)
        doc.add_text("own", words)
        # Context lends a turn its neighbours' words (an answer's words are often in the
        # question before it). Not to the assistant's replies: they restate the user's
        # words at length already, and with the user's turns as context too they outrank
        # the user's own words, the memory being asked for (docs/guide.md).
        if context and role[:16] != self._assistant:
            doc.add_text("ctx", context)
        doc.add_unsigned("superseded", 1 if superseded else 0)
        return doc

    def _day_terms(self, created: int) -> str:
        """The hashed words of a time's day (a session's turns share a few days)."""
        number = created // 86_400_000_000
        terms = self._days.get(number)
        if terms is None:
            day = datetime.fromtimestamp(created // 1_000_000, UTC)
            terms = self.analyzer.hashed(_day_words(day.year, day.month, day.day))
            self._days[number] = terms
        return terms

    @contextlib.contextmanager
    def writer(self) -> Iterator[IndexWriter]:
        """Batch index changes and commit them once (caller holds the user's lock); the
        writer feed() added to, when there is one, kept open while held."""
        w = self._open_writer()
        try:
            yield w
            w.commit()
        except BaseException:
            self.drop_fed()
            raise
        if not self.held:
            self._fed = None
            w.close()

    def build(self, entries: Iterable[Entry]) -> int:
        """Build a fresh index beside the old one, then swap it in. Returns the doc count."""
        def add(writer: Any) -> int:
            count = 0
            for entry in entries:
                writer.add_document(self.document(entry))
                count += 1
            return count

        return self._replace(add)

    def rewrite(self, entries: Iterable[Entry], changed: set[str], kept_line_files: list[str],
                superseded: Callable[[str], bool]) -> int:
        """A fresh index like `build`, without re-deriving what did not change: documents
        of files in `changed` come from `entries`; every other document is carried over
        from this index (its stored digests give its body, and its neighbours' give its
        context), with its superseded flag from `superseded`. Nothing of the old segments
        survives, so the terms of deleted documents are gone. The index must be current."""
        from tantivy import Occur, Query

        old = self.searcher()

        def add(writer: Any) -> int:
            count = 0
            for entry in entries:
                writer.add_document(self.document(entry))
                count += 1
            not_messages = Query.boolean_query([
                (Occur.Must, Query.all_query()),
                (Occur.MustNot, Query.term_query(self.open().schema, "type", "message"))])
            for doc in self._stored(old, not_messages):
                kind = doc.get_first("type")
                if kind in TYPE_HOME and TYPE_HOME[kind][0] not in changed:
                    own = spaced(doc.get_first("text") or b"")
                    writer.add_document(self._carried(doc, own, "", superseded))
                    count += 1
            for relpath in kept_line_files:
                session = session_of(relpath)
                if session is None:
                    continue
                archived = 1 if relpath.startswith(ARCHIVE + "/") else 0
                term = self.analyzer.opaque("session", session)
                query = Query.term_query(self.open().schema, "session", term)
                # doc_freq counts deleted documents too: never fewer than the matches.
                matches = self._stored(old, query, int(old.doc_freq("session", term)))
                # The session's summaries (in CLAUDE.md) and its other file are not turns.
                turns = sorted((d for d in matches if d.get_first("archived") == archived
                                and d.get_first("type") == "message"),
                               key=lambda d: d.get_first("pos") or 0)
                words = [spaced(d.get_first("text") or b"") for d in turns]
                for i, doc in enumerate(turns):
                    span = range(i - CONTEXT_NEIGHBOURS, i + CONTEXT_NEIGHBOURS + 1)
                    context = " ".join([words[j] for j in span
                                        if j != i and 0 <= j < len(turns) and words[j]])
                    writer.add_document(self._carried(doc, words[i], context, superseded))
                    count += 1
            return count

        count = self._replace(add)
        self.mark_current()
        return count

    def _stored(self, searcher: Any, query: Any, at_most: int | None = None
                ) -> Iterator[Any]:
        """The stored document of every match (there are `at_most` of them, when the
        caller knows: Tantivy sizes its heap by it)."""
        total = int(searcher.num_docs) if at_most is None else at_most
        if not total:
            return
        for _, address in searcher.search(query, total, count=False).hits:
            yield searcher.doc(address)

    def _carried(self, doc: Any, words: str, context: str,
                 superseded: Callable[[str], bool]) -> Any:
        """A stored document with its searched fields added again (and its superseded
        flag as it is now): ready for the new index. Its sealed location is carried as
        it is: the index was current, and a reader that finds it stale rebuilds."""
        return self._indexed(doc, doc.get_first("type"), int(doc.get_first("created")),
                             words, doc.get_first("role") or b"", context,
                             superseded(doc.get_first("id")))

    def _replace(self, fill: Callable[[Any], int]) -> int:
        """Write a new index beside the old one with `fill(writer)`, then swap it in."""
        self.drop_fed()  # the files hold what was fed: the new index is built from them
        # What a killed rebuild left beside the index may hold forgotten terms: gone first.
        for leftover in self.path.parent.glob(f"{self.path.name}.[no][el][wd]-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = self.path.with_name(f"{self.path.name}.new-{os.getpid()}")
        try:
            index = self.create_empty(tmp)
            # Two indexing threads: the documents come from one Python thread, and Tantivy
            # indexes them (and flushes the segments) on the others.
            writer = index.writer(heap_size=2 * WRITER_HEAP, num_threads=REBUILD_THREADS)
            count = fill(writer)
            writer.commit()
            writer.wait_merging_threads()
            private(tmp)
            old = self.path.with_name(f"{self.path.name}.old-{os.getpid()}")
            self._index = None
            if self.path.exists():
                os.replace(self.path, old)
            os.replace(tmp, self.path)
            fsio.fsync_dir(self.path.parent)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # a full disk gets its space back
            # Tantivy reports a failed write (a full disk, a read-only filesystem) as a
            # ValueError naming the OS error: a storage error, one line, not a crash.
            if isinstance(exc, OSError) or (isinstance(exc, ValueError)
                                            and "os error" in str(exc).lower()):
                number = exc.errno if isinstance(exc, OSError) else _os_errno(str(exc))
                reason = os.strerror(number) if number else _os_reason(str(exc))
                raise StorageError(f"cannot write the search index of {self.path.parent.name}"
                                   f": {reason}; the vault itself is unchanged",
                                   errno=number) from None
            raise
        shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):
            old.unlink()  # the old "index" was a file, not a directory
        return count

    def remove(self) -> None:
        self.drop_fed()
        self._index = None
        shutil.rmtree(self.path, ignore_errors=True)

    # --- queries ------------------------------------------------------------------------

    def searcher(self) -> Any:
        """A snapshot of the latest commit, this process's or another's (a long-lived
        server sees what a hook stored since)."""
        index = self.open()
        index.reload()
        return index.searcher()

    def doc_freqs(self, stems: Sequence[str]) -> tuple[dict[str, int], int]:
        """How many documents hold each stem (by its keyed term), and how many there are:
        a word's rarity in the user's memory, for the summariser's weights."""
        return self.doc_freqs_now()(stems)

    def doc_freqs_now(self) -> Callable[[Sequence[str]], tuple[dict[str, int], int]]:
        """`doc_freqs` as the index is now, whatever is committed later: a compaction
        applies its summaries batch by batch, and its later cards must weigh words as
        its dry run did."""
        searcher = self.searcher()  # a snapshot of the committed segments

        def lookup(stems: Sequence[str]) -> tuple[dict[str, int], int]:
            return ({stem: int(searcher.doc_freq("body", self.analyzer.hash(stem)))
                     for stem in stems}, int(searcher.num_docs))
        return lookup

    def search(self, query: Any, limit: int, recent: bool = False) -> tuple[list[Hit], int]:
        """The top hits; IndexUnavailable when the index turns out damaged on use."""
        searcher = self.searcher()
        # Tantivy reserves room for `limit` hits up front: never ask for more than exist.
        limit = max(1, min(limit, int(searcher.num_docs)))
        try:
            if recent:
                result = searcher.search(query, limit, order_by_field="created")
            else:
                result = searcher.search(query, limit)
            hits = []
            for score, address in result.hits:
                doc = searcher.doc(address)
                memory_id = doc.get_first("id")
                hits.append(Hit(memory_id, float(score) if not recent else 0.0,
                                self.open_loc(memory_id, doc.get_first("loc")),
                                str(doc.get_first("type") or "message")))
        except BaseException as exc:
            if not _damaged(exc):
                raise
            self._index = None
            raise IndexUnavailable(f"index unreadable: {exc}") from exc
        if not recent:
            # Equals by id, not by where this index keeps them: two machines holding the
            # same records (pulled in another order) rank them alike.
            hits.sort(key=lambda h: (-h.score, h.memory_id))
        return hits, int(searcher.num_docs)

    def weights(self, stems: Sequence[str]) -> dict[str, float]:
        """Each stem's BM25 weight in this index (Tantivy's idf over `body`): a stem no
        record holds weighs most."""
        import math

        searcher = self.searcher()
        total = int(searcher.num_docs)
        out = {}
        for stem in dict.fromkeys(stems):
            # doc_freq counts replaced and deleted documents too, num_docs only live ones.
            held = min(total, int(searcher.doc_freq("body", self.analyzer.hash(stem))))
            out[stem] = math.log(1 + (total - held + 0.5) / (held + 0.5))
        return out

    def ideal(self, stems: Sequence[str]) -> float:
        """The score of a record holding each of these stems once, at an average length:
        the sum of their weights. A question about what the memory lacks scores low
        against a record that holds only its common words. 0 for no stems."""
        return sum(self.weights(stems).values())

    def holding(self, stems: Sequence[str], ids: Collection[str]) -> dict[str, int]:
        """Which of these stems (at most 24) each of these records holds, as the query
        finds them (its own words, its speaker, its day or its neighbours' words): bit i
        set when it holds stems[i]. One query: each stem scores a distinct power of two,
        and a record's score is their sum (exact in a float up to 2**24)."""
        from tantivy import Occur, Query

        stems = list(stems)[:24]
        if not stems or not ids:
            return {}
        schema = self.open().schema
        searcher = self.searcher()
        bits = [(Occur.Should, Query.const_score_query(Query.boolean_query(
            [(Occur.Should, Query.term_query(schema, f, self.analyzer.hash(stem)))
             for f in ("body", "ctx")]), float(1 << i))) for i, stem in enumerate(stems)]
        query = Query.boolean_query([
            (Occur.Must, Query.const_score_query(
                Query.term_set_query(schema, "id", list(ids)), 0.0)),
            (Occur.Must, Query.boolean_query(bits))])
        try:
            result = searcher.search(query, max(1, len(ids)))
            return {searcher.doc(address).get_first("id"): int(round(score))
                    for score, address in result.hits}
        except BaseException as exc:
            if not _damaged(exc):
                raise
            self._index = None
            raise IndexUnavailable(f"index unreadable: {exc}") from exc

    def build_query(self, text: str, filters: Filters, now: datetime | None = None,
                    ids: Collection[str] | None = None, words_only: bool = False,
                    names: Collection[str] = ()) -> tuple[Any, list[str]]:
        """A Tantivy query for a natural-language `text` and the filters.

        Returns the query and the stems searched (empty: list the most recent items).
        With `now`, time phrases ("last week", "two days ago") are resolved against it:
        records created then rank higher (index/when.py).
        With `ids`, only those records, each scored as the query would score it, whether
        or not it holds a word of it (the records another ranking found: the filters
        and the time phrases reach them too, and the index says where they live).
        With `words_only`, a record matches by its own words alone: not by who spoke,
        its day, its neighbours' words or a time phrase (what `forget --query` takes).
        Otherwise words naming a role (ROLE_WORDS, and `names`: the user's) are not
        searched for, unless nothing else is left.
        Never parses query syntax, so no input can make it fail.
        """
        import tantivy
        from tantivy import Occur, Query

        schema = self.open().schema
        a = self.analyzer

        def term(field: str, value: Any) -> Any:
            return Query.term_query(schema, field, value)

        def any_of(field: str, values: list[str]) -> Any:
            return Query.boolean_query([(Occur.Should, term(field, v)) for v in values])

        clauses: list[tuple[Any, Any]] = []
        phrases, rest = split_query(text)
        # A phrase with no word (punctuation, a token too long) asks for nothing: it must
        # not turn the other words into mere ranking (then the filters alone would match).
        phrases = [p for p in phrases if a.tokens(p)]
        roles = () if words_only else ROLE_WORDS.union(w for n in names for w in a.words(n))
        stems = a.query_terms(rest, roles)
        if stems:
            should = []
            for stem in stems:
                h = a.hash(stem)
                if words_only:
                    should.append((Occur.Should, term("own", h)))
                    continue
                should.append((Occur.Should, term("body", h)))
                should.append((Occur.Should, Query.boost_query(term("ctx", h), CTX_BOOST)))
            clauses.append((Occur.Must if not phrases and ids is None else Occur.Should,
                            Query.boolean_query(should)))
            clauses += [(Occur.Should, Query.boost_query(term("who", a.hash(stem)), WHO_BOOST))
                        for stem in stems if not words_only]
        for phrase in phrases:
            hashed: list[str | tuple[int, str]] = [a.hash(t) for t in a.tokens(phrase)]
            stems += [t for t in a.tokens(phrase) if t not in stems]
            # In the record's own words, as written: never across its speaker or its day.
            q = term("own", str(hashed[0])) if len(hashed) == 1 else \
                Query.phrase_query(schema, "own", hashed)
            clauses.append((Occur.Must if ids is None else Occur.Should,
                            Query.boost_query(q, PHRASE_BOOST)))
        for window in when.resolve(text, now) if clauses and now is not None \
                and not words_only else ():
            span = Query.range_query(schema, "created", tantivy.FieldType.Integer,
                                     int(window.start.timestamp() * 1e6),
                                     int(window.end.timestamp() * 1e6), include_upper=False)
            clauses.append((Occur.Should, Query.boost_query(span, TIME_BOOST)))
        if ids is not None:
            # Scored 0 itself: a record's score is its words' (and its time's) alone.
            clauses.append((Occur.Must, Query.const_score_query(
                Query.term_set_query(schema, "id", list(ids)), 0.0)))
        elif not clauses:
            clauses.append((Occur.Must, Query.all_query()))
        if filters.types:
            clauses.append((Occur.Must, any_of("type", filters.types)))
        if filters.categories:
            clauses.append((Occur.Must, any_of("category", filters.categories)))
        for tag in filters.tags:
            clauses.append((Occur.Must, term("tag", a.opaque("tag", tag))))
        if filters.session is not None:
            clauses.append((Occur.Must, term("session", a.opaque("session",
                                                                   filters.session))))
        if filters.agent is not None:
            clauses.append((Occur.Must, term("agent", a.opaque("agent", filters.agent))))
        if filters.after or filters.before:
            lower = int(filters.after.timestamp() * 1e6) if filters.after else None
            upper = int(filters.before.timestamp() * 1e6) if filters.before else None
            clauses.append((Occur.Must, Query.range_query(
                schema, "created", tantivy.FieldType.Integer, lower, upper,
                include_upper=upper is None)))
        if not filters.include_archive:
            clauses.append((Occur.MustNot, term("archived", 1)))
        if not filters.include_superseded:
            clauses.append((Occur.MustNot, term("superseded", 1)))
        return Query.boolean_query(clauses), stems

    def matching(self, query: Any) -> set[str]:
        """The ids of every record the query matches (a filter's set: proportional to
        the matches)."""
        searcher = self.searcher()
        try:
            found = int(searcher.search(query, 1).count)
            return {searcher.doc(address).get_first("id")
                    for _, address in searcher.search(query, max(1, found)).hits}
        except BaseException as exc:
            if not _damaged(exc):
                raise
            self._index = None
            raise IndexUnavailable(f"index unreadable: {exc}") from exc

    def count(self, query: Any) -> int:
        """How many records the query matches (nothing is read but the count)."""
        try:
            return int(self.searcher().search(query, 1).count)
        except BaseException as exc:
            if not _damaged(exc):
                raise
            self._index = None
            raise IndexUnavailable(f"index unreadable: {exc}") from exc

    def live_count(self) -> int:
        """How many live documents the index holds, from Tantivy's meta.json (segment
        sizes less their deletes): no segment is opened or mapped."""
        try:
            meta = json.loads((self.path / "meta.json").read_text())
            return sum(int(seg["max_doc"]) - int((seg.get("deletes") or {})
                                                 .get("num_deleted_docs", 0))
                       for seg in meta["segments"])
        except (OSError, ValueError, KeyError, TypeError):
            return int(self.searcher().num_docs)

    def holds_live(self, memory_id: str) -> bool:
        """Whether a live (not deleted) document has this record id."""
        import tantivy

        query = tantivy.Query.term_query(self.open().schema, "id", memory_id)
        return int(self.searcher().search(query, 1).count) > 0


class IndexWriter:
    def __init__(self, index: SearchIndex, raw: Any, ino: int = 0) -> None:
        self.index = index
        self.raw = raw
        self.ino = ino  # the index folder it writes to (a rebuild puts another in place)
        self.changed = False

    def upsert(self, entry: Entry) -> None:
        self.raw.delete_documents_by_term("id", entry.record.memory_id)
        self.add(entry)

    def add(self, entry: Entry) -> None:
        self.raw.add_document(self.index.document(entry))
        self.changed = True

    def delete(self, memory_id: str) -> None:
        self.raw.delete_documents_by_term("id", memory_id)
        self.changed = True

    def commit(self) -> None:
        if self.changed:
            # A reader is let go first: it shows only what was there before, and it
            # would keep every segment the commit's merges replace mapped, as much of
            # each as the merge read (all of it), until the next commit or the end.
            self.index._index = None
            self.raw.commit()
            self.changed = False
            private(self.index.path)

    def close(self) -> None:
        self.index._index = None  # as at a commit: no reader holds what merges replace
        with contextlib.suppress(Exception):
            self.raw.wait_merging_threads()
        private(self.index.path)  # segments written by merges after the commit


def _inode(path: Path) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return -1


def _damaged(exc: BaseException) -> bool:
    """Whether Tantivy failed on a damaged index: it raises ValueError or OSError, or
    panics, which pyo3 raises as PanicException, a BaseException."""
    return isinstance(exc, ValueError | OSError) or type(exc).__name__ == "PanicException"


def _os_errno(message: str) -> int | None:
    """The OS error number in a Tantivy IO error ("... (os error 30) ..."), if any."""
    found = re.search(r"os error (\d+)|code: (\d+)", message)
    return int(found.group(1) or found.group(2)) if found else None


def _os_reason(message: str) -> str:
    """The OS's words in a Tantivy IO error ("... No space left on device (os error 28)
    at path ..."), else the message's first line."""
    found = re.search(r"([A-Z][A-Za-z ]+?) \(os error \d+\)", message)
    return found.group(1) if found else message.splitlines()[0][:200]


def private(directory: Path) -> None:
    """Tantivy creates its files with the process umask; keep them 0600 like the rest."""
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            if entry.is_file() and entry.stat().st_mode & 0o077:
                os.chmod(entry, fsio.FILE_MODE)


def split_query(text: str) -> tuple[list[str], str]:
    """Quoted phrases and the rest of a user's query. Never fails on any input."""
    phrases = [p for p in re.findall(r'"([^"]*)"', text) if p.strip()]
    rest = re.sub(r'"[^"]*"', " ", text).replace('"', " ")
    return phrases, rest
