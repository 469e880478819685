"""The built-in offline model: static token embeddings averaged over a text.

The weights are WordLlama's `l2_supercat_256` (a 32,000 × 256 float16 table, 16 MB) and
its tokenizer, shipped inside the `wordllama` wheel. We read both ourselves (the
safetensors layout is a length, a JSON header and raw little-endian arrays) rather than
import the package, whose import pulls in pydantic and requests. A text's vector is the
mean of its tokens' rows, normalised: no network, no GPU, about a millisecond per text.

A few short texts (a search's query) are tokenised by embed/bpe.py, which gives the same
ids and loads from tables it derives once into the user's cache folder in a few
milliseconds (the library takes 110 ms); batches go through the library.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.embed.base import MAX_CHARS, EmbeddingsDataError, EmbeddingsUnavailable, ModelId
from memvault.embed.bpe import ByteLevelFallbackBPE, Unsupported

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

PACKAGE = "wordllama"
WEIGHTS = "weights/l2_supercat_256.safetensors"
TENSOR = "embedding.weight"
TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
MODEL = ModelId("builtin", "wordllama-l2-supercat-256", 256)
HEADER_LIMIT = 1 << 20  # a safetensors header larger than this is not the file we ship
# At most this many texts of at most this many characters go through the pure-Python
# tokeniser: past that, the library's load pays for itself.
FEW_TEXTS = 8
SHORT_TEXT = 2000


def package_dir() -> Path:
    """Where the model's wheel put its files, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise EmbeddingsUnavailable(
            "the built-in embeddings model is not installed (the wordllama package)",
            hint="reinstall")
    return Path(locations[0])


def read_tensor(path: Path, name: str) -> npt.NDArray[Any]:
    """One tensor of a safetensors file, mapped read-only (nothing copied until used)."""
    import numpy as np

    dtypes = {"F16": np.float16, "F32": np.float32}
    try:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > HEADER_LIMIT:
                raise ValueError("header too large")
            header = json.loads(f.read(size))
        meta = header[name]
        dtype = np.dtype(dtypes[meta["dtype"]]).newbyteorder("<")
        rows, cols = (int(n) for n in meta["shape"])
        start, end = (int(n) for n in meta["data_offsets"])
        if end - start != rows * cols * dtype.itemsize:
            raise ValueError("offsets do not match the shape")
        table = np.memmap(path, dtype=dtype, mode="r", offset=8 + size + start,
                          shape=(rows, cols))
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        raise EmbeddingsDataError(f"the built-in embeddings model is damaged ({path.name}: {e})",
                        hint="reinstall") from e
    return table


class StaticModel:
    """Mean of static token vectors: `embed` is pure and deterministic."""

    model = MODEL

    def __init__(self, weights: Path, tokenizer: Path) -> None:
        self.table = read_tensor(weights, TENSOR)
        if self.table.shape[1] != self.model.dims:
            raise EmbeddingsDataError(f"the built-in embeddings model has {self.table.shape[1]} "
                            f"dimensions, not {self.model.dims}", hint="reinstall")
        self.tokenizer_path = tokenizer
        self._library: Any = None
        self._bpe: ByteLevelFallbackBPE | None = None

    def _damaged(self, e: Exception) -> EmbeddingsDataError:
        return EmbeddingsDataError(f"the built-in embeddings tokenizer is damaged ({e})",
                         hint="reinstall")

    def library(self) -> Any:
        """The tokenizers library's tokenizer, loaded on first use."""
        if self._library is None:
            from tokenizers import Tokenizer

            try:
                tokenizer = Tokenizer.from_file(str(self.tokenizer_path))
            except Exception as e:  # the library raises a bare Exception on a bad file
                raise self._damaged(e) from e
            tokenizer.no_padding()
            tokenizer.no_truncation()
            # No cache of what was tokenised: this model has no pre-tokenizer, so the
            # cache's key is a whole text (each short one, under 256 characters), never
            # hit twice, and it grew a first embed of a long history by one to several
            # kilobytes a record (313 MB at 300,000 short turns).
            tokenizer.model._resize_cache(0)
            self._library = tokenizer
        return self._library

    def bpe(self) -> ByteLevelFallbackBPE:
        if self._bpe is None:
            from memvault.config import cache_dir

            try:
                self._bpe = ByteLevelFallbackBPE.cached(self.tokenizer_path, cache_dir())
            except (OSError, ValueError, KeyError, TypeError, Unsupported) as e:
                raise self._damaged(e) from e
        return self._bpe

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        texts = [t[:MAX_CHARS] for t in texts]
        if len(texts) <= FEW_TEXTS and all(len(t) <= SHORT_TEXT for t in texts):
            bpe = self.bpe()
            if all(bpe.handles(t) for t in texts):
                return [bpe.encode(t) for t in texts]
        encodings = self.library().encode_batch(texts, add_special_tokens=False)
        return [enc.ids for enc in encodings]

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        out = np.zeros((len(texts), self.model.dims), dtype=np.float32)
        if not texts:
            return out
        # Blank text is a zero row, as every provider gives it (an endpoint refuses it).
        kept = [i for i, t in enumerate(texts) if t.strip()]
        vocab = self.table.shape[0]
        token_ids = self.token_ids([texts[i] for i in kept]) if kept else []
        for i, ids_list in zip(kept, token_ids, strict=True):
            ids = np.asarray(ids_list, dtype=np.int64)
            ids = ids[(ids >= 0) & (ids < vocab)]
            if ids.size:
                out[i] = self.table[ids].astype(np.float32).mean(axis=0)
        if not np.isfinite(out).all():  # a weights file damaged past its header
            raise EmbeddingsDataError("the built-in embeddings model is damaged (its weights "
                                      "hold values that are not numbers)", hint="reinstall")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


@cache
def load() -> StaticModel:
    """The built-in model, loaded once per process."""
    root = package_dir()
    return StaticModel(root / WEIGHTS, root / TOKENIZER)


class Lazy:
    """The built-in model, its files read at the first `embed` (its identity is known
    without them)."""

    model = MODEL

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return load().embed(texts)
