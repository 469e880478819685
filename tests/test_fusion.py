"""The fusion of the ranking by words with the ranking by meaning, the score's scale, the
relevance floor and stored memories before transcript turns (index/fusion.py)."""

from __future__ import annotations

import pytest

from memvault.index.fusion import (
    LEXICAL_WEIGHT,
    MEANING_FLOOR,
    MEANING_LIFT,
    TYPED_BOOST,
    WEAK_WEIGHT,
    WEAK_WORDS,
    WORDS_FLOOR,
    asked,
    fuse,
    meaning_floor,
    normalised,
)

IDEAL = 10.0  # the query's: a record holding each word once scores this by words


def test_words_lead_and_meaning_breaks_near_ties() -> None:
    # b and c score alike by words; c means more: it goes first of the two, a stays first.
    lexical = [("a", 10.0), ("b", 5.0), ("c", 5.0)]
    semantic = [("c", 0.9), ("a", 0.2), ("b", 0.1)]
    ranked = [f.memory_id for f in fuse(lexical, semantic, ideal=IDEAL)]
    assert ranked == ["a", "c", "b"]


def test_a_record_found_only_by_meaning_joins_with_each_leg_reported() -> None:
    ranked = fuse([("a", 4.0), ("b", 2.0)], [("z", 0.8), ("a", 0.5)], ideal=5.0)
    fused = {f.memory_id: f for f in ranked}
    z, a, b = fused["z"], fused["a"], fused["b"]
    assert (z.lexical_rank, z.lexical_score, z.semantic_rank, z.semantic_score) == \
        (None, None, 1, 0.8)
    assert (a.lexical_rank, a.semantic_rank) == (1, 2)
    assert (b.lexical_rank, b.semantic_rank, b.semantic_score) == (2, None, None)
    # z shares no word: 0.1 of the best meaning does not beat b's share of the words.
    assert [f.memory_id for f in ranked] == ["a", "b", "z"]
    assert all(f.matches for f in ranked)  # z by its meaning, a and b by their words


def test_the_order_is_the_measured_fusion_whatever_the_scale() -> None:
    """The score shown is the fusion's order on an absolute scale: the same order as
    LEXICAL_WEIGHT × min-max(words) + the rest × min-max(meaning), or WEAK_WEIGHT × words
    when no candidate holds much of the question (its words under WEAK_WORDS)."""
    lexical = [("a", 9.0), ("b", 6.0), ("c", 5.5), ("d", 1.0)]
    semantic = [("d", 0.8), ("c", 0.6), ("b", 0.55), ("e", 0.52)]
    words = normalised({"a": 9.0, "b": 6.0, "c": 5.5, "d": 1.0, "e": 0.0})
    near = normalised({"a": 0.52, "b": 0.55, "c": 0.6, "d": 0.8, "e": 0.52})

    def fused(weight: float) -> list[str]:
        return sorted(words, key=lambda m: -(weight * words[m] + (1 - weight) * near[m]))

    assert fused(LEXICAL_WEIGHT) != fused(WEAK_WEIGHT)  # the case tells them apart
    for ideal in (1.0, 9.0 / WEAK_WORDS * 0.99):
        assert [f.memory_id for f in fuse(lexical, semantic, ideal=ideal,
                                          floor=False)] == fused(LEXICAL_WEIGHT), ideal
    for ideal in (9.0 / WEAK_WORDS * 1.01, 40.0):
        assert [f.memory_id for f in fuse(lexical, semantic, ideal=ideal,
                                          floor=False)] == fused(WEAK_WEIGHT), ideal


def test_a_record_without_a_vector_is_ranked_by_its_words() -> None:
    # "n" has no vector: it keeps its place by words rather than sinking to the bottom.
    ranked = fuse([("n", 9.0), ("x", 5.0), ("y", 1.0)], [("y", 0.9), ("x", 0.8)],
                  ideal=IDEAL)
    assert [f.memory_id for f in ranked][:2] == ["n", "x"]
    assert ranked[0].semantic_score is None and ranked[0].semantic_rank is None
    # Without any semantic list, words alone decide: the score is BM25 over the ideal.
    assert [(f.memory_id, f.score) for f in fuse([("n", 9.0), ("x", 5.0)], [],
                                                  ideal=IDEAL)] == [("n", 0.9), ("x", 0.5)]


def test_by_meaning_alone_the_score_is_the_cosine_above_the_floor() -> None:
    ranked = fuse([], [("p", 0.75), ("q", 0.3)], ideal=IDEAL, lexical_scores={"q": 2.0},
                  semantic_only=True)
    assert [f.memory_id for f in ranked] == ["p", "q"]
    assert ranked[0].score == pytest.approx((0.75 - MEANING_FLOOR) / (1 - MEANING_FLOOR))
    assert ranked[0].matches and not ranked[1].matches and ranked[1].score == 0.0
    assert ranked[1].lexical_score == 2.0 and ranked[1].lexical_rank is None


