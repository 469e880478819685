"""What a match is: the relevance floor, the scale of the score, and how the two legs are
fused, chosen on both dev sets together (LoCoMo dev, LongMemEval dev), per set, per
category or question type and per half.

Per question it caches both legs' candidates as `mem search` computes them (through the
index and the vector store of the vaults bench_hybrid.py ingested and embedded): the
lexical top 50 with BM25 scores, the query's ideal (index/keyed.py `ideal`), the semantic
top 50 with cosines, and the words' score of the semantic candidates. Each question is
also asked of a vault of the other set (a LoCoMo question of a LongMemEval user's memory
and back): those are unrelated pairs, whose best scores say where a floor must be. Then
every rule is scored on the cache.

    python bench/relevance_study.py [--refresh] [--detail] [--frame | --vouch]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402

K = 10
N = 50


@dataclass
class Case:
    dataset: str  # "locomo" | "lme"
    kind: str
    half: int
    lexical: list[tuple[str, float]]  # message id, BM25
    ideal: float
    semantic: list[tuple[str, float]]  # message id, cosine
    words: dict[str, float]  # BM25 of the semantic candidates the lexical leg missed
    gold: set[str]
    gold_sessions: set[int] = field(default_factory=set)
    cover: dict[str, float] = field(default_factory=dict)  # message id -> coverage
    unseen: int = 0  # how many of the question's stems no record of the memory holds
    exact: dict[str, float] = field(default_factory=dict)  # message id -> cosine, every candidate
    base: tuple[float, float] | None = None  # the query's cosine with the store's sample
    text: str = ""  # the question
    stems: list[str] = field(default_factory=list)  # as searched, in order
    df: dict[str, int] = field(default_factory=dict)  # stem -> records holding it
    docs: int = 0  # records in the memory
    held: dict[str, int] = field(default_factory=dict)  # message id -> stems held (bits)


def coverage(index: Any, stems: list[str], hits: list[Any]) -> dict[str, float]:
    """The share of the stems' weight each hit holds (in its own words, its speaker,
    its day or its neighbouring turns), each stem once however often: 1 when a record
    holds every word searched for. One small query a stem, over these hits only."""
    from tantivy import Occur, Query

    weights = index.weights(stems)
    total = sum(weights.values())
    out = {h.memory_id: 0.0 for h in hits}
    if not hits or total <= 0:
        return out
    schema = index.open().schema
    searcher = index.searcher()
    among = Query.term_set_query(schema, "id", list(out))
    for stem, weight in weights.items():
        h = index.analyzer.hash(stem)
        held = Query.boolean_query([(Occur.Should, Query.term_query(schema, f, h))
                                    for f in ("body", "ctx", "who")])
        query = Query.boolean_query([(Occur.Must, among), (Occur.Must, held)])
        for _, address in searcher.search(query, len(out)).hits:
            memory_id = searcher.doc(address).get_first("id")
            if memory_id in out:
                out[memory_id] += weight / total
    return out


def _legs(vault: object, text: str, filters: object, now: datetime) -> tuple[
        list[tuple[str, float]], float, list[tuple[str, float]], dict[str, float],
        dict[str, float], int, dict[str, float], tuple[float, float] | None, str,
        list[str], dict[str, int], int, dict[str, int]]:
    from memvault.ops import recall

    v: object = vault
    state = v.state()  # type: ignore[attr-defined]
    index = v.ready_index(state)  # type: ignore[attr-defined]
    names = (v.user,)  # type: ignore[attr-defined]
    query, stems = index.build_query(text, filters, now, names=names)
    lexical, _ = index.search(query, N)
    ideal = index.ideal(stems)
    vector, store, notice = recall._meaning(v, state, text, explicit=True)  # type: ignore[arg-type]
    assert vector is not None, notice
    allowed = index.matching(index.build_query("", filters)[0]) \
        if recall._narrowing(filters) else None  # type: ignore[arg-type]
    near = recall._near(store, vector, N, False, allowed)
    seen = {h.memory_id for h in lexical}
    others = [h.memory_id for h in near if h.memory_id not in seen]
    scored_hits = recall._scored(index, text, filters, now, others, names) if others else []
    scored = {h.memory_id: h.score for h in scored_hits}
    cover = coverage(index, stems, [*lexical, *scored_hits])
    searcher = index.searcher()
    unseen = sum(1 for st in set(stems)
                 if not searcher.doc_freq("body", index.analyzer.hash(st)))
    located = {h.memory_id: h.location for h in lexical if h.location is not None}
    located.update(index.locate([h.memory_id for h in near]))
    records, _ = v.read_located(located, state)  # type: ignore[attr-defined]
    mid = {m: (r.message_id or m) for m, r in records.items()}
    every = list(dict.fromkeys([h.memory_id for h in lexical] + [h.memory_id for h in near]))
    exact = {h.memory_id: h.score for h in store.search(vector, len(every), allowed=every)}
    base = store.baseline(vector)
    df, docs = index.doc_freqs(stems)
    held = index.holding(stems, every)
    return ([(mid.get(h.memory_id, h.memory_id), h.score) for h in lexical], ideal,
            [(mid.get(h.memory_id, h.memory_id), h.score) for h in near],
            {mid.get(m, m): s for m, s in scored.items()},
            {mid.get(m, m): s for m, s in cover.items()}, unseen,
            {mid.get(m, m): s for m, s in exact.items()}, base, text, stems, df, docs,
            {mid.get(m, m): b for m, b in held.items()})


def case(dataset: str, kind: str, half: int, legs: tuple[object, ...], gold: set[str],
         gold_sessions: set[int] | None = None) -> Case:
    lexical, ideal, semantic, words, cover, unseen, exact, base, text, stems, df, docs, \
        held = legs
    return Case(dataset, kind, half, lexical, ideal, semantic, words,  # type: ignore[arg-type]
                gold, gold_sessions or set(), cover, unseen, exact, base,  # type: ignore[arg-type]
                text, stems, df, docs, held)  # type: ignore[arg-type]


def collect() -> tuple[list[Case], list[Case]]:
    import bench_longmemeval as lme
    import locomo
    import longmemeval
    from locomo import CATEGORIES

    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.vault.vault import Vault

    loc_base = next(RESULTS.glob("locomo-*"))
    lme_base = RESULTS / f"longmemeval-{longmemeval.data_hash()}"
    conversations = locomo.load()
    questions = longmemeval.load()
    now = datetime.now(UTC)

    def at(base: Path, user: str) -> Vault:
        os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
        return Vault(resolve(user=user))

    true: list[Case] = []
    null: list[Case] = []
    for ci, c in enumerate(conversations):
        for i, q in enumerate(c.questions):
            v = at(loc_base, c.sample_id)
            true.append(case("locomo", CATEGORIES[q.category], i % 2,
                             _legs(v, q.text, Filters(limit=K), now), q.evidence))
            if i % 3 == 0:  # a third of them asked of a LongMemEval memory
                other = questions[(ci * 37 + i) % len(questions)]
                v = at(lme_base, lme.user_of(other))
                null.append(case("locomo", CATEGORIES[q.category], i % 2,
                                 _legs(v, q.text, Filters(limit=K), now), set()))
    seen: dict[str, int] = {}
    for qi, q in enumerate(questions):
        n = seen[q.kind] = seen.get(q.kind, -1) + 1
        v = at(lme_base, lme.user_of(q))
        true.append(case("lme", q.kind, n % 2,
                         _legs(v, q.text, Filters(limit=K, before=q.asked_at), q.asked_at),
                         q.gold_turns, q.gold_sessions))
        c = conversations[qi % len(conversations)]
        v = at(loc_base, c.sample_id)
        null.append(case("lme", q.kind, n % 2, _legs(v, q.text, Filters(limit=K), now),
                         set()))
    return true, null


# --- rules: each returns [(message id, score, passes the floor)], best first -------------

Ranked = list[tuple[str, float, bool]]


def minmax(scores: dict[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    span = hi - lo
    return {k: (v - lo) / span if span > 0 else (1.0 if hi > 0 else 0.0)
            for k, v in scores.items()}


def today(c: Case, w: float = 0.9) -> list[str]:
    """The fusion before this study (min-max, words `w`, the 50th cosine for the rest)."""
    ids = list(dict.fromkeys([m for m, _ in c.lexical] + [m for m, _ in c.semantic]))
    words = {**c.words, **dict(c.lexical)}
    cos = dict(c.semantic)
    lo = min(cos.values(), default=0.0)
    a = minmax({m: words.get(m, 0.0) for m in ids})
    b = minmax({m: cos.get(m, lo) for m in ids})
    rank = {m: i for i, m in enumerate(ids)}
    return sorted(ids, key=lambda m: (-(w * a[m] + (1 - w) * b[m]), rank[m]))


def weak_words(c: Case, t: float, w: float) -> list[str]:
    """The fusion with the words' share `w` when no lexical candidate's BM25 / ideal
    reaches `t` (the words leg is weak), else 0.9."""
    best = max((s / c.ideal for _, s in c.lexical), default=0.0) if c.ideal > 0 else 0.0
    return today(c, 0.9 if best >= t else w)


def absolute(c: Case, w: float, c0: float, fw: float, mode: str = "hybrid") -> Ranked:
    """Words' relevance BM25 / ideal, meaning's (cos - c0) / (1 - c0) clipped at 0; the
    score w × words + (1 - w) × meaning; passes when words ≥ fw or cos ≥ c0."""
    words = {**c.words, **dict(c.lexical)}
    cos = dict(c.semantic)
    lo = min(cos.values(), default=0.0)
    if mode == "lexical":
        ids = [m for m, _ in c.lexical]
    elif mode == "semantic":
        ids = [m for m, _ in c.semantic]
    else:
        ids = list(dict.fromkeys([m for m, _ in c.lexical] + [m for m, _ in c.semantic]))
    out = []
    for i, m in enumerate(ids):
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        cm = cos.get(m, lo)
        rm = max(0.0, (cm - c0) / (1 - c0))
        if mode == "lexical":
            s, ok = rw, rw >= fw
        elif mode == "semantic":
            s, ok = rm, cm >= c0
        else:
            s, ok = w * rw + (1 - w) * rm, rw >= fw or (m in cos and cm >= c0)
        out.append((m, s, ok, i))
    out.sort(key=lambda t: (-t[1], t[3]))
    return [(m, s, ok) for m, s, ok, _ in out]


def floored(c: Case, c0: float, fw: float) -> Ranked:
    """Today's fusion, each hit kept when its words' relevance reaches fw or its cosine
    c0 (the product's rule: the order is today's, only the floor is new)."""
    words = {**c.words, **dict(c.lexical)}
    cos = dict(c.semantic)
    return [(m, 0.0, (words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0) >= fw
             or (m in cos and cos[m] >= c0)) for m in today(c)]


def covered(c: Case, c0: float, fc: float, veto: float = -1.0,
            lexical_only: bool = False) -> Ranked:
    """Today's order (or BM25's), each hit kept when its coverage reaches fc (and, with
    `veto`, its cosine is known and at least that, unless it holds every word), or its
    cosine c0."""
    cos = dict(c.semantic)
    order = [m for m, _ in c.lexical] if lexical_only else today(c)
    out = []
    for m in order:
        cover = c.cover.get(m, 0.0)
        by_words = cover >= fc and (veto < 0 or cover >= 0.999 or cos.get(m, -1) >= veto)
        out.append((m, 0.0, by_words or (not lexical_only and m in cos and cos[m] >= c0)))
    return out


def unseen_rule(c: Case, c0: float, fw: float, fc: float, lexical_only: bool = False
                ) -> Ranked:
    """Today's order; a hit matches by words when BM25 / ideal reaches fw and, if the
    question holds a word no record holds, its coverage reaches fc; or by its cosine."""
    cos = dict(c.semantic)
    words = {**c.words, **dict(c.lexical)}
    order = [m for m, _ in c.lexical] if lexical_only else today(c)
    out = []
    for m in order:
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        by_words = rw >= fw and (not c.unseen or c.cover.get(m, 0.0) >= fc)
        out.append((m, 0.0, by_words or (not lexical_only and m in cos and cos[m] >= c0)))
    return out


def lexical_floored(c: Case, fw: float) -> Ranked:
    return [(m, 0.0, s / c.ideal >= fw if c.ideal > 0 else False) for m, s in c.lexical]


def mixed(c: Case, w: float, c0: float, fw: float, cap: float = 0.0) -> Ranked:
    """Words' relevance BM25 / ideal; meaning min-max over the candidates (the 50th
    cosine for a lexical candidate the leg did not return), as measured before; the
    score words + (1 - w) / w × meaning; passes when words ≥ fw or cos ≥ c0. `cap`:
    words' relevance capped at this (0: not)."""
    words = {**c.words, **dict(c.lexical)}
    cos = dict(c.semantic)
    lo = min(cos.values(), default=0.0)
    ids = list(dict.fromkeys([m for m, _ in c.lexical] + [m for m, _ in c.semantic]))
    b = minmax({m: cos.get(m, lo) for m in ids})
    out = []
    for i, m in enumerate(ids):
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        if cap:
            rw = min(rw, cap)
        s = rw + (1 - w) / w * b.get(m, 0.0)
        out.append((m, s, rw >= fw or (m in cos and cos[m] >= c0), i))
    out.sort(key=lambda t: (-t[1], t[3]))
    return [(m, s, ok) for m, s, ok, _ in out]


