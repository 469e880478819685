"""All AEAD and key derivations: byte formats (envelope) and the key hierarchy (keys)."""
