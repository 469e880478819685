"""What the semantic leg embeds and asks with: variants of the built-in model's leg, each
fused by the product's rule (index/fusion.py) and measured on both dev sets at once.

fusion_study.py varied the fusion over a fixed semantic leg; this one varies the leg:
a turn's vector mixed with its session neighbours', a session's centroid as a boost, the
query without its function words, the query moved towards the vectors of its best
lexical hits (Rocchio), and the semantic leg re-ranking the lexical top N only; then,
with the weak-words rule, the neighbours' weight tied to the turn's length (`length`),
the better of the own and the mixed cosine or both as legs of their own (`pick2`),
neighbours of one speaker or the turn before only (`speaker`), the words smoothed with
the neighbours' or the session's BM25 (`bm25`), the fusion's constants swept with
them (`joint`, `joint-fine`, `joint-len`, `weakown`), and an agent's reply neither mixed
nor borrowed from, people's turns only (`agent`, `agent-len`: what the product does).

Per memory it caches every turn's vector (the built-in model, as `mem embed` makes
them: the record's content) with its session, and per question its vector and mem's
lexical top 300 (`mem search --mode lexical`, through the search operation, on the
vaults bench_hybrid.py ingested). Halves are by a hash of the question's id (LongMemEval)
or of its conversation and text (LoCoMo), not alternate questions.

    python bench/meaning_study.py [--grid main|win|text|short|chunk|pick|marginM|length|pick2|
                                   speaker|bm25|joint|joint-fine|joint-len|weakown|agent|
                                   agent-len] [--detail]
                                   [--sets locomo lme] [--only SUBSTRING] [--refresh]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pickle
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402
from fusion_study import fts5, scores  # noqa: E402

TOP = 300


@dataclass
class Memory:
    """One user's turns: ids, sessions, texts and unit vectors (rows)."""

    ids: list[str]
    sessions: list[str]
    texts: list[str]
    vectors: Any  # (n, 256) float32
    speakers: list[str] = field(default_factory=list)  # filled on load (older caches)


@dataclass
class Q:
    dataset: str
    kind: str
    half: int
    text: str
    memory: int  # index into the memories
    lexical: list[tuple[str, float]]
    gold: set[str]
    fts5: list[str]
    qvec: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    ideal: float = 0.0  # the query's (index/keyed.py `ideal`): the fusion's weak-words rule


def lexical_top(vault: Any, text: str, filters: Any, now: datetime) -> tuple[
        list[tuple[str, float]], float]:
    """mem's lexical candidates (BM25, the floor's weak ones too) and the query's ideal."""
    from memvault.ops.recall import search

    doc = search(vault, text, filters, now=now, audit=False, mode="lexical", weak=True)
    index = vault.ready_index(vault.state())
    _, stems = index.build_query(text, filters, now, names=(vault.user,))
    return ([(r.message_id or "", r.lexical_score or 0.0) for r in doc.results],
            index.ideal(stems))


def half_of(key: str) -> int:
    return hashlib.sha256(key.encode()).digest()[0] % 2


