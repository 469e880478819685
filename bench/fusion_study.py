"""How to fuse the lexical and the semantic ranking: every candidate rule measured on both
dev sets at once (LoCoMo dev, LongMemEval dev), with both halves of each.

Per question it takes the lexical ranking as `mem search` computes it (the top N with
scores, through the search operation on the vaults bench_retrieval.py and
bench_longmemeval.py ingested) and the semantic ranking (the cosine of the embedding
model's vectors of the question and of every stored turn's text, brute force), caches
both, then scores each fusion rule on the cache.

    python bench/fusion_study.py [--model builtin|minilm] [--top N] [--refresh]
"""

from __future__ import annotations

import argparse
import pickle
import re
import sqlite3
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402

Ranked = list[tuple[str, float]]


@dataclass
class Case:
    dataset: str  # "locomo" | "lme"
    kind: str  # LoCoMo category or LongMemEval question type
    half: int
    lexical: Ranked  # (message id, BM25 score), best first, top N
    cosine: dict[str, float]  # message id -> cosine, every turn of the memory
    gold: set[str]
    fts5: list[str]


def embedder(name: str) -> Callable[[list[str]], object]:
    if name == "builtin":
        from memvault.embed.builtin import load

        model = load()
        return lambda texts: model.embed(texts)
    from sentence_transformers import SentenceTransformer  # a separate bench venv

    st = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    return lambda texts: st.encode(texts, batch_size=64, normalize_embeddings=True)


def fts5(turns: list[tuple[str, str]], question: str, k: int = 10) -> list[str]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(id UNINDEXED, text, tokenize='porter')")
    db.executemany("INSERT INTO t VALUES (?, ?)", turns)
    words = re.findall(r"\w+", question)
    if not words:
        return []
    match = " OR ".join(f'"{w}"' for w in words)
    rows = db.execute("SELECT id FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?",
                      (match, k)).fetchall()
    return [r[0] for r in rows]


def collect(model: str, top: int, dataset: str) -> list[Case]:
    import os

    import numpy as np

    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    embed = embedder(model)
    cases: list[Case] = []
    # LoCoMo: the vaults bench_retrieval.py made.
    import locomo
    import longmemeval

    base = next(RESULTS.glob("locomo-*"))
    if dataset == "lme":
        base = RESULTS / f"longmemeval-{longmemeval.data_hash()}"
    os.environ.update(MEM_VAULT=str(base / "vault"), MEM_CONFIG_DIR=str(base / "config"))
    for var in ("MEM_KEY_FILE", "MEM_KEY_COMMAND", "MEM_MASTER_KEY", "MEM_ORG", "MEM_USER"):
        os.environ.pop(var, None)
    now = datetime.now(UTC)
    for conv in locomo.load() if dataset == "locomo" else ():
        vault = Vault(resolve(user=conv.sample_id))
        ids = [t.dia_id for t in conv.turns]
        vecs = np.asarray(embed([t.text for t in conv.turns]), dtype=np.float32)
        qvecs = np.asarray(embed([q.text for q in conv.questions]), dtype=np.float32)
        pairs = [(t.dia_id, t.text) for t in conv.turns]
        for i, q in enumerate(conv.questions):
            doc = search(vault, q.text, Filters(limit=top), now=now, audit=False)
            sims = vecs @ qvecs[i]
            cases.append(Case("locomo", locomo.CATEGORIES[q.category], i % 2,
                              [(r.message_id or "", r.score) for r in doc.results],
                              dict(zip(ids, sims.tolist(), strict=True)), q.evidence,
                              fts5(pairs, q.text)))
    order: dict[str, int] = {}
    from bench_longmemeval import user_of

    for q in longmemeval.load() if dataset == "lme" else ():
        n = order[q.kind] = order.get(q.kind, -1) + 1
        vault = Vault(resolve(user=user_of(q)))
        doc = search(vault, q.text, Filters(limit=top, before=q.asked_at), now=q.asked_at,
                     audit=False)
        vecs = np.asarray(embed([t.text for t in q.turns]), dtype=np.float32)
        qv = np.asarray(embed([q.text]), dtype=np.float32)[0]
        sims = vecs @ qv
        cases.append(Case("lme", q.kind, n % 2,
                          [(r.message_id or "", r.score) for r in doc.results],
                          dict(zip([t.turn_id for t in q.turns], sims.tolist(), strict=True)),
                          q.gold_turns, fts5([(t.turn_id, t.text) for t in q.turns], q.text)))
    return cases


