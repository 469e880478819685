"""What every embeddings provider promises: texts in, unit vectors out, under a model
identity that is recorded with the vectors, so that vectors of two models are never
compared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from memvault.errors import EX_CONFIG, EX_DATAERR, EX_TEMPFAIL, ConfigError, DataError, MemError

if TYPE_CHECKING:  # numpy is imported only where vectors are made or compared
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

# A text is embedded from its first characters only: memory stays bounded whatever a
# record holds, and a static model's average changes little past this many.
MAX_CHARS = 8000


@dataclass(frozen=True)
class ModelId:
    """Which model made a vector: the provider, its model name and the dimensions."""

    provider: str  # "builtin" or "openai" (any OpenAI-compatible endpoint)
    model: str
    dims: int

    def key(self) -> str:
        return f"{self.provider}:{self.model}:{self.dims}"

    def to_dict(self) -> dict[str, object]:
        return {"provider": self.provider, "model": self.model, "dims": self.dims}

    @classmethod
    def parse(cls, key: str) -> ModelId:
        provider, _, rest = key.partition(":")
        model, _, dims = rest.rpartition(":")
        return cls(provider, model, int(dims))


class Embedder(Protocol):
    @property
    def model(self) -> ModelId:
        """What the vectors are made by. An endpoint whose dimensions are not configured
        learns them from its first answer (asking for one when nothing was embedded yet):
        embed first where a request is to be spared."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, float32, each of unit length (all zeros for a text with
        nothing to embed). Raises an `EmbeddingsError` and returns nothing partial."""
        ...


class EmbeddingsError(MemError):
    """Any failure of an embeddings provider; as itself, a passing one (the endpoint is
    overloaded, failing, slow or not reachable: exit 75, try again later). A caller that
    can do without vectors (search) catches this one class."""

    exit_code = EX_TEMPFAIL


class EmbeddingsUnavailable(EmbeddingsError, ConfigError):
    """The configured provider cannot be used at all (not installed, no key, a key
    refused, a wrong url or model): the configuration must change."""

    exit_code = EX_CONFIG


class EmbeddingsDataError(EmbeddingsError, DataError):
    """A provider answered something that is not the embeddings asked for (wrong
    dimensions, a count or index that does not match, malformed JSON), or the built-in
    model's files are damaged."""

    exit_code = EX_DATAERR