def collect(dataset: str) -> tuple[list[Memory], list[Q]]:
    import locomo
    import longmemeval
    import numpy as np
    from bench_longmemeval import user_of

    from memvault.config import resolve
    from memvault.embed.builtin import load
    from memvault.model.records import Filters
    from memvault.vault.vault import Vault

    model = load()
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    memories: list[Memory] = []
    qs: list[Q] = []
    base = next(RESULTS.glob("locomo-*"))
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    now = datetime.now(UTC)
    for conv in locomo.load() if dataset == "locomo" else ():
        vault = Vault(resolve(user=conv.sample_id))
        texts = [t.text for t in conv.turns]
        memories.append(Memory([t.dia_id for t in conv.turns], [t.session for t in conv.turns],
                               texts, np.asarray(model.embed(texts), dtype=np.float32)))
        pairs = [(t.dia_id, t.text) for t in conv.turns]
        for q in conv.questions:
            lexical, ideal = lexical_top(vault, q.text, Filters(limit=TOP), now)
            qs.append(Q("locomo", locomo.CATEGORIES[q.category],
                        half_of(conv.sample_id + q.text), q.text, len(memories) - 1,
                        lexical, q.evidence, fts5(pairs, q.text), ideal=ideal))
    base = RESULTS / f"longmemeval-{longmemeval.data_hash()}"
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    for q in longmemeval.load() if dataset == "lme" else ():
        vault = Vault(resolve(user=user_of(q)))
        texts = [t.text for t in q.turns]
        memories.append(Memory([t.turn_id for t in q.turns], [str(t.session) for t in q.turns],
                               texts, np.asarray(model.embed(texts), dtype=np.float32)))
        lexical, ideal = lexical_top(vault, q.text, Filters(limit=TOP, before=q.asked_at),
                                     q.asked_at)
        qs.append(Q("lme", q.kind, half_of(q.question_id), q.text, len(memories) - 1,
                    lexical, q.gold_turns, fts5([(t.turn_id, t.text) for t in q.turns],
                                                q.text), ideal=ideal))
    vecs = model.embed([q.text for q in qs])
    for q, v in zip(qs, vecs, strict=True):
        q.qvec = np.asarray(v, dtype=np.float32)
    return memories, qs


# --- variants of the semantic leg ------------------------------------------------------------


def unit(m: Any) -> Any:
    import numpy as np

    n = np.linalg.norm(m, axis=-1, keepdims=True)
    return np.divide(m, n, out=np.zeros_like(m), where=n > 0)


def windowed(mem: Memory, a: float, width: int = 1) -> Any:
    """Each turn's vector plus a × its neighbours' within `width` turns of the same
    session (a decays with distance: a, a², ...)."""
    v = mem.vectors
    out = v.copy()
    n = len(v)
    for d in range(1, width + 1):
        w = a ** d
        same_prev = [i for i in range(d, n) if mem.sessions[i] == mem.sessions[i - d]]
        for i in same_prev:
            out[i] += w * v[i - d]
            out[i - d] += w * v[i]
    return unit(out)


def words_of(text: str) -> int:
    return len(text.split())


def borrowed(mem: Memory, leg: Leg) -> Any:
    """Each turn's vector plus its own a_i × each same-session neighbour's, where a_i is
    the neighbour weight tied to how much the turn says by itself: `window` for a turn
    of at most `scale` words, `window` × (scale / words) ^ power for a longer one. With
    `speaker` "same" (or "other") only neighbours of that speaker are borrowed from;
    `side` "prev" / "next" only the turn before / after."""
    import numpy as np

    v = mem.vectors
    n = len(v)
    lengths = np.asarray([max(1, words_of(t)) for t in mem.texts], dtype=np.float32)
    a = np.full(n, leg.window, dtype=np.float32)
    if leg.scale:
        a = a * np.minimum(1.0, (leg.scale / lengths) ** leg.power)
    out = v.copy()
    for i in range(n):
        for j in (i - 1, i + 1):
            if not 0 <= j < n or mem.sessions[j] != mem.sessions[i]:
                continue
            if (leg.side == "prev" and j > i) or (leg.side == "next" and j < i):
                continue
            if mem.speakers and leg.agent != "any":
                agent_i, agent_j = (mem.speakers[k] == "assistant" for k in (i, j))
                if (agent_i and leg.agent in ("own", "both")) or (
                        agent_j and leg.agent in ("from", "both")):
                    continue
            if mem.speakers and leg.speaker != "any":
                same = mem.speakers[j] == mem.speakers[i]
                if same != (leg.speaker == "same"):
                    continue
            out[i] += a[i] * v[j]
    return unit(out)


def sided(mem: Memory, a: float, side: str) -> Any:
    """Each turn's vector plus a × the one neighbour before (or after) it in its session."""
    v = mem.vectors
    out = v.copy()
    for i in range(1, len(v)):
        if mem.sessions[i] == mem.sessions[i - 1]:
            if side == "prev":
                out[i] += a * v[i - 1]
            else:
                out[i - 1] += a * v[i]
    return unit(out)