def named_cosines(cases: list[Case], model: str) -> None:
    """LoCoMo's cosines again, each turn embedded with its speaker's name before it."""
    import locomo
    import numpy as np

    embed = embedder(model)
    it = iter(cases)
    for conv in locomo.load():
        vecs = np.asarray(embed([f"{t.speaker}: {t.text}" for t in conv.turns]),
                          dtype=np.float32)
        qvecs = np.asarray(embed([q.text for q in conv.questions]), dtype=np.float32)
        for i, _ in enumerate(conv.questions):
            c = next(it)
            c.cosine = dict(zip([t.dia_id for t in conv.turns], (vecs @ qvecs[i]).tolist(),
                                strict=True))


# Run by another interpreter that has sentence-transformers (never mem's venv): embed
# the texts of a JSON list with a model, save the unit vectors.
CHILD = r"""
import json, sys, numpy as np
from sentence_transformers import SentenceTransformer
texts_path, out_path, model = sys.argv[1:4]
st = SentenceTransformer(model, device="cpu")
texts = json.load(open(texts_path))
np.save(out_path, st.encode(texts, batch_size=64, normalize_embeddings=True,
                            convert_to_numpy=True).astype(np.float32))
"""


def other_model_cosines(cases: list[Case], python: str, model: str) -> None:
    """Every case's cosines again, from another model's vectors (made by `python`)."""
    import json
    import subprocess
    import tempfile

    import locomo
    import longmemeval
    import numpy as np

    groups: list[tuple[list[str], list[str], list[str]]] = []  # ids, turn texts, questions
    datasets = {c.dataset for c in cases}
    if "locomo" in datasets:
        groups += [([t.dia_id for t in c.turns], [t.text for t in c.turns],
                    [q.text for q in c.questions]) for c in locomo.load()]
    if "lme" in datasets:
        groups += [([t.turn_id for t in q.turns], [t.text for t in q.turns], [q.text])
                   for q in longmemeval.load()]
    texts = [t for _, turns, questions in groups for t in turns + questions]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "texts.json").write_text(json.dumps(texts))
        subprocess.run([python, "-c", CHILD, f"{tmp}/texts.json", f"{tmp}/v.npy", model],
                       check=True)
        vectors = np.load(f"{tmp}/v.npy")
    it, at = iter(cases), 0
    for ids, turns, questions in groups:
        tv = vectors[at:at + len(turns)]
        qv = vectors[at + len(turns):at + len(turns) + len(questions)]
        at += len(turns) + len(questions)
        for j in range(len(questions)):
            next(it).cosine = dict(zip(ids, (tv @ qv[j]).tolist(), strict=True))


# --- fusion rules ---------------------------------------------------------------------

Rule = Callable[[Case], list[str]]
FLOOR = False  # --floor


def semantic_top(c: Case, k: int) -> Ranked:
    return sorted(c.cosine.items(), key=lambda kv: -kv[1])[:k]


def candidates(c: Case, union: bool, n: int) -> tuple[dict[str, float], dict[str, float]]:
    """Both legs' scores over the candidates: the lexical top n, and (union) the semantic
    top n. A record past the lexical top n keeps its BM25 score (the index scores any id
    given; 0 when it shares no word), and its cosine is exact (so does the vector store)."""
    lex = dict(c.lexical)  # all collected: a candidate past n still has its score
    ids = {i for i, _ in c.lexical[:n]}
    if union:
        ids |= {i for i, _ in semantic_top(c, n)}
    cos = {i: c.cosine.get(i, 0.0) for i in ids}
    if FLOOR:  # the product's way: a cosine the semantic leg did not return is its n-th
        top = semantic_top(c, n)
        kept = {i for i, _ in top}
        cos = {i: v if i in kept else top[-1][1] for i, v in cos.items()}
    return {i: lex.get(i, 0.0) for i in ids}, cos


def norm(scores: dict[str, float], how: str) -> dict[str, float]:
    if not scores:
        return {}
    values = list(scores.values())
    if how == "minmax":
        lo, hi = min(values), max(values)
        span = hi - lo or 1.0
        return {k: (v - lo) / span for k, v in scores.items()}
    if how == "z":
        mu = statistics.fmean(values)
        sd = statistics.pstdev(values) or 1.0
        return {k: (v - mu) / sd for k, v in scores.items()}
    hi = max(values) or 1.0  # "max"
    return {k: v / hi for k, v in scores.items()}


