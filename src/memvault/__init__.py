"""memvault: an encrypted, searchable, user-owned memory vault for AI assistants (`mem`)."""

__version__ = "0.2.0"
