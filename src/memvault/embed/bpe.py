"""The built-in model's tokenizer for a few short texts, in pure Python.

The tokenizers library takes about 110 ms to load the model's 32,000-token vocabulary and
61,249 merges; a search embeds one short query, and that load alone would make a cold
semantic search 1.5× slower than a lexical one. This reads the same tokenizer file and
applies the same byte-pair merges in the same order (lowest rank first, leftmost first),
so it yields the same ids as the library (tests/test_embed_bpe.py holds it to that over
real transcripts). Long batches still go through the library, which is faster per text.

Only the configuration the built-in model uses is supported: a BPE model with byte
fallback, whose normaliser prepends "▁" and replaces spaces by "▁", no pre-tokeniser.
A text that holds one of the added tokens ("<s>", ...) is left to the library, which
splits those out first.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

SPACE = "\u2581"  # ▁, SentencePiece's visible space


class Unsupported(ValueError):
    """The tokenizer file is not of the shape this encoder reproduces."""


class ByteLevelFallbackBPE:
    def __init__(self, vocab: dict[str, int], merges: list[str],
                 added: tuple[str, ...]) -> None:
        self.vocab = vocab
        self.added = added
        # A merge "a b" makes the token a+b; its rank is its place in the file. Kept as
        # the file's own strings: building this dict is C-speed, and start-up is the point.
        self.ranks = dict(zip(merges, range(len(merges)), strict=True))
        self.unk = "<unk>" if "<unk>" in vocab else None

    @classmethod
    def from_file(cls, path: Path) -> ByteLevelFallbackBPE:
        import orjson

        doc: dict[str, Any] = orjson.loads(path.read_bytes())
        model = doc.get("model") or {}
        normalizer = doc.get("normalizer") or {}
        steps = normalizer.get("normalizers") if normalizer.get("type") == "Sequence" else None
        expected = [{"type": "Prepend", "prepend": SPACE},
                    {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]
        merges = model.get("merges")
        if (model.get("type") != "BPE" or not model.get("byte_fallback")
                or model.get("dropout") or model.get("continuing_subword_prefix")
                or model.get("end_of_word_suffix") or doc.get("pre_tokenizer") is not None
                or steps != expected or not isinstance(merges, list)
                or not all(isinstance(m, str) for m in merges[:1])):
            raise Unsupported("not the tokenizer shape this encoder reproduces")
        added = tuple(t["content"] for t in doc.get("added_tokens") or [])
        return cls(model["vocab"], merges, added)

    def handles(self, text: str) -> bool:
        return not any(token in text for token in self.added)

    def encode(self, text: str) -> list[int]:
        """The ids the library gives `text` (add_special_tokens=False)."""
        if not text:
            return []
        vocab = self.vocab
        symbols: list[str] = []
        for char in SPACE + text.replace(" ", SPACE):
            if char in vocab:
                symbols.append(char)
                continue
            fallback = [f"<0x{b:02X}>" for b in char.encode("utf-8")]
            if all(f in vocab for f in fallback):
                symbols.extend(fallback)  # byte tokens: no merge applies to them
            elif self.unk is not None and (not symbols or symbols[-1] != self.unk):
                symbols.append(self.unk)  # fuse_unk: a run of unknowns is one <unk>
        return [vocab[s] for s in self._merge(symbols)]

    def _merge(self, symbols: list[str]) -> list[str]:
        """Merge the lowest-ranked adjacent pair first, the leftmost of equal rank first,
        until none applies: the order the library's BPE follows."""
        n = len(symbols)
        nxt = list(range(1, n + 1))
        prev = list(range(-1, n - 1))
        alive = [True] * n
        ranks = self.ranks
        heap: list[tuple[int, int, str]] = []
        for i in range(n - 1):
            pair = f"{symbols[i]} {symbols[i + 1]}"
            rank = ranks.get(pair)
            if rank is not None:
                heap.append((rank, i, pair))
        heapq.heapify(heap)
        while heap:
            rank, pos, pair = heapq.heappop(heap)
            right = nxt[pos]
            if not alive[pos] or right >= n or f"{symbols[pos]} {symbols[right]}" != pair:
                continue  # a stale entry: one side was merged since it was queued
            joined = symbols[pos] + symbols[right]
            symbols[pos] = joined
            alive[right] = False
            nxt[pos] = nxt[right]
            if nxt[pos] < n:
                prev[nxt[pos]] = pos
            for a, b in ((prev[pos], pos), (pos, nxt[pos])):
                if 0 <= a and b < n:
                    candidate = f"{symbols[a]} {symbols[b]}"
                    found = ranks.get(candidate)
                    if found is not None:
                        heapq.heappush(heap, (found, a, candidate))
        return [symbols[i] for i in range(n) if alive[i]]
