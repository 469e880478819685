"""Fusing the ranking by words (BM25) with the ranking by meaning (cosine): pure functions.

The rule, measured on both dev sets together (bench/RANKING.md, "Recall by meaning"):
the candidates are both legs' top CANDIDATES; each leg's scores are min-max normalised
over the candidates, and a record's score is LEXICAL_WEIGHT × its words' + the rest ×
its meaning's. A weight of 0.9 was the only one that lost no LongMemEval question type
and no LoCoMo category with the built-in model, the same with z-scores or division by
the best, and at 20, 50 or 100 candidates (a plateau, not a tuned peak); lower weights
or reciprocal-rank fusion traded LoCoMo for LongMemEval or back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LEXICAL_WEIGHT = 0.9
CANDIDATES = 50  # each leg's top this many are fused


@dataclass(frozen=True)
class Fused:
    memory_id: str
    score: float
    lexical_rank: int | None  # 1-based place in the lexical leg's list; None: not in it
    semantic_rank: int | None
    lexical_score: float | None  # BM25 (with the time boost); None: the leg did not return it
    semantic_score: float | None  # cosine; None: no vector, or the leg did not return it


def normalised(scores: Mapping[str, float]) -> dict[str, float]:
    """Min-max to [0, 1]; all alike is 1 (a single candidate is the best one), or 0
    when all are 0 (no candidate shares a word with the query)."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    flat = 1.0 if high > 0 else 0.0
    return {k: (v - low) / span if span > 0 else flat for k, v in scores.items()}


def fuse(lexical: Sequence[tuple[str, float]], semantic: Sequence[tuple[str, float]], *,
         lexical_scores: Mapping[str, float] | None = None,
         weight: float | None = None) -> list[Fused]:
    """Both rankings (id, score, best first) fused into one, best first.

    `lexical_scores` holds the BM25 score of semantic candidates the lexical leg did not
    list (0 or missing: no word in common). A lexical candidate the semantic leg did not
    list (its cosine is lower, or it has no vector yet) counts the semantic list's lowest
    cosine: so among those, words alone decide, and finding their own cosines (a second
    pass over the store) is spared; measured, it ranks as well (bench/RANKING.md). With
    no semantic list, words alone decide. `weight`: the words' share (LEXICAL_WEIGHT by
    default; 0 ranks by meaning alone)."""
    weight = LEXICAL_WEIGHT if weight is None else weight
    lex_rank = {m: i + 1 for i, (m, _) in enumerate(lexical)}
    sem_rank = {m: i + 1 for i, (m, _) in enumerate(semantic)}
    words: dict[str, float] = {**(lexical_scores or {}), **dict(lexical)}
    meaning = dict(semantic)
    ids = list(dict.fromkeys([m for m, _ in lexical] + [m for m, _ in semantic]))
    a = normalised({m: words.get(m, 0.0) for m in ids})
    floor = min(meaning.values(), default=None)
    b = normalised({m: meaning.get(m, floor) for m in ids}) if floor is not None else {}
    out = []
    for m in ids:
        score = weight * a[m] + (1 - weight) * b.get(m, a[m])
        if weight == 0.0 and m in meaning:
            score = meaning[m]  # by meaning alone: the cosine itself
        out.append(Fused(m, score, lex_rank.get(m), sem_rank.get(m),
                         words.get(m) if m in lex_rank or words.get(m) else None,
                         meaning.get(m)))
    # Ties: the lexical leg's order, then the semantic leg's, then the id (stable output).
    big = len(ids) + 1
    out.sort(key=lambda f: (-f.score, f.lexical_rank or big, f.semantic_rank or big,
                            f.memory_id))
    return out
