"""The fusion of the ranking by words with the ranking by meaning (index/fusion.py)."""

from __future__ import annotations

from memvault.index.fusion import LEXICAL_WEIGHT, fuse, normalised


def test_words_lead_and_meaning_breaks_near_ties() -> None:
    # b and c score alike by words; c means more: it goes first of the two, a stays first.
    lexical = [("a", 10.0), ("b", 5.0), ("c", 5.0)]
    semantic = [("c", 0.9), ("a", 0.2), ("b", 0.1)]
    ranked = [f.memory_id for f in fuse(lexical, semantic)]
    assert ranked == ["a", "c", "b"]


def test_a_record_found_only_by_meaning_joins_with_each_leg_reported() -> None:
    ranked = fuse([("a", 4.0), ("b", 2.0)], [("z", 0.8), ("a", 0.5)])
    fused = {f.memory_id: f for f in ranked}
    z, a, b = fused["z"], fused["a"], fused["b"]
    assert (z.lexical_rank, z.lexical_score, z.semantic_rank, z.semantic_score) == \
        (None, None, 1, 0.8)
    assert (a.lexical_rank, a.semantic_rank) == (1, 2)
    assert (b.lexical_rank, b.semantic_rank, b.semantic_score) == (2, None, None)
    # z shares no word: 0.1 of the best meaning does not beat b's share of the words.
    assert [f.memory_id for f in ranked] == ["a", "b", "z"]


def test_a_record_without_a_vector_is_ranked_by_its_words() -> None:
    # "n" has no vector: it keeps its place by words rather than sinking to the bottom.
    ranked = fuse([("n", 9.0), ("x", 5.0), ("y", 1.0)], [("y", 0.9), ("x", 0.8)])
    assert [f.memory_id for f in ranked] == ["n", "x", "y"]
    assert ranked[0].semantic_score is None and ranked[0].semantic_rank is None
    # Without any semantic list, words alone decide, scores and all.
    assert [(f.memory_id, f.score) for f in fuse([("n", 9.0), ("x", 5.0)], [])] == \
        [("n", 1.0), ("x", 0.0)]


def test_by_meaning_alone_the_score_is_the_cosine() -> None:
    ranked = fuse([], [("p", 0.7), ("q", 0.3)], lexical_scores={"q": 2.0}, weight=0.0)
    assert [(f.memory_id, f.score) for f in ranked] == [("p", 0.7), ("q", 0.3)]
    assert ranked[1].lexical_score == 2.0 and ranked[1].lexical_rank is None


def test_normalised_scales_to_the_unit_interval() -> None:
    assert normalised({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert normalised({"a": 0.0, "b": 0.0}) == {"a": 0.0, "b": 0.0}
    assert normalised({"a": 3.0}) == {"a": 1.0}
    assert 0.5 < LEXICAL_WEIGHT < 1.0
