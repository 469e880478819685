"""How many tokens a text costs an agent's model, estimated without a tokenizer (pure).

A hook answers in milliseconds and mem downloads nothing at run time, so no model's
vocabulary is loaded: the estimate counts what byte-pair encoders split on, and rounds
each part up so that it over-counts:

- a run of ASCII letters, or of ASCII digits: one token per 3 characters, rounded up
  (BPE vocabularies hold common words whole, but names, identifiers and hex split);
- every other visible ASCII character (punctuation, brackets, symbols) and every line
  break: one token each;
- a character outside ASCII: one token per UTF-8 byte beyond its first (an accented or
  Cyrillic letter 1, a CJK character 2, an emoji 3); byte-level BPE never spends more
  than one token per byte;
- spaces: nothing (a token carries the space before a word).

Calibrated by bench/bench_brief.py on real briefs and on every record of its vaults
(8,100 lines: LoCoMo conversations, Claude Code, Codex and Gemini CLI sessions, English
and Chinese, prose, code and shell output) against cl100k_base, o200k_base and Claude's
earlier tokenizer: line by line the estimate is about 1.5 times their counts at the
median and falls short on 1 or 2 lines (a shell listing, by at most 12%); a whole brief
costs 1.5 to 1.6 times their counts. The margin is meant: the tokenizers of the models
that read a brief (Claude's current ones among them) are not published for offline use,
and may spend more tokens on the same text than those three: a bound in these tokens
leaves them that room.

The estimate is additive at line breaks: the estimate of lines joined by "\\n" is the sum
of theirs plus one per break, so a brief can be bounded one line at a time.
"""

from __future__ import annotations

import re

_RUN = re.compile(r"[A-Za-z]+|[0-9]+")
_SINGLE = re.compile(r"[!-/:-@\[-`{-~\n]")  # ASCII punctuation and symbols, line breaks


def estimate(text: str) -> int:
    """The estimated tokens of `text` (see the module's notes); 0 for spaces alone."""
    runs = sum((len(run) + 2) // 3 for run in _RUN.findall(text))
    # Each non-ASCII character adds its UTF-8 length less one; a lone surrogate (from
    # undecodable input) counts as its 3 bytes.
    wide = len(text.encode("utf-8", "surrogatepass")) - len(text)
    return runs + len(_SINGLE.findall(text)) + wide
