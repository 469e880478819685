"""Terminal control characters: removed on the way in, made visible on the way out.

Text reaches the vault from people and from tools (`mem add`, transcripts holding a
command's coloured output, imports). Printed back raw, an escape sequence in it would
act on the user's terminal: retitle it (OSC 0), clear it (CSI 2J), write the clipboard
(OSC 52), hide a line behind a carriage return. Two functions, one per direction:

- `clean(text)`, on the way in (the admission policy, before redaction): removes whole
  escape sequences (what a terminal would act on and not print) and every other control
  character, so that stored text holds no control character but newline and tab.
- `for_terminal(text)`, on the way out (every stored string the CLI prints for people,
  and the Markdown export): shows any control character left (records stored before
  `clean` existed, imports of old exports, anything that slipped through) as visible
  text such as `\\x1b`. The last line of defence; it never removes anything.

The sequences `clean` removes, in their 7-bit (ESC-introduced) and 8-bit (C1,
U+0080-U+009F) forms, as ECMA-48 and the terminals' parsers define them
(https://vt100.net/emu/dec_ansi_parser):

- CSI `ESC [` (or U+009B): parameter and intermediate bytes (0x20-0x3F), then a final
  byte (0x40-0x7E). A CSI cut short (by the end of the text or a character that cannot
  belong to it) ends there; what follows stays.
- OSC `ESC ]`, DCS `ESC P`, SOS `ESC X`, PM `ESC ^`, APC `ESC _` (or U+009D, U+0090,
  U+0098, U+009E, U+009F): a string up to its terminator, BEL or ST (`ESC \\` or U+009C),
  removed with it. CAN or SUB cancels the string (and goes too); an ESC that does not
  start ST ends it and begins a new sequence. A string never terminated runs to the end
  of the text: a terminal would swallow all of it, and what it swallows (a clipboard
  payload, a window title) is not text the user ever saw.
- any other escape: ESC, intermediates (0x20-0x2F), a final byte (0x30-0x7E), e.g.
  `ESC c` (reset), `ESC ( B` (character set), `ESC 7` (save cursor); an ESC followed by
  anything else goes alone.

Other control characters: tab and newline stay; CR LF becomes a newline and so does a
lone CR (old Mac text, progress bars: a CR that rewinds the line could hide what came
before it, a newline shows both); VT, FF and NEL (U+0085) become newlines as well (they
separate lines; dropping them would glue words together); every other C0 character,
DEL and every other C1 character is removed.

Time is linear in the input whatever it holds: three regex substitutions, each one
left-to-right pass whose patterns cannot backtrack (single character classes under
possessive quantifiers, alternatives told apart by their first characters); text without
a control character is returned as it is. After the first pass no ESC or C1 introducer
is left, so no later pass can form a sequence: `clean` is idempotent, and the identity on
text that holds no control character other than newline and tab. Only the stdlib is
used: the CLI's error line relies on `for_terminal` when nothing else works.
"""

from __future__ import annotations

import re

# Every character `clean` acts on: C0 but tab and newline, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Whole escape sequences, in the order that tells them apart (CSI and the strings before
# the two-character escapes that would take their introducers).
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x20-\x3f]*+[\x40-\x7e]?+"  # CSI
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"  # OSC, DCS, SOS, PM, APC ...
    r"[^\x07\x18\x1a\x1b\x9c]*+(?:[\x07\x18\x1a\x9c]|\x1b\\)?+"  # ... to BEL, ST, CAN/SUB
    r"|\x1b[\x20-\x2f]*+[\x30-\x7e]?+"  # any other escape, or ESC alone
)
_LINE_END = re.compile(r"\r\n?+|[\x0b\x0c\x85]")


def clean(text: str) -> str:
    """`text` without terminal escape sequences or control characters (but newline and
    tab), line ends as newlines. Linear time, idempotent."""
    if _CONTROL.search(text) is None:
        return text
    text = _SEQUENCE.sub("", text)
    text = _LINE_END.sub("\n", text)
    return _CONTROL.sub("", text)


# What `for_terminal` shows: every control character but tab and newline, as `\\xNN`.
_VISIBLE = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x09), *range(0x0b, 0x20),
                                        *range(0x7f, 0xa0)]}


def for_terminal(text: str) -> str:
    """`text` safe to print on a terminal: CR LF becomes a newline, and every other
    control character but newline and tab is shown as the visible text `\\xNN` (ESC as
    `\\x1b`, C1 CSI as `\\x9b`), so that nothing in it acts on the terminal."""
    if _CONTROL.search(text) is None:
        return text
    return text.replace("\r\n", "\n").translate(_VISIBLE)


# DEL and the C1 controls, which json.dumps(ensure_ascii=False) leaves raw.
_JSON_RAW = {c: f"\\u{c:04x}" for c in range(0x7f, 0xa0)}
_JSON_RAW_CHAR = re.compile(r"[\x7f-\x9f]")


def json_for_terminal(document: str) -> str:
    """A JSON document from json.dumps(ensure_ascii=False) with DEL and the C1 controls
    escaped as \\u00XX too (json escapes C0 only): the same JSON value, harmless to print.
    These characters can only stand inside JSON strings, where the escape means them."""
    if _JSON_RAW_CHAR.search(document) is None:
        return document
    return document.translate(_JSON_RAW)


def has_control(text: str) -> bool:
    """Whether `text` holds a control character (C0 but tab and newline, DEL, C1)."""
    return _CONTROL.search(text) is not None