def lifted(c: Case, m: str) -> float:
    """How far the record's cosine is from the query's baseline (its mean cosine with
    the store's sample) towards 1: the meaning's relevance in any model's scale."""
    if c.base is None or m not in c.exact:
        return -1.0
    return (c.exact[m] - c.base[0]) / (1 - c.base[0])


def zscore(c: Case, m: str) -> float:
    if c.base is None or m not in c.exact or c.base[1] <= 0:
        return -99.0
    return (c.exact[m] - c.base[0]) / c.base[1]


def coverage_near(c: Case, fc: float, near: float, unseen_only: bool = False,
                  lexical_only: bool = False, lift: float = 0.42) -> Ranked:
    """Today's order (the weak-words fusion, or BM25's); a record matches by words when
    BM25 / ideal ≥ 0.15 and it holds at least `fc` of the question's idf (with
    `unseen_only`, asked only of a question holding a word no record holds), or else is
    near by meaning (z-score of its exact cosine against the query's baseline ≥ `near`);
    or by meaning alone (lifted ≥ `lift`)."""
    words = {**c.words, **dict(c.lexical)}
    order = [m for m, _ in c.lexical] if lexical_only else weak_words(c, 0.85, 0.7)
    out = []
    for m in order:
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        asked = not unseen_only or c.unseen > 0
        held = not asked or c.cover.get(m, 0.0) >= fc
        close = not lexical_only and zscore(c, m) >= near
        out.append((m, 0.0, (rw >= 0.15 and (held or close))
                    or (not lexical_only and lifted(c, m) >= lift)))
    return out


