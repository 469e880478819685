"""A cold search ranks exactly as before: the nearest vectors of real questions over real
messages (the bench data), ids and cosines to the last bit, as an earlier release ranked
them (tests/fixtures/search_golden.json). Speed work on the cold path (the query's
tokeniser, what the store decrypts and how) must not move a single result.

The fixture is made by `golden_case()` run under the release it records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memvault.embed.builtin import load
from memvault.index.vectors import VectorItem, VectorStore

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench-data"
FIXTURE = Path(__file__).parent / "fixtures" / "search_golden.json"
STORED = 6000  # past the pool of the sign-code pass (4096) and the re-rank's (1024)
QUERIES = 60
K = 10


def real_texts() -> tuple[list[str], list[str]]:
    """(messages, questions): LoCoMo's turns then LongMemEval's, distinct, in file order."""
    texts: list[str] = []
    questions: list[str] = []
    for c in json.loads((BENCH / "locomo_dev.json").read_text()):
        for turns in c["conversation"].values():
            if isinstance(turns, list):
                texts += [t["text"] for t in turns if isinstance(t, dict) and t.get("text")]
        questions += [q["question"] for q in c["qa"][::20]]
    for q in json.loads((BENCH / "longmemeval_dev.json").read_text()):
        questions.append(q["question"])
        for session in q["haystack_sessions"]:
            texts += [m["content"] for m in session if m.get("content")]
    return list(dict.fromkeys(texts))[:STORED], questions[:QUERIES]


def golden_case(directory: Path) -> dict[str, list[list[Any]]]:
    """Each question's top K over the stored messages: [memory id, cosine]."""
    texts, questions = real_texts()
    model = load()
    vectors = model.embed(texts)
    store = VectorStore(directory, b"k" * 32, 1, owner="o/u")
    ids = [f"m{i:05d}" for i in range(len(texts))]
    for lo in range(0, len(texts), 2000):  # several segments
        store.add(model.model,
                  [VectorItem(ids[i], b"d" * 8, i % 13 == 0, vectors[i], f"f{i % 7}")
                   for i in range(lo, min(len(texts), lo + 2000))])
    out = {}
    for q in questions:
        vector = model.embed([q])[0]  # one short text: the cold path's tokeniser
        out[q] = [[h.memory_id, h.score] for h in store.search(vector, K)]
    return out


@pytest.mark.skipif(not BENCH.is_dir(), reason="the bench data is not beside the project")
def test_real_questions_find_what_they_found_before(tmp_path: Path) -> None:
    expected = json.loads(FIXTURE.read_text())
    got = golden_case(tmp_path / "vectors")
    assert len(got) == QUERIES and got.keys() == expected.keys()
    for q, hits in got.items():
        assert hits == expected[q], q
