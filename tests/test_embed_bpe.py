"""The pure-Python tokeniser that makes a cold search cheap gives exactly the ids the
tokenizers library gives, so a query's vector is the one the library would make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.embed import builtin
from memvault.embed.bpe import CACHE_NAME, ByteLevelFallbackBPE, SortedTable, Unsupported
from tests.conftest import examples

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench-data"


@pytest.fixture(scope="module")
def model() -> builtin.StaticModel:
    return builtin.load()


def library_ids(model: builtin.StaticModel, text: str) -> list[int]:
    return list(model.library().encode(text, add_special_tokens=False).ids)


def transcript_texts(limit: int = 400) -> list[str]:
    """Message texts from the real transcripts (every agent's), cut at several lengths."""
    texts: list[str] = []
    for path in sorted((BENCH / "transcripts").rglob("*.json*")):
        with path.open(encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f):
                if n % 7:
                    continue
                texts.extend((line[:40], line[:300], line[:1500]))
                if len(texts) >= limit:
                    return texts
    return texts


def test_real_transcript_text_tokenises_as_the_library_does(model: builtin.StaticModel) -> None:
    texts = transcript_texts()
    assert len(texts) >= 100, "the bench data's transcripts are missing"
    bpe = model.bpe()
    checked = [t for t in texts if bpe.handles(t)]
    assert len(checked) > 0.9 * len(texts)
    for text in checked:
        assert bpe.encode(text) == library_ids(model, text), text[:80]


@pytest.mark.parametrize("text", [
    "Prefers pytest with fixtures", "", " ", "  two  spaces  ", "tab\tand\nnewline",
    "émoji 🎉 ünïcode ℃ 中文字符 עברית", "\x00\x01 control", "a" * 300, "▁ already ▁▁ marked",
])
def test_edge_cases_tokenise_as_the_library_does(model: builtin.StaticModel, text: str) -> None:
    assert model.bpe().encode(text) == library_ids(model, text)


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=120))
def test_any_text_tokenises_as_the_library_does(text: str) -> None:
    model = builtin.load()
    bpe = model.bpe()
    if bpe.handles(text):
        assert bpe.encode(text) == library_ids(model, text)


def test_a_query_with_an_added_token_goes_to_the_library(model: builtin.StaticModel) -> None:
    text = "what did </s> mean"
    assert not model.bpe().handles(text)
    ids = model.token_ids([text])[0]
    assert ids == library_ids(model, text)


def test_both_paths_make_the_same_vector(model: builtin.StaticModel) -> None:
    """One short query takes the pure-Python path, a batch the library's: same vectors."""
    texts = [f"message {i} about testing with pytest fixtures" for i in range(20)]
    one = model.embed(texts[:1])
    batch = model.embed(texts)
    assert abs(one[0] - batch[0]).max() < 1e-6


def test_a_tokenizer_of_another_shape_is_refused(tmp_path: Path) -> None:
    doc = json.loads((builtin.package_dir() / builtin.TOKENIZER).read_text())
    doc["pre_tokenizer"] = {"type": "Whitespace"}
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(Unsupported):
        ByteLevelFallbackBPE.from_file(other)


def test_the_cached_tables_tokenise_as_the_library_does(model: builtin.StaticModel,
                                                        tmp_path: Path) -> None:
    """A later process reads the derived tables, not the JSON: the same ids."""
    ByteLevelFallbackBPE.cached(model.tokenizer_path, tmp_path)  # parses, writes the tables
    tables = ByteLevelFallbackBPE.cached(model.tokenizer_path, tmp_path)
    assert isinstance(tables.ranks, SortedTable) and isinstance(tables.vocab, SortedTable)
    assert tables.added == model.bpe().added and tables.unk == "<unk>"
    texts = [t for t in transcript_texts(200) if tables.handles(t)]
    texts += ["émoji 🎉 ünïcode ℃ 中文字符 עברית", "\x00\x01 control", "▁ already ▁▁ marked"]
    for text in texts:
        assert tables.encode(text) == library_ids(model, text), text[:80]


def test_the_cached_tables_follow_the_tokenizer_file_and_survive_damage(tmp_path: Path) -> None:
    source = tmp_path / "tokenizer.json"
    doc = json.loads((builtin.package_dir() / builtin.TOKENIZER).read_text())
    source.write_text(json.dumps(doc))
    cache = tmp_path / "cache"
    ByteLevelFallbackBPE.cached(source, cache)
    text = "the tests passed with pytest fixtures"
    before = ByteLevelFallbackBPE.cached(source, cache).encode(text)
    # The wheel changes (a token's id here), and the tables made from it go too.
    doc["model"]["vocab"]["\u2581the"] += 1
    source.write_text(json.dumps(doc))
    changed = ByteLevelFallbackBPE.cached(source, cache)
    assert changed.encode(text) == ByteLevelFallbackBPE.from_file(source).encode(text)
    assert changed.encode(text) != before
    # A damaged cache file is made again, never trusted.
    tables = cache / CACHE_NAME
    data = bytearray(tables.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tables.write_bytes(bytes(data))
    assert ByteLevelFallbackBPE.cached(source, cache).encode(text) == changed.encode(text)
    assert isinstance(ByteLevelFallbackBPE.cached(source, cache).ranks, SortedTable)