# --- what of the question is evidence: its frame, and a topic the memory lacks -----------

FRAME_CORE = frozenset("""
prefer prefers preferred preferring like likes liked love loves loved enjoy enjoys enjoyed
want wants wanted wish use uses used using think thinks thought feel feels felt say says
said go goes going went gone make makes made making get gets got getting take takes took
favourite favourites favorite favorites often usually typically generally normally tend
tends
""".split())
# And the verbs of saying ("when did Gina mention …", "what did Ana tell …").
FRAME_SAY = FRAME_CORE | frozenset("""
mention mentions mentioned mentioning tell tells told telling talk talks talked talking
discuss discusses discussed discussing
""".split())
# And the verbs of allegiance ("which team does … support").
FRAME_ALL = FRAME_SAY | frozenset("""
support supports supported supporting favour favours favoured favor favors favored
""".split())
FRAME_WIDE = FRAME_CORE | frozenset("""
kind many much recently mention mentioned describe share shared remind previous currently
""".split())
_ANALYZER: list[Any] = []


@dataclass
class Asked:
    topic: int  # bits of c.stems that count toward a match
    absent: int  # bits of topic stems no record holds
    blocked: int  # bits of stems in a run of content words with an absent one
    weight: dict[int, float]  # bit -> idf


def asked(c: Case, frame: frozenset[str], verbs: bool = False) -> Asked:
    """`verbs`: a word in its -ed form (its stem drops the ending: a past tense or
    participle) is no part of a compound: it ends a run."""
    import math
    import re

    from memvault.index.keyed import ROLE_WORDS, STOPWORDS, Analyzer

    if not _ANALYZER:
        _ANALYZER.append(Analyzer(bytes(32)))
    an = _ANALYZER[0]
    bit = {s: 1 << i for i, s in enumerate(c.stems[:24])}
    content = frame_bits = 0
    runs: list[list[str]] = []
    for segment in re.split(r"[,.;:?!()\"]", c.text):
        run: list[str] = []
        for word in an.words(segment):
            stems = an.tokens(word)
            kind = "stop" if word in STOPWORDS or word in ROLE_WORDS else \
                "frame" if word in frame else "content"
            for st in stems:
                if kind == "content":
                    content |= bit.get(st, 0)
                elif kind == "frame":
                    frame_bits |= bit.get(st, 0)
            if kind == "content" and verbs and word.endswith("ed") and stems \
                    and stems[0] != word:
                if run:
                    runs.append(run)
                runs.append(stems)
                run = []
            elif kind == "content":
                run += stems
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
    every = sum(bit.values())
    topic = content if content else every
    absent = sum(b for s, b in bit.items() if b & topic and not c.df.get(s, 0))
    blocked = 0
    for run in runs:
        bits = sum(bit.get(s, 0) for s in set(run))
        if bits & absent:
            blocked |= bits
    n = max(c.docs, 1)
    weight = {b: math.log(1 + (n - min(n, c.df.get(s, 0)) + 0.5) / (min(n, c.df.get(s, 0))
                                                                    + 0.5))
              for s, b in bit.items()}
    return Asked(topic, absent, blocked, weight)