def centroids(mem: Memory, vecs: Any) -> tuple[Any, Any]:
    """(session centroid per turn, unit)."""
    import numpy as np

    order = {s: k for k, s in enumerate(dict.fromkeys(mem.sessions))}
    idx = np.asarray([order[s] for s in mem.sessions])
    sums = np.zeros((len(order), vecs.shape[1]), dtype=np.float32)
    np.add.at(sums, idx, vecs)
    return unit(sums)[idx], idx


STRIP_WORDS: frozenset[str] = frozenset()


def stripped(text: str) -> str:
    """The question without its function words (the index's query stopwords)."""
    import re

    words = re.findall(r"[\w'’-]+|[^\w\s]", text)
    kept = [w for w in words if w.lower() not in STRIP_WORDS and re.match(r"\w", w)]
    return " ".join(kept) or text


@dataclass(frozen=True)
class Leg:
    """How a question's cosines are made."""

    window: float = 0.0  # neighbours' weight in a turn's vector
    width: int = 1
    session: float = 0.0  # + session × cos(query, the turn's session centroid)
    strip: bool = False  # the query embedded without stopwords
    rocchio: float = 0.0  # query + rocchio × mean of the lexical top k's vectors
    rocchio_k: int = 5
    session_max: bool = False  # session score: best turn's cosine instead of centroid
    own: float = 0.0  # + own × the turn's own (unwindowed) cosine
    chunk: int = 0  # a turn longer than this many words: the best of its chunks' cosines
    text_window: bool = False  # the turn embedded with its neighbours' text (one mean)
    side: str = "both"  # window: "both" neighbours, or "prev" / "next" only
    short: int = 0  # window only the turns of at most this many words (0: every turn)
    scale: int = 0  # the neighbours' weight falls past this many words (see `borrowed`)
    power: float = 1.0
    speaker: str = "any"  # borrow from neighbours of the "same" / "other" speaker only
    agent: str = "any"  # an agent's turn: "own" keeps its vector, "from" is not borrowed
    #                     from, "both" neither (a LongMemEval assistant; LoCoMo has none)
    pick: str = "sum"  # "max": the better of own and mixed cosine; "legs": two pools
    lam: float = 0.0  # words smoothed: BM25 + lam × the neighbours' (or session's best)
    lam_of: str = "nb"  # "nb" (the same-session neighbours) or "session" (its best)
    weak: tuple[float, float] | None = None  # (WEAK_WORDS, WEAK_WEIGHT) instead of the product's
    weak_own: bool = False  # where the words are weak, the turn's own vector (no mixing)

    def name(self) -> str:
        parts = []
        if self.window:
            parts.append(f"win{self.window}x{self.width}")
        if self.session:
            parts.append(f"sess{'max' if self.session_max else ''}{self.session}")
        if self.text_window:
            parts.append("textwin")
        if self.side != "both":
            parts.append(self.side)
        if self.short:
            parts.append(f"short{self.short}")
        if self.scale:
            parts.append(f"len{self.scale}^{self.power}")
        if self.speaker != "any":
            parts.append(f"spk-{self.speaker}")
        if self.agent != "any":
            parts.append(f"agent-{self.agent}")
        if self.pick != "sum":
            parts.append(self.pick)
        if self.lam:
            parts.append(f"bm25{self.lam_of}{self.lam}")
        if self.weak:
            parts.append(f"weak{self.weak[0]}/{self.weak[1]}")
        if self.weak_own:
            parts.append("weak-own")
        if self.own:
            parts.append(f"own{self.own}")
        if self.chunk:
            parts.append(f"chunk{self.chunk}")
        if self.strip:
            parts.append("strip")
        if self.rocchio:
            parts.append(f"rocchio{self.rocchio}@{self.rocchio_k}")
        return "+".join(parts) or "plain"


