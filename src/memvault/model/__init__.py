"""The model: records, where they live, what operations return. No I/O, no keys."""
