"""Ranking and relevance: the words' ranking (BM25) and the meaning's (cosine) fused, shown
on one scale, a floor under which a record is no match, and stored memories before
transcript turns: pure functions. Measured on both dev sets together (bench/RANKING.md,
"Recall by meaning" for the fusion, "What a match is" for the rest).

The order is the fusion measured before: both legs' top CANDIDATES, each leg's scores
min-max normalised over the candidates, LEXICAL_WEIGHT × words + the rest × meaning
(WEAK_WEIGHT × words when no candidate holds much of the question). A lexical candidate
the semantic leg did not return counts its lowest cosine.

The score shown is that order on an absolute scale: the words' relevance, BM25 ÷ the
query's ideal (index/keyed.py `ideal`: the score of a record holding each searched word
once, at an average length), which is about the share of the question's words a record
holds, weighted by rarity (a word the memory does not hold weighs most); plus, with
vectors, the meaning's min-max share × (1 - weight) / weight × the candidates' spread of
words' relevance (so the order is exactly the fusion's). By meaning alone, how far the cosine
is above the meaning's floor on the rest of the way to 1. A stored memory (a preference,
instruction, correction, fact: anything but a transcript turn or a summary) counts
1 + TYPED_BOOST times, a session's summary 1 + SUMMARY_BOOST. Shown capped at 1.

A record matches when its words' relevance reaches WORDS_FLOOR or its cosine the meaning's
floor (a leg that did not return it does not vouch for it); the others are weak: left out
unless asked for, and after every match. The meaning's floor is set in the model's own
scale (`meaning_floor`): MEANING_LIFT of the way from the query's baseline (its mean
cosine with the memory's text, index/vectors.py `baseline`) to 1, so that a model whose
cosines all sit high (many hosted models put unrelated text at 0.7) is floored where the
built-in model is, relative to what is unrelated for it.

What of a question is evidence (`asked`, bench/RANKING.md "What a match is, at last"): the
words that frame a question about a person (FRAME_WORDS: "what does … prefer", "how often
does … go") are searched and rank, but a record holding only them (and role words) does
not match by words; and a topic word no record holds makes the run of topic words it
stands in one term the memory lacks ("blood type", "haskell build tool"): a record that
holds only words of such runs does not match by words (by meaning it still may).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memvault.index.keyed import Analyzer

LEXICAL_WEIGHT = 0.9
# When no candidate holds much of the question (the best words' relevance under
# WEAK_WORDS), meaning weighs more: the words' share is WEAK_WEIGHT. Measured on both
# dev sets (bench/RANKING.md, "Meaning where the words are weak"): it finds the
# LongMemEval answers that share no word with their question (session hit@10 96.7 →
# 100) and loses no LoCoMo category; 0.8 to 0.9 alike, 1.0 costs multi-hop 0.4; a share
# of 0.75 finds neither, 0.65 costs open-domain 2.3.
WEAK_WORDS = 0.85
WEAK_WEIGHT = 0.7
CANDIDATES = 50  # each leg's top this many are fused
# Calibrated on both dev sets (bench/RANKING.md): the highest floors that cost no R@10 in
# any LoCoMo category or LongMemEval type. MEANING_FLOOR is the built-in model's (its
# best cosine for a question asked of another set's memory: 95 % under 0.44, 99 % under
# 0.53); another model's cosines lie elsewhere: measure with bench/relevance_study.py.
WORDS_FLOOR = 0.15
MEANING_FLOOR = 0.44
# The meaning's floor in any model's scale: this share of the way from the query's
# baseline to 1, the 95th percentile of the unrelated pairs' best (bench/RANKING.md,
# "The meaning's floor, whatever the model"): 0.44 for the built-in model's typical
# baseline. A memory too small to sample (index/vectors.py SAMPLE_MIN) keeps MEANING_FLOOR.
MEANING_LIFT = 0.42
# What a record's type adds to its score (× 1 + this): a memory stored deliberately (a
# preference, instruction, correction, fact) outranks a transcript turn that matches as
# well; a session's summary outranks the turns it summarises, not what was stated.
# Chosen on the probe set of tests/test_search_probes.py (the dev sets hold no such
# records, so neither value moves them): bench/RANKING.md.
TYPED_BOOST = 1.0
SUMMARY_BOOST = 0.2
# Words that frame a question about a person rather than name its topic: the verbs of
# preference, habit, opinion and allegiance, of saying, the light verbs, how often and
# "favourite" (the templates of the dev sets' and the probe set's questions: "what does
# … prefer", "how often does … go", "when did … mention", "which team does … support",
# "what is …'s favourite"). Searched, so they rank, but no evidence of a match (the
# module's rule); where a question holds nothing else, they are.
FRAME_WORDS = frozenset("""
prefer prefers preferred preferring like likes liked love loves loved enjoy enjoys enjoyed
want wants wanted wish use uses used using think thinks thought feel feels felt say says
said go goes going went gone make makes made making get gets got getting take takes took
favourite favourites favorite favorites often usually typically generally normally tend
tends mention mentions mentioned mentioning tell tells told telling talk talks talked
talking discuss discusses discussed discussing support supports supported supporting
favour favours favoured favor favors favored
""".split())


@dataclass(frozen=True)
class Fused:
    memory_id: str
    score: float  # the ranking score (relevance, × the typed boost); shown capped at 1
    lexical_rank: int | None  # 1-based place in the lexical leg's list; None: not in it
    semantic_rank: int | None
    lexical_score: float | None  # BM25 (with the time boost); None: the leg did not return it
    semantic_score: float | None  # cosine; None: no vector, or the leg did not return it
    matches: bool = True  # clears a leg's floor (else weak)


@dataclass(frozen=True)
class Asked:
    """What of a question's searched stems is evidence of a match, as bits of the stems
    in the order searched (bit i: stems[i])."""
    topic: int  # the stems that name the question's topic (all, when it holds nothing else)
    held: int  # of those, the ones a record's holding counts: not in a run with a lacking one

    @property
    def lacking(self) -> bool:
        """Whether a topic word is one no record holds."""
        return self.held != self.topic


def asked(analyzer: Analyzer, text: str, stems: Sequence[str], skip: Collection[str],
          doc_freq: Mapping[str, int]) -> Asked:
    """The question's topic (its words but the stopwords and role words in `skip` and
    FRAME_WORDS) and the part of it a record can hold: a topic word no record holds
    (`doc_freq` 0) makes the run of topic words it stands in (words next to each other,
    no stopword, frame word or punctuation between) one term the memory lacks, so its
    neighbours there ("type" of "blood type") are no evidence. A word in its -ed form
    (a past tense or participle: its stem drops the ending) is a verb, no part of a
    compound: a run of its own ("john visited"). A quoted phrase is a run of its own."""
    from memvault.index.keyed import split_query

    bit = {s: 1 << i for i, s in enumerate(stems[:HELD_MAX])}
    phrases, _ = split_query(text)
    topic = 0
    runs: list[int] = []
    # Punctuation ends a run (a quote too, a lone one included); a phrase is its own.
    rest = re.sub(r'"[^"]*"', '"', text)
    for segment in [*re.split(r"[^\w\s'’-]", rest), *phrases]:
        run = 0
        for word in analyzer.words(segment):
            if word in skip or word in FRAME_WORDS:
                runs.append(run)
                run = 0
                continue
            tokens = analyzer.tokens(word)
            bits = sum(bit.get(stem, 0) for stem in set(tokens))
            topic |= bits
            if word.endswith("ed") and tokens != [word]:
                runs += [run, bits]
                run = 0
            else:
                run |= bits
        runs.append(run)
    topic = topic or sum(bit.values())
    lacking = sum(b for s, b in bit.items() if b & topic and doc_freq.get(s, 0) <= 0)
    held = topic
    for run in runs:
        if run & lacking:
            held &= ~run
    return Asked(topic, held & ~lacking)


HELD_MAX = 24  # stems whose holding is looked up (index/keyed.py `holding`)


def words_relevance(bm25: float, ideal: float) -> float:
    return bm25 / ideal if ideal > 0 else 0.0


def meaning_floor(baseline: tuple[float, float] | None) -> float:
    """The cosine a record's meaning must reach, given the query's baseline (the mean
    and spread of its cosine with a sample of the memory; None: too few to tell)."""
    if baseline is None:
        return MEANING_FLOOR
    mean = min(max(baseline[0], -1.0), 0.99)
    return mean + MEANING_LIFT * (1 - mean)


def meaning_relevance(cosine: float, floor: float = MEANING_FLOOR) -> float:
    return max(0.0, (cosine - floor) / (1 - floor))


def boost(kind: str) -> float:
    return 0.0 if kind == "message" else SUMMARY_BOOST if kind == "summary" else TYPED_BOOST


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
         ideal: float, lexical_scores: Mapping[str, float] | None = None,
         semantic_only: bool = False, kinds: Mapping[str, str] | None = None,
         floor: bool = True, meaning_floor: float = MEANING_FLOOR,
         question: Asked | None = None, held: Mapping[str, int] | None = None
         ) -> list[Fused]:
    """Both rankings (id, score, best first) fused into one: the matches best first, then
    the weak ones (the module's rule).

    `ideal`: the query's (index/keyed.py `ideal`). `lexical_scores` holds the BM25 score
    of semantic candidates the lexical leg did not list (0 or missing: no word in
    common). A lexical candidate the semantic leg did not list (its cosine is lower, or
    it has no vector yet) counts the semantic list's lowest cosine for its place, so
    among those words alone decide and a second pass over the store is spared; but no
    cosine for the floor. With no semantic list, words alone decide; `semantic_only`,
    meaning alone. `kinds`: each record's type (missing: a transcript turn).
    Without `floor`, every candidate matches (what `--mode words` lists); `meaning_floor`:
    the query's (`meaning_floor()`). `question` (`asked`) and `held` (each candidate's
    stems held, as bits; index/keyed.py `holding`): what of the question counts toward
    a match by words (None: every word searched)."""
    lex_rank = {m: i + 1 for i, (m, _) in enumerate(lexical)}
    sem_rank = {m: i + 1 for i, (m, _) in enumerate(semantic)}
    words: dict[str, float] = {**(lexical_scores or {}), **dict(lexical)}
    meaning = dict(semantic)
    ids = list(dict.fromkeys([m for m, _ in lexical] + [m for m, _ in semantic]))
    lowest = min(meaning.values(), default=None)
    near = normalised({m: meaning.get(m, lowest) for m in ids}) if lowest is not None \
        else {}
    relevance = {m: words_relevance(words.get(m, 0.0), ideal) for m in ids}
    spread = max(relevance.values(), default=0.0) - min(relevance.values(), default=0.0)
    best = max((relevance[m] for m, _ in lexical), default=0.0)
    weight = LEXICAL_WEIGHT if best >= WEAK_WORDS else WEAK_WEIGHT
    share = (1 - weight) / weight

    def evidence(m: str) -> bool:
        """Whether the words it holds are evidence: a topic word of the question, and
        not of a run the memory lacks."""
        return question is None or bool((held or {}).get(m, 0) & question.held)

    out = []
    for m in ids:
        if semantic_only:
            score = meaning_relevance(meaning[m], meaning_floor) if m in meaning else 0.0
            matches = m in meaning and meaning[m] >= meaning_floor
        else:
            score = relevance[m] + share * near.get(m, 0.0) * spread
            matches = (relevance[m] >= WORDS_FLOOR and evidence(m)) or (
                m in meaning and meaning[m] >= meaning_floor)
        score *= 1 + boost((kinds or {}).get(m, "message"))
        out.append(Fused(m, score, lex_rank.get(m), sem_rank.get(m),
                         words.get(m) if m in lex_rank or words.get(m) else None,
                         meaning.get(m), matches or not floor))
    # Ties (records alike by words, or with none): the meaning's order, then the
    # lexical leg's, then the id (stable output).
    big = len(ids) + 1
    out.sort(key=lambda f: (not f.matches, -f.score, -near.get(f.memory_id, 0.0),
                            f.lexical_rank or big, f.semantic_rank or big, f.memory_id))
    return out
