"""Embeddings: texts in, unit vectors out, from a built-in offline model or an endpoint.

Only this package talks to an embeddings model. It knows nothing of the vault: the vector
store (index/vectors.py) seals what it returns, and ops/ decides what to embed and when.
"""