def blend(how: str, w: float, union: bool, n: int) -> Rule:
    """w × the lexical score + (1 − w) × the semantic score, each normalised."""
    def rank(c: Case) -> list[str]:
        lex, sem = candidates(c, union, n)
        a, b = norm(lex, how), norm(sem, how)
        return sorted(a, key=lambda i: -(w * a[i] + (1 - w) * b[i]))
    return rank


def bm25_plus(beta: float, union: bool, n: int) -> Rule:
    """BM25 + beta × the best BM25 × cosine: the semantic leg in the lexical leg's units."""
    def rank(c: Case) -> list[str]:
        lex, sem = candidates(c, union, n)
        top = max(lex.values(), default=0.0) or 1.0
        return sorted(lex, key=lambda i: -(lex[i] + beta * top * sem[i]))
    return rank


def rrf(k: float, union: bool, n: int, wl: float = 1.0) -> Rule:
    def rank(c: Case) -> list[str]:
        lex, sem = candidates(c, union, n)
        lr = {i: r for r, (i, _) in enumerate(c.lexical[:n])}
        sr = {i: r for r, i in enumerate(sorted(sem, key=lambda i: -sem[i]))}
        def score(i: str) -> float:
            s = 1 / (k + sr[i] + 1)
            if i in lr:
                s += wl / (k + lr[i] + 1)
            return s
        return sorted(lex, key=lambda i: -score(i))
    return rank


def fill(keep: int, then: Rule) -> Rule:
    """The lexical top `keep` as they are, then the rest from `then`."""
    def rank(c: Case) -> list[str]:
        head = [i for i, _ in c.lexical[:keep]]
        return head + [i for i in then(c) if i not in head]
    return rank


def reserve(m: int, base: Rule, k: int = 10) -> Rule:
    """`base`'s top k − m, then the semantic leg's best m not among them, then the rest:
    a few places in the top k kept for what shares no word with the question."""
    def rank(c: Case) -> list[str]:
        head = base(c)[: k - m]
        taken = set(head)
        extra = [i for i, _ in semantic_top(c, k) if i not in taken][:m]
        return head + extra + [i for i in base(c) if i not in taken and i not in extra]
    return rank


def lexical(c: Case) -> list[str]:
    return [i for i, _ in c.lexical]


def semantic(c: Case) -> list[str]:
    return [i for i, _ in semantic_top(c, 50)]


# --- scoring ---------------------------------------------------------------------------

def recall(ranked: list[str], gold: set[str], k: int = 10) -> float:
    return 100 * len(gold & set(ranked[:k])) / len(gold)


def session_hit(ranked: list[str], gold: set[str], k: int = 10) -> float:
    sessions = {i.split(":")[0] for i in ranked[:k]}
    return 100.0 if sessions & {g.split(":")[0] for g in gold} else 0.0


def scores(rows: Iterable[tuple[str, str, int, set[str], list[str]]]) -> dict[str, float]:
    """R@10 per set, per set and category or type, and per half; LongMemEval's session
    hit@10 too. Each row: (dataset, kind, half, gold, ranked)."""
    out: dict[str, list[float]] = {}
    for dataset, kind, half, gold, ranked in rows:
        r = recall(ranked, gold)
        for key in (dataset, f"{dataset} {kind}", f"{dataset} half{'AB'[half]}"):
            out.setdefault(key, []).append(r)
        if dataset == "lme":
            out.setdefault("lme hit@10", []).append(session_hit(ranked, gold))
    return {k: statistics.fmean(v) for k, v in out.items()}


def evaluate(cases: list[Case], rule: Rule) -> dict[str, float]:
    return scores((c.dataset, c.kind, c.half, c.gold, rule(c)) for c in cases)


