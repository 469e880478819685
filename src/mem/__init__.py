"""mem: an encrypted, searchable, user-owned memory vault for AI assistants."""

__version__ = "0.1.0"