def share(a: Asked, held: int, of: int) -> float:
    total = sum(w for b, w in a.weight.items() if b & of)
    return sum(w for b, w in a.weight.items() if b & of & held) / total if total else 0.0


def framed(c: Case, frame: frozenset[str] = FRAME_CORE, absent: str = "", t: float = 0.0,
           vouch: float = 9.0, lexical_only: bool = False, verbs: bool = False) -> Ranked:
    """The product's order and floor, and a record matches by words only when it holds
    a topic word of the question (not its frame); when a topic word is held by no
    record, `absent` asks more: "share" (the topic's idf share held ≥ t), "count" (more
    than half the topic words), "run" (a topic word outside the runs of content words
    holding the absent one). `vouch`: a lifted cosine that stands for the words."""
    words = {**c.words, **dict(c.lexical)}
    order = [m for m, _ in c.lexical] if lexical_only else weak_words(c, 0.85, 0.7)
    a = asked(c, frame, verbs)
    sem = dict(c.semantic)
    out = []
    for m in order:
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        held = c.held.get(m, 0)
        ok = rw >= 0.15 and bool(held & a.topic)
        if ok and a.absent and absent:
            if absent == "share":
                ok = share(a, held, a.topic) >= t
            elif absent == "count":
                ok = 2 * bin(held & a.topic).count("1") > bin(a.topic).count("1")
            elif absent == "run":
                ok = bool(held & a.topic & ~a.blocked)
            elif absent == "runshare":
                ok = bool(held & a.topic & ~a.blocked) and share(a, held, a.topic) >= t
            if not ok and not lexical_only and m in sem and lifted(c, m) >= vouch:
                ok = True
        out.append((m, 0.0, ok or (not lexical_only and lifted(c, m) >= 0.42)))
    return out


