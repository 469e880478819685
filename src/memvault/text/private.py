"""`<private>...</private>`: what the user marked as never to be stored (pure).

A span opens at a tag and closes at its matching closing tag, counted by depth, so a
nested pair cannot end the outer span early; a span left open runs to the end of the
text (fail closed: a forgotten closing tag hides too much, never too little). Tag names
are matched in any case, with optional spaces and attributes, and in the escaped forms
transcripts record them in: HTML entities (`&lt;private&gt;`, as Gemini CLI writes,
`&#60;`, `&#x3c;`, doubly escaped `&amp;lt;`), JSON `\\u003c` (once or more escaped) and
URL `%3C`. A tag in one form and its closing tag in another still pair. A self-closing
tag (`<private/>`) hides nothing; a closing tag with nothing open is left as it is.

Each span, tags included, becomes one PLACEHOLDER.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

PLACEHOLDER = "<REDACTED:PRIVATE>"
DEFAULT_TAGS = ("private",)
TAG_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")

_LT = r"(?:<|&(?:amp;)*lt;|&(?:amp;)*#0*60;|&(?:amp;)*#x0*3c;|\\+u003c|%3c)"
_GT = r"(?:>|&(?:amp;)*gt;|&(?:amp;)*#0*62;|&(?:amp;)*#x0*3e;|\\+u003e|%3e)"
_SLASH = r"(?:/|\\+/|&(?:amp;)*#0*47;|&(?:amp;)*#x0*2f;|\\+u002f|%2f)"
# Attributes: anything up to the tag's end that cannot start or end another tag.
_ATTRS = r"(?:\s[^<>&%\\\n]{0,200}?)?"


@dataclass(frozen=True)
class Hidden:
    """The text with each private span replaced, and how many spans there were.
    `blank`: nothing but private spans (and white space) was in the text."""

    text: str
    count: int
    blank: bool


@lru_cache(maxsize=8)
def _tag_re(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(
        _LT + r"\s*(?P<close>" + _SLASH + r"\s*)?(?:" + alternatives + r")(?![\w-])"
        + _ATTRS + r"(?P<self>" + _SLASH + r")?\s*" + _GT, re.IGNORECASE)


# How far a tag may reach before and after its name: escapes (&amp;amp;lt;, \\\\u003c)
# before it, attributes after it.
_BEFORE, _AFTER = 64, 320


def _tags(text: str, names: tuple[str, ...], lower: str) -> list[re.Match[str]]:
    """The tags in `text`, in order: the tag regex runs only around each place a tag's
    name occurs in `lower` (found by str.find, at memchr speed), never over the whole
    text."""
    regex, found = _tag_re(names), {}
    for name in names:
        at = lower.find(name.lower())
        while at != -1:
            for m in regex.finditer(text, max(0, at - _BEFORE), at + len(name) + _AFTER):
                if m.start() <= at < m.end():
                    found[m.start()] = m
            at = lower.find(name.lower(), at + 1)
    return [found[k] for k in sorted(found)]


def hide(text: str, names: tuple[str, ...] = DEFAULT_TAGS, lower: str | None = None) -> Hidden:
    """`text` with every private span (see the module's docstring) replaced. `lower`:
    the text in lower case with the same offsets (redact.lowered), when the caller has it."""
    if lower is None:
        from memvault.text.redact import lowered

        lower = lowered(text)
    tags = _tags(text, names, lower)
    if not tags:
        return Hidden(text, 0, False)
    spans: list[tuple[int, int]] = []
    depth, start = 0, 0
    for m in tags:
        if m.group("self"):
            continue
        if m.group("close") is None:
            if depth == 0:
                start = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, m.end()))
    if depth > 0:
        spans.append((start, len(text)))
    if not spans:
        return Hidden(text, 0, False)
    pieces, pos = [], 0
    for s, e in spans:
        pieces += [text[pos:s], PLACEHOLDER]
        pos = e
    pieces.append(text[pos:])
    rest = "".join(text[a:b] for a, b in zip([0] + [e for _, e in spans],
                                             [s for s, _ in spans] + [len(text)], strict=True))
    return Hidden("".join(pieces), len(spans), not rest.strip())