class Cos:
    def __init__(self, memories: list[Memory], qs: list[Q]) -> None:
        self.memories, self.qs = memories, qs
        self._vec: dict[tuple[int, float, int], Any] = {}
        self._strip: dict[int, Any] = {}
        self.pos = [{m: i for i, m in enumerate(mem.ids)} for mem in memories]

    def vectors(self, k: int, leg: Leg) -> Any:
        key = (k, leg.window, leg.width, leg.text_window, leg.side, leg.short, leg.scale,
               leg.power, leg.speaker, leg.agent)
        if key not in self._vec:
            mem = self.memories[k]
            if leg.window and (leg.scale or leg.speaker != "any" or leg.agent != "any"):
                self._vec[key] = borrowed(mem, leg)
            elif leg.text_window:
                from memvault.embed.builtin import load

                t, s = mem.texts, mem.sessions
                joined = [" ".join(t[j] for j in (i - 1, i, i + 1)
                                   if 0 <= j < len(t) and s[j] == s[i]) for i in range(len(t))]
                self._vec[key] = load().embed(joined)
            elif leg.side != "both":
                self._vec[key] = sided(mem, leg.window, leg.side)
            else:
                self._vec[key] = windowed(mem, leg.window, leg.width) if leg.window \
                    else mem.vectors
            if leg.short:
                import numpy as np

                long = np.asarray([len(t.split()) > leg.short for t in mem.texts])
                self._vec[key] = np.where(long[:, None], mem.vectors, self._vec[key])
        return self._vec[key]

    def chunks(self, k: int, words: int) -> tuple[Any, Any]:
        """Vectors of the chunks of `words` words of each longer turn, and their turn."""
        import numpy as np

        key = (k, -1.0, words)
        if key not in self._vec:
            from memvault.embed.builtin import load

            texts, owner = [], []
            for i, t in enumerate(self.memories[k].texts):
                w = t.split()
                if len(w) > words:
                    for at in range(0, len(w), words):
                        texts.append(" ".join(w[at:at + words]))
                        owner.append(i)
            self._vec[key] = (load().embed(texts) if texts else np.zeros((0, 256), np.float32),
                              np.asarray(owner, dtype=np.int64))
        return self._vec[key]

    def qvec(self, j: int, leg: Leg) -> Any:
        if not leg.strip:
            return self.qs[j].qvec
        if j not in self._strip:
            from memvault.embed.builtin import load

            self._strip[j] = load().embed([stripped(self.qs[j].text)])[0]
        return self._strip[j]

    def cosines(self, j: int, leg: Leg) -> dict[str, float]:
        import numpy as np

        q = self.qs[j]
        mem = self.memories[q.memory]
        vecs = self.vectors(q.memory, leg)
        qv = self.qvec(j, leg)
        if leg.rocchio:
            pos = self.pos[q.memory]
            top = [pos[m] for m, _ in q.lexical[:leg.rocchio_k] if m in pos]
            if top:
                qv = unit(qv + leg.rocchio * vecs[top].mean(axis=0))
        sims = vecs @ qv
        if leg.chunk:
            cv, owner = self.chunks(q.memory, leg.chunk)
            if len(owner):
                np.maximum.at(sims, owner, cv @ qv)
        if leg.own:
            sims = sims + leg.own * (mem.vectors @ qv)
        if leg.pick == "max":  # the better of the turn's own cosine and the mixed one
            sims = np.maximum(sims, mem.vectors @ qv)
        if leg.session:
            if leg.session_max:
                order = {s: k for k, s in enumerate(dict.fromkeys(mem.sessions))}
                idx = np.asarray([order[s] for s in mem.sessions])
                best = np.full(len(order), -1.0, dtype=np.float32)
                np.maximum.at(best, idx, sims)
                sims = sims + leg.session * best[idx]
            else:
                cents, _ = centroids(mem, vecs)
                sims = sims + leg.session * (cents @ qv)
        return dict(zip(mem.ids, sims.tolist(), strict=True))


# --- fusion (the product's) and scoring --------------------------------------------------------

N = 50


MARGIN: float | None = None  # --grid margin: a semantic-only candidate let in at 10th