def frame_study(true: list[Case], null: list[Case], detail: bool) -> None:
    """Variant (a), the frame, and (b), a topic word the memory lacks, over the product."""
    lex = report("lexical (the bar for every category)", true, null,
                 lambda c: [m for m, _ in c.lexical], detail)
    rows: list[tuple[str, object]] = [
        ("the product (≥ 0.15 or lifted ≥ 0.42)", lambda c: coverage_near(c, 0.0, 99.0)),
        ("lexical product (≥ 0.15)", lambda c: [(m, 0.0, s / c.ideal >= 0.15)
                                               for m, s in c.lexical]),
        ("(a) frame core", lambda c: framed(c)),
        ("(a) frame core, lexical", lambda c: framed(c, lexical_only=True)),
        ("(a) frame wide", lambda c: framed(c, FRAME_WIDE)),
    ]
    rows.append(("(a) frame core and saying", lambda c: framed(c, FRAME_SAY)))
    rows.append(("(a) frame, saying, allegiance", lambda c: framed(c, FRAME_ALL)))
    for name, f, v in (("(a+b) all, run, -ed ends a run", FRAME_ALL, True),
                       ("(a+b) all, run", FRAME_ALL, False)):
        rows.append((name, lambda c, f=f, v=v: framed(c, f, "run", verbs=v)))
        rows.append((name + ", lexical",
                     lambda c, f=f, v=v: framed(c, f, "run", lexical_only=True, verbs=v)))
        for lift in (0.3, 0.35, 0.4):
            rows.append((name + f" or lifted ≥ {lift}",
                         lambda c, f=f, v=v, lift=lift: framed(c, f, "run", 0.0, lift,
                                                               verbs=v)))
    for frame, fname in ((FRAME_CORE, "core"), (FRAME_SAY, "saying")):
        rows.append((f"(a+b) {fname}, count > half", lambda c, f=frame: framed(c, f, "count")))
        rows.append((f"(a+b) {fname}, count > half, lexical",
                     lambda c, f=frame: framed(c, f, "count", lexical_only=True)))
        rows.append((f"(a+b) {fname}, run", lambda c, f=frame: framed(c, f, "run")))
        rows.append((f"(a+b) {fname}, run, lexical",
                     lambda c, f=frame: framed(c, f, "run", lexical_only=True)))
        for t in (0.3, 0.4, 0.5, 0.6):
            rows.append((f"(a+b) {fname}, share ≥ {t}",
                         lambda c, f=frame, t=t: framed(c, f, "share", t)))
            rows.append((f"(a+b) {fname}, run and share ≥ {t}",
                         lambda c, f=frame, t=t: framed(c, f, "runshare", t)))
        for v in (0.25, 0.3, 0.35):
            rows.append((f"(a+b) {fname}, share ≥ 0.5 or lifted ≥ {v}",
                         lambda c, f=frame, v=v: framed(c, f, "share", 0.5, v)))
            rows.append((f"(a+b) {fname}, run or lifted ≥ {v}",
                         lambda c, f=frame, v=v: framed(c, f, "run", 0.0, v)))
    for name, rank in rows:
        report(name, true, null, rank, detail, lex)


