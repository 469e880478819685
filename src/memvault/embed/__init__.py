"""Embeddings: texts in, unit vectors out, from a built-in offline model or an endpoint.

Only this package talks to an embeddings model. It knows nothing of the vault: the vector
store (index/vectors.py) seals what it returns, and ops/ decides what to embed and when.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memvault.config import EmbeddingsConfig
    from memvault.embed.base import Embedder


def open_embedder(cfg: EmbeddingsConfig) -> Embedder | None:
    """The configured provider, or None when it is "none" (search by words only). Cheap:
    the built-in model's files are read and an endpoint's key fetched on first use."""
    if cfg.provider == "none":
        return None
    if cfg.provider == "openai":
        from memvault.embed.http import OpenAIEmbedder

        return OpenAIEmbedder(cfg)
    from memvault.embed import builtin

    return builtin.Lazy()