def test_a_record_matches_when_a_leg_vouches_for_it() -> None:
    """Words at WORDS_FLOOR of the ideal, or a cosine at MEANING_FLOOR; a leg that did not
    return a record does not vouch for it; the weak come after every match."""
    strong, weak = WORDS_FLOOR * IDEAL * 1.01, WORDS_FLOOR * IDEAL * 0.99
    ranked = fuse([("w", strong), ("lo", weak), ("x", weak)],
                  [("m", MEANING_FLOOR + 0.01), ("x", MEANING_FLOOR - 0.01)], ideal=IDEAL)
    assert {f.memory_id: f.matches for f in ranked} == \
        {"w": True, "m": True, "lo": False, "x": False}
    assert [f.memory_id for f in ranked][:2] == ["w", "m"]
    # Nothing held, nothing near: no match at all.
    assert not any(f.matches for f in fuse([], [("far", 0.2)], ideal=IDEAL))


def test_the_meaning_floor_is_set_in_the_model_s_scale() -> None:
    """The same share of the way from the query's baseline to 1 whatever the model: a
    model whose unrelated text sits at 0.8 floors at 0.88, and a cosine of 0.85 there is
    no match, as 0.2 is none for a model whose baseline is 0; the shown score is on one
    scale."""
    assert meaning_floor(None) == MEANING_FLOOR  # too little to sample
    low, high = meaning_floor((0.0, 0.1)), meaning_floor((0.8, 0.05))
    assert low == pytest.approx(MEANING_LIFT)
    assert high == pytest.approx(0.8 + MEANING_LIFT * 0.2)
    for floor, near, far in ((low, 0.7, 0.2), (high, 0.94, 0.85)):
        ranked = fuse([], [("near", near), ("far", far)], ideal=IDEAL, semantic_only=True,
                      meaning_floor=floor)
        assert {f.memory_id: f.matches for f in ranked} == {"near": True, "far": False}
    # Half of the way past each floor shows the same score.
    scores = [fuse([], [("m", f + (1 - f) / 2)], ideal=IDEAL, semantic_only=True,
                   meaning_floor=f)[0].score for f in (low, high)]
    assert scores == pytest.approx([0.5, 0.5])


def test_a_stored_memory_outranks_a_turn_that_matches_as_well() -> None:
    lexical = [("turn", 6.0), ("pref", 6.0), ("summary", 6.0), ("other", 5.0)]
    kinds = {"turn": "message", "pref": "preference", "summary": "summary",
             "other": "message"}
    ranked = fuse(lexical, [], ideal=IDEAL, kinds=kinds)
    assert [f.memory_id for f in ranked] == ["pref", "summary", "turn", "other"]
    assert ranked[0].score == pytest.approx(0.6 * (1 + TYPED_BOOST))
    # A turn that matches by far more words still comes first.
    assert fuse([("turn", 9.0), ("pref", 3.0)], [], ideal=IDEAL,
                kinds=kinds)[0].memory_id == "turn"


