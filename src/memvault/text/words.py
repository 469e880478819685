"""Counts in words for people: "1 record", "2 records", "1 summary", "0 summaries" (pure).

Every count a human rendering shows goes through `counted`, so no line says "1 records".
JSON keeps its numbers as they are.
"""

from __future__ import annotations


def plural(noun: str) -> str:
    """The plural of an English noun: "record" → "records", "summary" → "summaries",
    "match" → "matches"."""
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u", ""):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def counted(n: int, noun: str, many: str | None = None, *, grouped: bool = False) -> str:
    """`n` and its noun, singular for exactly one: counted(1, "record") is "1 record",
    counted(2, "record") "2 records"; `many` spells a plural the rule gets wrong;
    `grouped` writes thousands apart ("12,000 records": a progress note, not a line a
    script reads). The noun may start a phrase: counted(3, "message") + " stored"."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {noun if n == 1 else many or plural(noun)}"