def fused(q: Q, cos: dict[str, float], weight: float, rerank: int = 0,
          leg: Leg | None = None, own: dict[str, float] | None = None,
          lexical: list[tuple[str, float]] | None = None) -> list[str]:
    out = _fused(q, cos, weight, rerank, leg or Leg(), own, lexical)
    if MARGIN is None:
        return out
    # The semantic leg's best, if the fused top 10 lacks it and its cosine beats every
    # one of theirs by MARGIN, takes 10th place: meaning let in only when it is sure.
    best = max(cos, key=lambda m: cos[m])
    head = out[:10]
    if best in head or cos[best] < max(cos.get(m, 0.0) for m in head) + MARGIN:
        return out
    return out[:9] + [best] + [m for m in out[9:] if m != best]


def _fused(q: Q, cos: dict[str, float], weight: float, rerank: int, leg: Leg,
           own: dict[str, float] | None, lexical_all: list[tuple[str, float]] | None
           ) -> list[str]:
    from memvault.index.fusion import fuse

    ranked = lexical_all if lexical_all is not None else q.lexical
    lexical = ranked[:N]
    if rerank:  # the semantic leg only over the lexical top `rerank`
        pool = {m for m, _ in ranked[:rerank]}
        semantic = sorted(((m, cos[m]) for m in pool if m in cos), key=lambda kv: -kv[1])
    else:
        semantic = sorted(cos.items(), key=lambda kv: -kv[1])[:N]
    scores = dict(ranked)
    if own is not None and leg.weak_own:
        from memvault.index import fusion

        weak_words = (leg.weak or (fusion.WEAK_WORDS, 0.0))[0]
        best = max((v for _, v in lexical), default=0.0) / q.ideal if q.ideal > 0 else 0.0
        if best < weak_words:  # weak words: the own vectors' leg
            semantic = sorted(own.items(), key=lambda kv: -kv[1])[:N]
        own = None
    if own is not None:  # two semantic legs (own and mixed), each its own pool
        return _three(q, lexical, scores, semantic,
                      sorted(own.items(), key=lambda kv: -kv[1])[:N], weight, leg)
    # `weight`: the words' share where they are strong (the product's LEXICAL_WEIGHT);
    # the weak-words rule as the product has it (or the leg's).
    with _weight(weight, leg.weak):
        out = fuse(lexical, semantic, ideal=q.ideal,
                   lexical_scores={m: scores.get(m, 0.0) for m, _ in semantic}, floor=False)
    return [f.memory_id for f in out]


def _three(q: Q, lexical: list[tuple[str, float]], scores: dict[str, float],
           mixed: list[tuple[str, float]], own: list[tuple[str, float]], weight: float,
           leg: Leg) -> list[str]:
    """The product's rule with two semantic legs: each leg's cosines min-max normalised
    over the candidates (a candidate a leg did not return counts its lowest), the
    meaning's share split evenly between them."""
    from memvault.index import fusion

    weak_words, weak_weight = leg.weak or (fusion.WEAK_WORDS, fusion.WEAK_WEIGHT)
    ids = list(dict.fromkeys([m for m, _ in lexical] + [m for m, _ in mixed]
                             + [m for m, _ in own]))
    rel = {m: scores.get(m, 0.0) / q.ideal if q.ideal > 0 else 0.0 for m in ids}
    spread = max(rel.values()) - min(rel.values())
    best = max((rel[m] for m, _ in lexical), default=0.0)
    w = weight if best >= weak_words else weak_weight
    share = (1 - w) / w
    near = {m: 0.0 for m in ids}
    for legs in (mixed, own):
        got = dict(legs)
        low = min(got.values())
        for m, v in fusion.normalised({m: got.get(m, low) for m in ids}).items():
            near[m] += v / 2
    return sorted(ids, key=lambda m: (-(rel[m] + share * near[m] * spread), -near[m], m))