def test_normalised_scales_to_the_unit_interval() -> None:
    assert normalised({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert normalised({"a": 0.0, "b": 0.0}) == {"a": 0.0, "b": 0.0}
    assert normalised({"a": 3.0}) == {"a": 1.0}
    assert 0.5 < LEXICAL_WEIGHT < 1.0


# --- what of a question is evidence: its frame, and a topic the memory lacks ---------------

def _asked(text: str, lacking: tuple[str, ...] = ()) -> tuple[list[str], int, int]:
    """The question's searched stems (as a search takes them), its topic's and its
    holdable topic's stems, every stem held by some record but those in `lacking`."""
    from memvault.index.keyed import ROLE_WORDS, STOPWORDS, Analyzer

    analyzer = Analyzer(bytes(32))
    stems = analyzer.query_terms(text, ROLE_WORDS)
    freq = {s: 0 if s in lacking else 7 for s in stems}
    got = asked(analyzer, text, stems, STOPWORDS | ROLE_WORDS, freq)
    assert got.lacking == (got.held != got.topic)
    return stems, got.topic, got.held


def _named(stems: list[str], bits: int) -> set[str]:
    return {s for i, s in enumerate(stems) if bits >> i & 1}


@pytest.mark.parametrize("text", [
    "does the user use terraform", "what does the user prefer for embroidery",
    "How often does the user go skiing?", "what did the user say about volcanoes",
    "which football team does the user support", "when did Gina mention the shed",
    "what is the user's favourite opera", "Which editor did the user prefer?"])
def test_the_frame_of_a_question_is_no_evidence(text: str) -> None:
    """Verbs of preference, habit, opinion, allegiance and saying, the light verbs, how
    often and "favourite" are searched but are not the topic, in any inflection."""
    stems, topic, held = _asked(text)
    frame = {"use", "prefer", "often", "go", "say", "support", "mention", "favourit"}
    assert _named(stems, topic) and not _named(stems, topic) & frame
    assert held == topic  # every topic word is held somewhere


@pytest.mark.parametrize("text", ["what does the user like", "does the user use go",
                                  "prefer"])
def test_a_question_of_nothing_but_its_frame_counts_it(text: str) -> None:
    stems, topic, held = _asked(text)
    assert held == topic == (1 << len(stems)) - 1


@pytest.mark.parametrize(("text", "lacking", "left"), [
    ("what is the user's blood type", ("blood",), set()),
    ("what is the user's favourite pizza topping", ("pizza",), set()),
    ("which haskell build tool does the user prefer", ("haskel",), set()),
    ("Which Haskell build-tool does the user prefer?", ("haskel",), set()),
    ("which football team does the user support", ("footbal",), set()),
    ("does the user use terraform", ("terraform",), set()),
    # a stopword, a frame word or punctuation ends a run; so does a verb in its -ed form
    ("which blood type, and which team?", ("blood",), {"team"}),
    ("which city have Jean and John visited", ("john", "citi"), {"jean", "visit"}),
    ("does the user keep a sailboat log", ("sailboat",), {"keep"}),
    ('what about "blood bank" and type', ("blood",), {"type"}),
])
def test_a_run_of_topic_words_the_memory_lacks_is_no_evidence(
        text: str, lacking: tuple[str, ...], left: set[str]) -> None:
    """A topic word no record holds makes the words next to it one term the memory
    lacks: "type" of "blood type" does not answer it."""
    stems, topic, held = _asked(text, lacking)
    assert set(lacking) <= _named(stems, topic)
    assert _named(stems, held) == left


def test_a_record_holding_only_the_frame_or_a_lacking_run_does_not_match() -> None:
    """terraform: no record holds it. "use" alone (the frame) is no match, however
    strongly held; the words still rank what --all lists; meaning alone still matches."""
    from memvault.index.fusion import Asked

    question = Asked(topic=0b10, held=0b10)  # stems: use, terraform
    lexical = [("uses", 9.0), ("both", 8.0)]
    held = {"uses": 0b01, "both": 0b11}
    ranked = fuse(lexical, [("near", 0.9)], ideal=IDEAL, question=question, held=held)
    got = {f.memory_id: f.matches for f in ranked}
    assert got == {"both": True, "near": True, "uses": False}
    assert [f.memory_id for f in ranked][-1] == "uses"
    lacking = Asked(topic=0b10, held=0)  # nothing of the topic can be held
    assert not any(f.matches for f in fuse(lexical, [], ideal=IDEAL, question=lacking,
                                           held=held))
    # Without a question (no frame word, nothing lacking), the floor alone decides; and
    # `--mode words` lists every candidate.
    assert all(f.matches for f in fuse(lexical, [], ideal=IDEAL))
    assert all(f.matches for f in fuse(lexical, [], ideal=IDEAL, question=lacking,
                                       held=held, floor=False))


@pytest.mark.parametrize(("question", "held"), [
    (0b10, 0b01),  # "does the user use terraform": it holds only the frame, "use"
    (0b00, 0b10),  # "what is the user's blood type": only "type", of the run lacking blood
])
def test_meaning_vouches_for_what_the_words_refuse_at_its_own_floor(
        question: int, held: int) -> None:
    """A record the words' rule refuses still matches when its cosine reaches the
    meaning's floor, the one `--mode semantic` uses (the query's baseline lifted by
    MEANING_LIFT): the meaning tells a paraphrase ("which browser does the user use" →
    "Uses Firefox") from a question the memory cannot answer. Under the floor it stays
    weak: no lower bar for such records (bench/RANKING.md, "What a match is, at last")."""
    from memvault.index.fusion import Asked

    asks = Asked(topic=0b10, held=question)  # stems: use, terraform (or type, blood)
    floor = meaning_floor((0.05, 0.1))
    lexical = [("refused", 9.0), ("other", 1.0)]
    for cosine, matches in ((floor, True), (floor + 0.2, True), (floor - 0.01, False)):
        ranked = fuse(lexical, [("refused", cosine), ("other", 0.0)], ideal=IDEAL,
                      meaning_floor=floor, question=asks,
                      held={"refused": held, "other": 0})
        got = {f.memory_id: f.matches for f in ranked}
        assert got == {"refused": matches, "other": False}, cosine
    # By words alone nothing vouches: refused, however strongly held.
    ranked = fuse(lexical, [], ideal=IDEAL, question=asks, held={"refused": held})
    assert not any(f.matches for f in ranked)