def vouched(c: Case, vouch: float) -> Ranked:
    """The product's rule (the frame, a run the memory lacks, the -ed ending a run), and
    a record the words' rule refuses (its words' relevance ≥ 0.15, but it holds only the
    frame or a lacking run) matches when its lifted cosine reaches `vouch`: 0.42 is the
    meaning's own floor, the product's."""
    words = {**c.words, **dict(c.lexical)}
    a = asked(c, FRAME_ALL, True)
    out = []
    for m in weak_words(c, 0.85, 0.7):
        rw = words.get(m, 0.0) / c.ideal if c.ideal > 0 else 0.0
        held = c.held.get(m, 0)
        ok = rw >= 0.15 and bool(held & a.topic)
        if ok and a.absent:
            ok = bool(held & a.topic & ~a.blocked)
        near = lifted(c, m)
        out.append((m, 0.0, ok or near >= 0.42 or (rw >= 0.15 and near >= vouch)))
    return out


def vouch_study(true: list[Case], null: list[Case], detail: bool) -> None:
    """How near by meaning a record the words' rule refuses must be to match: the
    meaning's own floor (lifted 0.42) and lower ones."""
    lex = report("lexical (the bar for every category)", true, null,
                 lambda c: [m for m, _ in c.lexical], detail)
    report("the product (refused: lifted ≥ 0.42, the floor)", true, null,
           lambda c: framed(c, FRAME_ALL, "run", verbs=True), detail, lex)
    for v in (0.42, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1):
        report(f"refused by words: lifted ≥ {v}", true, null,
               lambda c, v=v: vouched(c, v), detail, lex)


def recall_at(ranked: list[str], gold: set[str]) -> float:
    return 100 * len(gold & set(ranked[:K])) / len(gold) if gold else 0.0


def hit_at(ranked: list[str], sessions: set[int]) -> float:
    got = {int(t.split(":")[0]) for t in ranked[:K] if ":" in t}
    return 100.0 if got & sessions else 0.0


def report(name: str, true: list[Case], null: list[Case], rank: object,
           detail: bool = False, base: dict[str, float] | None = None) -> dict[str, float]:
    """R@10 per set (and LME hit@10) with the floor applied, per half and kind; the share
    of unrelated questions answered with nothing."""
    rows: dict[str, list[float]] = {}
    for c in true:
        got = rank(c)  # type: ignore[operator]
        kept = [m for m, _, ok in got if ok] if got and isinstance(got[0], tuple) else got
        r = recall_at(kept, c.gold)
        key = "LoCoMo" if c.dataset == "locomo" else "LME"
        rows.setdefault(key, []).append(r)
        rows.setdefault(f"{key} {'AB'[c.half]}", []).append(r)
        rows.setdefault(f"{key} {c.kind}", []).append(r)
        if c.dataset == "lme":
            hit = hit_at(kept, c.gold_sessions)
            rows.setdefault("LME hit", []).append(hit)
            rows.setdefault(f"LME hit {c.kind}", []).append(hit)
    empty = []
    for c in null:
        got = rank(c)  # type: ignore[operator]
        kept = [m for m, _, ok in got if ok] if got and isinstance(got[0], tuple) else got
        empty.append(100.0 if not kept[:K] else 0.0)
    out = {k: statistics.fmean(v) for k, v in rows.items()}
    out["null empty"] = statistics.fmean(empty)
    main = ("LoCoMo", "LoCoMo A", "LoCoMo B", "LME", "LME hit", "LME A", "LME B")
    print(f"{name:<52}" + "".join(f"{out[k]:>7.1f}" for k in main)
          + f"{out['null empty']:>7.1f}" + (f"   {worst(out, base)}" if base else ""))
    if detail:
        for k in sorted(out):
            if k not in main and k != "null empty":
                print(f"    {k:<40}{out[k]:>7.1f}")
    return out