def smoothed(q: Q, mem: Memory, pos: dict[str, int], lam: float, of: str
             ) -> list[tuple[str, float]]:
    """The lexical top (300) with each turn's BM25 plus lam × its same-session neighbours'
    (or its session's best), as far as the top holds them (a turn outside it: 0)."""
    got = dict(q.lexical)
    best: dict[str, float] = {}
    if of == "session":
        for m, v in q.lexical:
            if m in pos:
                s = mem.sessions[pos[m]]
                best[s] = max(best.get(s, 0.0), v)
    out = []
    for m, v in q.lexical:
        i = pos.get(m)
        extra = 0.0
        if i is not None:
            if of == "session":
                extra = best.get(mem.sessions[i], 0.0)
            else:
                extra = sum(got.get(mem.ids[j], 0.0) for j in (i - 1, i + 1)
                            if 0 <= j < len(mem.ids) and mem.sessions[j] == mem.sessions[i])
        out.append((m, v + lam * extra))
    out.sort(key=lambda kv: (-kv[1], kv[0]))
    return out


@contextlib.contextmanager
def _weight(weight: float, weak: tuple[float, float] | None = None) -> Iterator[None]:
    from memvault.index import fusion

    saved = fusion.LEXICAL_WEIGHT, fusion.WEAK_WORDS, fusion.WEAK_WEIGHT
    fusion.LEXICAL_WEIGHT = weight
    if weak is not None:
        fusion.WEAK_WORDS, fusion.WEAK_WEIGHT = weak
    try:
        yield
    finally:
        fusion.LEXICAL_WEIGHT, fusion.WEAK_WORDS, fusion.WEAK_WEIGHT = saved


def evaluate(qs: list[Q], ranked: list[list[str]]) -> dict[str, float]:
    return scores((q.dataset, q.kind, q.half, q.gold, r)
                  for q, r in zip(qs, ranked, strict=True))


COLS = ["locomo", "lme", "lme hit@10", "locomo halfA", "locomo halfB", "lme halfA",
        "lme halfB"]


def main(argv: list[str] | None = None) -> None:
    global STRIP_WORDS
    parser = argparse.ArgumentParser()
    parser.add_argument("--refresh", action="store_true")
    parser.add_argument("--only", help="rules whose name contains this")
    parser.add_argument("--grid", default="main")
    parser.add_argument("--sets", nargs="*", default=["locomo", "lme"])
    parser.add_argument("--detail", action="store_true", help="every category and type")
    args = parser.parse_args(argv)
    from memvault.index.keyed import STOPWORDS

    STRIP_WORDS = STOPWORDS
    memories: list[Memory] = []
    qs: list[Q] = []
    for dataset in args.sets:
        cache = RESULTS / f"meaning-study-{dataset}.pickle"
        if args.refresh or not cache.exists():
            cache.write_bytes(pickle.dumps(collect(dataset)))
        mems, more = pickle.loads(cache.read_bytes())
        for q in more:
            q.memory += len(memories)
        memories += mems
        qs += more
    cos = Cos(memories, qs)
    base = evaluate(qs, [[m for m, _ in q.lexical] for q in qs])
    fts = evaluate(qs, [q.fts5 for q in qs])
    kinds = sorted(k for k in base if " " in k and "half" not in k and k != "lme hit@10")
    print(f"{len(qs)} questions")
    print(f"{'rule':<44}" + "".join(f"{c[:12]:>13}" for c in COLS)
          + "  worst vs lexical (lme worst vs fts5)")

    def show(label: str, row: dict[str, float]) -> None:
        worst = min(kinds, key=lambda k: row[k] - base[k])
        worst_f = min((k for k in kinds if k.startswith("lme")),
                      key=lambda k: row[k] - fts[k], default=worst)
        print(f"{label:<44}" + "".join(f"{row.get(c, 0.0):>13.1f}" for c in COLS)
              + f"  {worst[:22]} {row[worst] - base[worst]:+.1f}"
              + f" ({worst_f[4:18]} {row[worst_f] - fts[worst_f]:+.1f})", flush=True)
        if args.detail:
            print("    " + ", ".join(f"{k} {row[k]:.1f} ({row[k] - base[k]:+.1f})"
                                      for k in kinds))

    show("lexical", base)
    show("fts5", fts)
    speakers(memories, args.sets)
    legs = grid(args.grid)
    for leg, weights, rerank in legs:
        if args.only and not any(args.only in f"{leg.name()} w={w}" for w in weights):
            continue
        per_q = [cos.cosines(j, leg) for j in range(len(qs))]
        owns = [cos.cosines(j, Leg()) if leg.pick == "legs" or leg.weak_own else None
                for j in range(len(qs))]
        lexicals = [smoothed(q, memories[q.memory], cos.pos[q.memory], leg.lam, leg.lam_of)
                    if leg.lam else None for q in qs]
        for w in weights:
            label = f"{leg.name()} w={w}" + (f" rerank{rerank}" if rerank else "")
            if args.only and args.only not in label:
                continue
            show(label, evaluate(qs, [fused(q, c, w, rerank, leg, o, lx) for q, c, o, lx
                                      in zip(qs, per_q, owns, lexicals, strict=True)]))
        if 0.0 not in weights:
            show(f"{leg.name()} alone", evaluate(qs, [
                [m for m, _ in sorted(c.items(), key=lambda kv: -kv[1])[:N]] for c in per_q]))