def rules(n: int) -> dict[str, Rule]:
    table: dict[str, Rule] = {"lexical": lexical, "semantic": semantic,
                              "fts5": lambda c: c.fts5}
    for union in (False, True):
        leg = "union" if union else "rerank"
        for how in ("minmax", "z", "max"):
            for w in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
                table[f"{how} w={w} {leg}"] = blend(how, w, union, n)
        for beta in (0.25, 0.5, 1.0, 2.0, 4.0):
            table[f"bm25+{beta}*max*cos {leg}"] = bm25_plus(beta, union, n)
        for k in (1, 5, 10, 20, 60):
            table[f"rrf k={k} {leg}"] = rrf(k, union, n)
            table[f"rrf k={k} lex×2 {leg}"] = rrf(k, union, n, 2.0)
        for keep in (3, 5):
            table[f"lex top{keep} + rrf60 {leg}"] = fill(keep, rrf(60, union, n))
            table[f"lex top{keep} + minmax0.5 {leg}"] = fill(keep, blend("minmax", 0.5,
                                                                          union, n))
        for m in (1, 2, 3):
            table[f"lex top{10 - m} + sem {m} {leg}"] = reserve(m, lexical)
            table[f"minmax0.9 top{10 - m} + sem {m} {leg}"] = reserve(
                m, blend("minmax", 0.9, union, n))
            table[f"minmax0.8 top{10 - m} + sem {m} {leg}"] = reserve(
                m, blend("minmax", 0.8, union, n))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="builtin")
    parser.add_argument("--top", type=int, default=300)
    parser.add_argument("--refresh", action="store_true")
    parser.add_argument("--named", action="store_true",
                        help="LoCoMo turns embedded as 'speaker: text'")
    parser.add_argument("--python", help="an interpreter with sentence-transformers: "
                        "the semantic leg from --st-model instead")
    parser.add_argument("--st-model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--sets", nargs="*", default=["locomo", "lme"])
    parser.add_argument("--only", help="rules whose name contains this")
    parser.add_argument("--n", type=int, nargs="*", default=[50, 100])
    parser.add_argument("--floor", action="store_true", help="a lexical candidate the "
                        "semantic leg did not return gets its n-th best cosine, not its own")
    args = parser.parse_args(argv)
    global FLOOR
    FLOOR = args.floor
    cases = []
    for dataset in args.sets:
        cache = RESULTS / f"fusion-{dataset}-{args.model}-{args.top}.pickle"
        if args.refresh or not cache.exists():
            cache.write_bytes(pickle.dumps(collect(args.model, args.top, dataset)))
        loaded = pickle.loads(cache.read_bytes())
        if args.named and dataset == "locomo":
            named_cosines(loaded, args.model)
        cases += loaded
    if args.python:
        cache = RESULTS / f"fusion-cosines-{Path(args.st_model).name}-{'-'.join(args.sets)}.pickle"
        if not cache.exists():
            other_model_cosines(cases, args.python, args.st_model)
            cache.write_bytes(pickle.dumps([c.cosine for c in cases]))
        for c, cos in zip(cases, pickle.loads(cache.read_bytes()), strict=True):
            c.cosine = cos
    base = evaluate(cases, lexical)
    kinds = sorted(k for k in base if k.count(" ") >= 1 and "half" not in k
                   and k != "lme hit@10")
    print(f"{len(cases)} questions; model {args.model}; lexical top {args.top}")
    cols = ["locomo", "lme", "lme hit@10", "locomo halfA", "locomo halfB", "lme halfA",
            "lme halfB"]
    print(f"{'rule':<34}" + "".join(f"{c[:12]:>13}" for c in cols)
          + "  worst type vs lexical (vs fts5)")
    fts = evaluate(cases, lambda c: c.fts5)
    for n in args.n:
        for name, rule in rules(n).items():
            if args.only and args.only not in name:
                continue
            if name in ("lexical", "semantic", "fts5") and n != args.n[0]:
                continue
            row = {c: 0.0 for c in cols} | evaluate(cases, rule)
            worst = min(kinds, key=lambda k: row[k] - base[k])
            worst_f = min((k for k in kinds if k.startswith("lme")),
                          key=lambda k: row[k] - fts[k], default=worst)
            label = name if name in ("lexical", "semantic", "fts5") else f"{name} N={n}"
            print(f"{label:<34}" + "".join(f"{row[c]:>13.1f}" for c in cols)
                  + f"  {worst.split(' ', 1)[1][:14]} {row[worst] - base[worst]:+.1f}"
                  + f" ({worst_f.split(' ', 1)[1][:14]} {row[worst_f] - fts[worst_f]:+.1f})")


if __name__ == "__main__":
    main(sys.argv[1:])
