"""Derived indexes: the protocol (base) and the keyed-term Tantivy index (keyed)."""