def speakers(memories: list[Memory], sets: list[str]) -> None:
    """Each turn's speaker (a LoCoMo name, a LongMemEval role), for caches made before
    they were kept: the memories are in the order `collect` made them."""
    import locomo
    import longmemeval

    turns: list[list[str]] = []
    for dataset in sets:
        turns += ([[t.speaker for t in c.turns] for c in locomo.load()] if dataset == "locomo"
                  else [[t.role for t in q.turns] for q in longmemeval.load()])
    for mem, said in zip(memories, turns, strict=True):
        mem.speakers = said if len(said) == len(mem.ids) else []


def grid(name: str) -> list[tuple[Leg, tuple[float, ...], int]]:
    W = (0.9, 0.8, 0.7, 0.5)
    if name == "main":
        return [
            (Leg(), W, 0),
            (Leg(window=0.5), W, 0), (Leg(window=1.0), W, 0), (Leg(window=0.5, width=2), W, 0),
            (Leg(session=0.5), W, 0), (Leg(session=1.0), W, 0),
            (Leg(session=0.5, session_max=True), W, 0),
            (Leg(strip=True), W, 0),
            (Leg(rocchio=0.5), W, 0), (Leg(rocchio=1.0), W, 0),
            (Leg(rocchio=1.0, rocchio_k=10), W, 0),
            (Leg(), (0.9, 0.7, 0.5, 0.3), 50), (Leg(), (0.9, 0.7, 0.5, 0.3), 20),
        ]
    if name.startswith("margin"):
        global MARGIN
        MARGIN = float(name[6:])
        return [(Leg(), (0.9,), 0), (Leg(window=0.5), (0.9,), 0), (Leg(window=0.75), (0.9,), 0)]
    if name == "chunk":
        return [(Leg(chunk=50), (0.9, 0.8), 0), (Leg(chunk=100), (0.9, 0.8), 0),
                (Leg(chunk=50, window=0.75), (0.9, 0.8), 0)]
    if name == "text":
        return [(Leg(text_window=True), (0.9, 0.85, 0.8), 0),
                (Leg(window=0.75, side="prev"), (0.9, 0.85, 0.8), 0),
                (Leg(window=0.75, side="next"), (0.9, 0.85, 0.8), 0)]
    if name == "short":
        return [(Leg(window=0.75, short=20), (0.9, 0.85), 0),
                (Leg(window=0.75, short=40), (0.9, 0.85), 0),
                (Leg(window=0.5, short=40), (0.9, 0.85), 0)]
    if name == "length":  # (1) the neighbours' weight tied to how much the turn says
        return [(Leg(window=a, scale=sc, power=p), (0.9, 0.85), 0)
                for a in (0.5, 0.75, 1.0) for sc in (10, 20, 30, 40, 60)
                for p in (1.0, 2.0)]
    if name == "pick2":  # (2) the better of own and mixed; own and mixed as two legs
        return [(Leg(window=a, pick=pk), (0.9, 0.85, 0.8), 0)
                for a in (0.5, 0.75, 1.0) for pk in ("max", "legs")]
    if name == "speaker":  # (3) the same speaker only, the other only, the turn before
        return [(Leg(window=a, speaker=sp), (0.9, 0.85), 0)
                for a in (0.5, 0.75, 1.0) for sp in ("same", "other")] + [
                (Leg(window=a, side="prev", speaker="other" if o else "any"), (0.9, 0.85), 0)
                for a in (0.5, 0.75, 1.0) for o in (False, True)]
    if name == "bm25":  # (4) the words smoothed with the neighbours' or the session's
        return [(Leg(window=win, lam=lam, lam_of=of), (0.9,), 0)
                for win in (0.0, 0.5) for of in ("nb", "session")
                for lam in (0.05, 0.1, 0.2, 0.3)]
    if name.startswith("joint"):  # (5) the fusion's constants swept with the leg
        legs = [Leg(), Leg(window=0.5), Leg(window=0.5, pick="max"),
                Leg(window=0.75, pick="max"), Leg(window=1.0, pick="max")]
        if name == "joint-len":
            legs = [Leg(window=a, scale=sc, pick=pk) for a in (0.5, 0.75, 1.0)
                    for sc in (20, 40) for pk in ("sum", "max")]
        if name == "joint-fine":
            return [(replace(leg, weak=(ww, wt)), (0.95, 0.92, 0.9, 0.88), 0)
                    for leg in [Leg(window=a, pick=pk) for a in (0.5, 0.75, 1.0)
                                for pk in ("sum", "max")]
                    for ww in (0.8, 0.85, 0.9) for wt in (0.55, 0.6, 0.62, 0.65, 0.68)]
        return [(replace(leg, weak=(ww, wt)), (0.9, 0.85), 0) for leg in legs
                for ww in (0.8, 0.85, 0.9, 1.0) for wt in (0.6, 0.65, 0.7, 0.75)]
    if name == "agent":  # an agent's reply: not mixed, not borrowed from, neither
        return [(replace(leg, agent=ag), (0.9, 0.85), 0)
                for leg in [Leg(window=a, pick=pk) for a in (0.5, 0.75, 1.0)
                            for pk in ("sum", "max")]
                for ag in ("own", "from", "both")]
    if name == "agent-len":  # people's turns only, the weight by length, around the peak
        return [(Leg(window=a, scale=sc, agent="both"), (0.92, 0.9, 0.88), 0)
                for a in (0.4, 0.5, 0.6, 0.75, 1.0) for sc in (0, 30, 40, 60)]
    if name == "weakown":
        return [(replace(leg, weak=(ww, wt), weak_own=True), (0.95, 0.92, 0.9, 0.88), 0)
                for leg in [Leg(window=a, pick=pk) for a in (0.5, 0.75, 1.0)
                            for pk in ("sum", "max")]
                for ww in (0.8, 0.85, 0.9) for wt in (0.62, 0.65, 0.7)]
    if name == "pick":
        return [(Leg(), (0.9,), 0), (Leg(window=0.5), (0.9,), 0),
                (Leg(window=0.75), (0.9,), 0)]
    if name == "win":
        W2 = (0.95, 0.9, 0.85, 0.8, 0.7)
        return [
            (Leg(window=0.25), W2, 0), (Leg(window=0.5), W2, 0), (Leg(window=0.75), W2, 0),
            (Leg(window=1.0), W2, 0), (Leg(window=0.5, width=3), W2, 0),
            (Leg(window=1.0, width=2), W2, 0),
            (Leg(window=0.5, own=0.5), W2, 0), (Leg(window=1.0, own=1.0), W2, 0),
            (Leg(window=0.5, strip=True), W2, 0), (Leg(window=0.5, rocchio=0.5), W2, 0),
            (Leg(window=0.5, session=0.5), W2, 0),
        ]
    raise SystemExit(f"unknown grid {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