def quantiles(name: str, values: list[float]) -> None:
    qs = statistics.quantiles(values, n=100) if len(values) > 1 else values * 99
    print(f"  {name:<40} n={len(values):<5} p5 {qs[4]:.3f} p50 {qs[49]:.3f} "
          f"p90 {qs[89]:.3f} p95 {qs[94]:.3f} p99 {qs[98]:.3f}")


def worst(out: dict[str, float], base: dict[str, float]) -> str:
    """The set, half, category or type that loses most against `base`."""
    loss, key = min((out[k] - base[k], k) for k in out if k != "null empty")
    return f"{loss:+.1f} {key}" if loss < 0 else "none"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--refresh", action="store_true")
    parser.add_argument("--detail", action="store_true")
    parser.add_argument("--frame", action="store_true",
                        help="only the frame and absent-topic rules")
    parser.add_argument("--vouch", action="store_true",
                        help="only how near by meaning a record the words refuse must be")
    args = parser.parse_args(argv or [])
    cache = RESULTS / "relevance_cache.pickle"
    if args.refresh or not cache.exists():
        for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG",
                    "MEM_USER"):
            os.environ.pop(var, None)
        cache.write_bytes(pickle.dumps(collect()))
    true, null = pickle.loads(cache.read_bytes())
    if args.frame:
        frame_study(true, null, args.detail)
        return
    if args.vouch:
        vouch_study(true, null, args.detail)
        return

    print("Unrelated pairs (a question asked of the other set's memory): best scores")
    quantiles("words: best BM25 / ideal", [c.lexical[0][1] / c.ideal for c in null
                                           if c.lexical and c.ideal > 0] or [0.0])
    quantiles("words: best coverage", [max(c.cover.values()) for c in null if c.cover])
    quantiles("meaning: best cosine", [c.semantic[0][1] for c in null if c.semantic])
    quantiles("meaning: best lifted (cos - base) / (1 - base)",
              [max(lifted(c, m) for m, _ in c.semantic) for c in null if c.semantic])
    quantiles("meaning: best z-score", [max(zscore(c, m) for m, _ in c.semantic)
                                        for c in null if c.semantic])
    print("Related pairs: each gold turn's scores where a leg returned it")
    lex_gold = [dict(c.lexical)[g] / c.ideal for c in true for g in c.gold
                if g in dict(c.lexical) and c.ideal > 0]
    quantiles("words: gold BM25 / ideal", lex_gold)
    quantiles("words: gold coverage", [c.cover[g] for c in true for g in c.gold
                                       if g in c.cover])
    quantiles("meaning: gold cosine", [dict(c.semantic)[g] for c in true for g in c.gold
                                       if g in dict(c.semantic)])
    quantiles("meaning: gold lifted", [lifted(c, g) for c in true for g in c.gold
                                       if g in c.exact])
    print(f"questions holding a word no record of the memory holds: related "
          f"{sum(1 for c in true if c.unseen)} / {len(true)}, unrelated "
          f"{sum(1 for c in null if c.unseen)} / {len(null)}")

    head = ("LoCoMo", "A", "B", "LME", "hit", "A", "B", "null∅")
    print("\nR@10 (LongMemEval hit@10: session) with each floor; null∅: the unrelated "
          "questions answered with nothing; worst: against the same mode without a floor")
    print(f"{'rule':<52}" + "".join(f"{h:>7}" for h in head) + "   worst")
    rows: list[tuple[str, object, str]] = [
        ("lexical (BM25 order, no floor)", lambda c: [m for m, _ in c.lexical], "lexical"),
        ("hybrid (the fusion, no floor)", today, "hybrid"),
        ("semantic (cosine order, no floor)", lambda c: [m for m, _ in c.semantic],
         "semantic")]
    for fw in (0.1, 0.15, 0.18, 0.19, 0.2, 0.25, 0.3):
        rows.append((f"lexical, BM25/ideal ≥ {fw}", lambda c, fw=fw: lexical_floored(c, fw),
                     "lexical"))
        rows.append((f"hybrid, BM25/ideal ≥ {fw} or cos ≥ 0.44",
                     lambda c, fw=fw: floored(c, 0.44, fw), "hybrid"))
    for c0 in (0.2, 0.3, 0.35, 0.4, 0.44, 0.5):
        rows.append((f"semantic, cos ≥ {c0}",
                     lambda c, c0=c0: [(m, 0.0, cos >= c0) for m, cos in c.semantic],
                     "semantic"))
        rows.append((f"hybrid, BM25/ideal ≥ 0.15 or cos ≥ {c0}",
                     lambda c, c0=c0: floored(c, c0, 0.15), "hybrid"))
    for fc in (0.2, 0.3, 0.5):
        rows.append((f"lexical, coverage ≥ {fc}",
                     lambda c, fc=fc: covered(c, 0.44, fc, lexical_only=True), "lexical"))
    for fc in (0.5, 0.6):
        rows.append((f"lexical, ≥ 0.25, and coverage ≥ {fc} if a word is unseen",
                     lambda c, fc=fc: unseen_rule(c, 0.44, 0.25, fc, True), "lexical"))
    for w in (0.9,):
        rows.append((f"absolute fusion w={w} (cos-0.5)/0.5, no floor",
                     lambda c, w=w: [(m, sc, True) for m, sc, _ in absolute(c, w, 0.5, 0.0)],
                     "hybrid"))
        rows.append((f"words ÷ ideal + min-max meaning w={w}, no floor",
                     lambda c, w=w: [(m, sc, True) for m, sc, _ in mixed(c, w, 0.5, 0.0)],
                     "hybrid"))
    rows.append(("hybrid, words 0.7 for every question", lambda c: today(c, 0.7), "hybrid"))
    for t in (0.5, 0.7, 0.8, 0.85, 0.9, 1.0, 1.2):
        for w in (0.65, 0.7, 0.75):
            rows.append((f"hybrid, words {w} when the best BM25/ideal < {t}",
                         lambda c, t=t, w=w: weak_words(c, t, w), "hybrid"))
    rows.append(("lexical (again: the bar for every category)",
                 lambda c: [m for m, _ in c.lexical], "lexical"))
    for t, w in ((0.85, 0.7), (1.0, 0.7)):
        rows.append((f"hybrid, words {w} when the best < {t}, against lexical",
                     lambda c, t=t, w=w: weak_words(c, t, w), "lexical"))
    # The meaning's floor in the model's own scale (what a user's model is floored by).
    for lift in (0.38, 0.4, 0.42, 0.45):
        rows.append((f"semantic, lifted ≥ {lift}", lambda c, lift=lift: [
            (m, 0.0, lifted(c, m) >= lift) for m, _ in c.semantic], "semantic"))
    for z in (4.0, 4.75):
        rows.append((f"semantic, z-score ≥ {z}", lambda c, z=z: [
            (m, 0.0, zscore(c, m) >= z) for m, _ in c.semantic], "semantic"))
    # What a match is: how much of the question a record holds, or its meaning near.
    rows.append(("hybrid, weak words, ≥ 0.15 or lifted ≥ 0.42 (the product)",
                 lambda c: coverage_near(c, 0.0, 99.0), "lexical"))
    for fc in (0.3, 0.4, 0.5):
        rows.append((f"lexical, ≥ 0.15 and coverage ≥ {fc}",
                     lambda c, fc=fc: coverage_near(c, fc, 99.0, lexical_only=True),
                     "lexical"))
        for near in (1.0, 2.0, 3.0):
            rows.append((f"hybrid, coverage ≥ {fc} or z ≥ {near}",
                         lambda c, fc=fc, near=near: coverage_near(c, fc, near), "lexical"))
    for near in (1.0, 2.0, 2.5):
        rows.append((f"hybrid, a word unseen: coverage ≥ 0.4 or z ≥ {near}",
                     lambda c, near=near: coverage_near(c, 0.4, near, unseen_only=True),
                     "lexical"))
    bases: dict[str, dict[str, float]] = {}
    for name, rank, mode in rows:
        out = report(name, true, null, rank, args.detail, bases.get(mode))
        bases.setdefault(mode, out)


if __name__ == "__main__":
    main(sys.argv[1:])
