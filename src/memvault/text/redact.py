"""The one place that decides what may reach disk: critical secrets refuse, personal data redacts.

Everything mem stores (`mem add`, `mem pref set`, `mem ingest`) passes through scan() first
(SPEC §7). Each rule of the one table below has a class:

- "refuse": a critical secret (private keys, Authorization headers, bearer tokens, cloud,
  VCS and LLM provider keys). The text must not be stored; the caller fails closed.
- "redact": personal data and other API keys. What the rule matches is replaced by a typed
  placeholder such as `<REDACTED:EMAIL>`.

Sources, preferred over home-made patterns (SPEC §7):
- detect-secrets (Yelp, Apache-2.0): the regex plugins, NOT the entropy or keyword plugins,
  which flag ordinary words. Importing detect_secrets costs ~110 ms (it pulls in requests),
  so scripts/generate.py copies the patterns into _detect_secrets_patterns.py and a test
  fails when that copy is stale.
- gitleaks (Zachary Rice, MIT, config/gitleaks.toml at commit 009e025a): a few rules for what
  detect-secrets misses, adapted as noted on each rule and named by their gitleaks ids.
- phonenumbers (Apache-2.0) with Leniency.STRICT_GROUPING for phone numbers.

The whole text is scanned (a PEM block spans lines) and so is its JSON-unescaped form:
transcripts hold secrets inside JSON strings ("-----BEGIN RSA PRIVATE KEY-----\\nMIIE...").
Findings in the unescaped form are mapped back onto the text as given, so placeholders land
there too. A refuse finding in either form refuses.

Speed (bench/bench_redact.py, target >= 5 MB/s): a rule names anchors, literals that every
match contains; one literal scan per rule finds them (~1.5 GB/s), the rule is skipped when
there is none and its regex only runs on windows around them. A rule without a literal has
a cheap prefilter regex instead. Only lines holding JSON escapes are decoded and scanned
again; a text that is one JSON string body as a whole is decoded by json.loads, and its
offsets map back by counting escapes (it is still scanned raw too: see _json_body).
phonenumbers is pure Python (~0.2 MB/s), so a cheap regex finds phone-like digit runs, runs
that cannot hold a valid number are dropped (dates, addresses, columns of numbers...) and
the matcher only sees small windows around the rest; the library is imported only then.

Nothing here puts matched text into an exception, a repr or a log: findings are offsets.
"""

from __future__ import annotations

import bisect
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import accumulate
from typing import Any, Literal

from memvault.errors import ConfigError
from memvault.text._detect_secrets_patterns import DETECT_SECRETS_VERSION, PATTERNS

Action = Literal["refuse", "redact"]
# A detector that is not a regex (phones): (text, default region) -> spans.
Finder = Callable[[str, str], Iterable[tuple[int, int]]]

RULE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
TYPE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")
REGION_RE = re.compile(r"^[A-Z]{2}$")
_DS = f"detect-secrets {DETECT_SECRETS_VERSION}"
_GITLEAKS = "gitleaks config/gitleaks.toml (MIT)"
# Characters a token continues with: a match that stops inside a token is widened to its end.
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
# Windows end after the next whitespace, so a lookahead at the window's end sees real text.
_WS = re.compile(r"\s")
_WINDOW_SLACK = 4096
_LONG = 8192  # a text this long goes to each rule straight, without the anchor gate


class Deferred:
    """A built-in rule's regex, compiled the first time a text needs it: a rule runs only
    on texts that hold one of its anchors, which most texts do not, and compiling the
    whole table for the one sentence of a `mem add` was a tenth of the command's time."""

    __slots__ = ("_regex", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern, self.flags = pattern, flags
        self._regex: re.Pattern[str] | None = None

    @property
    def regex(self) -> re.Pattern[str]:
        if self._regex is None:
            self._regex = re.compile(self.pattern, self.flags)
        return self._regex


@dataclass(frozen=True, repr=False)
class Rule:
    """One row of the table. `detector` is a regex (compiled, or Deferred until a text
    needs it) or, for phones, a Finder.

    anchors: literals every match contains (lower case if anchors_ignore_case: they are
    then looked for in the lower-cased text). No anchor in the text means no match, and the
    regex runs only from reach[0] characters before an anchor to reach[1] after it, and
    only where `needs` matches when it is set (the value a keyword-context pattern wants).
    prefilter: a cheap regex whose matches serve as anchors, for patterns without a
    literal (Telegram's `\\d{8,10}:` costs 50 ms on 5 MB where `:[token]{35}` costs 3).
    run: for a regex that starts at its anchor with a run of these characters (a JWT),
    only the first anchor of a run is tried, where every one would fare alike: keeps
    "eyJeyJeyJ..." linear. group: the capture group that is the secret (None: the first
    group that took part, else the whole match). extend: widen a match that ends inside a
    token to the token's end (patterns that match only a token's prefix, like Stripe's).
    accept: decides what a match is (for a detector that needs more than a regex): the
    span of the secret in it, or None when it holds none (a placeholder, a variable).
    locate: with accept, where a match may start, from an anchor's or prefilter's hit
    (the start of the key an anchor is part of; -1: nowhere): the detector is tried
    there alone, rather than at every position of a window around the hit.
    """

    id: str
    action: Action
    type: str
    detector: re.Pattern[str] | Deferred | Finder
    positives: tuple[str, ...] = ()
    negatives: tuple[str, ...] = ()
    source: str = ""
    anchors: tuple[str, ...] = ()
    anchors_ignore_case: bool = False
    reach: tuple[int, int] = (0, 0)
    needs: re.Pattern[str] | None = None
    prefilter: re.Pattern[str] | None = None
    run: re.Pattern[str] | None = None
    group: int | None = None
    extend: bool = False
    accept: Callable[[re.Match[str]], tuple[int, int] | None] | None = None
    locate: Callable[[str, int], int] | None = None

    def __repr__(self) -> str:  # no pattern, no fixtures: a user pattern may hold a secret
        return f"Rule(id={self.id!r}, action={self.action!r}, type={self.type!r})"

    @property
    def label(self) -> str:
        """The class as config.yaml spells it: "refuse" or "redact:TYPE"."""
        return "refuse" if self.action == "refuse" else f"redact:{self.type}"

    @property
    def placeholder(self) -> str:
        return f"<REDACTED:{self.type}>"

    @cached_property
    def _anchor_re(self) -> re.Pattern[str]:
        # One regex per rule: re's first-character scan beats str.find per literal.
        return re.compile(_literal_union(self.anchors))

    @cached_property
    def _anchor_res(self) -> tuple[re.Pattern[str], ...]:
        # One regex per first character: a union whose literals start differently ("AC|SK")
        # is tried at every position, ~10x slower than re's literal-prefix scan of each.
        firsts: dict[str, list[str]] = {}
        for anchor in self.anchors:
            firsts.setdefault(anchor[0], []).append(anchor)
        return tuple(re.compile(_literal_union(group)) for _, group in sorted(firsts.items()))

    def _anchor_hits(self, hay: str) -> Iterator[re.Match[str]]:
        """The anchors in `hay`, as _anchor_re.finditer reports them (leftmost first, the
        longest at a position, none overlapping the one before), on a long text faster."""
        regexes = self._anchor_res
        if len(regexes) == 1 or len(hay) < _LONG:
            yield from self._anchor_re.finditer(hay)
            return
        pending = [regex.search(hay) for regex in regexes]
        pos = 0
        while True:
            best = None
            for i, m in enumerate(pending):
                if m is not None and m.start() < pos:  # overlapped the last hit: look again
                    m = pending[i] = regexes[i].search(hay, pos)
                if m is not None and (best is None or m.start() < best.start()):
                    best = m  # no tie: the regexes' literals start with different characters
            if best is None:
                return
            yield best
            pos = best.end()

    def spans(self, text: str, region: str = "US", lower: str | None = None) -> list[
            tuple[int, int]]:
        """Where this rule matches `text`: (start, end) of each secret, in order.

        `lower` is lowered(text) when the caller has it (scan() lowers each text once)."""
        detector = self.detector
        if isinstance(detector, Deferred):
            detector = detector.regex
        if not isinstance(detector, re.Pattern):
            return sorted(detector(text, region))
        matches: Iterable[re.Match[str]]
        found: Iterable[tuple[int, int]]
        if self.accept is not None and self.locate is not None:
            if self.prefilter is not None:
                hits: Iterable[int] = (m.start() for m in self.prefilter.finditer(text))
            else:  # every anchor, overlapping or not, found by str.find (memchr speed)
                hay = text
                if self.anchors_ignore_case:
                    hay = lower if lower is not None else lowered(text)
                hits = (at for anchor in self.anchors for at in _occurrences(hay, anchor))
            starts = sorted({self.locate(text, at) for at in hits} - {-1})
            found = _accepted(detector, self.accept, text, starts)
        else:
            if self.prefilter is not None:
                matches = _in_windows(detector, self.needs, text, _windows(
                    text, self.prefilter.finditer(text), self.reach))
            elif not self.anchors:
                matches = detector.finditer(text)
            else:
                hay = text
                if self.anchors_ignore_case:
                    hay = lower if lower is not None else lowered(text)
                anchor_hits = self._anchor_hits(hay)
                if self.run is not None:
                    matches = _run_starts(detector, self.run, text, anchor_hits)
                else:
                    matches = _in_windows(detector, self.needs, text,
                                          _windows(text, anchor_hits, self.reach))
            found = (_secret_span(m, self.group) for m in matches)
        out: list[tuple[int, int]] = []
        for span in found:
            start, end = _trim(text, *span)
            if start >= end:
                continue
            if self.extend:
                tail = _TOKEN_TAIL.match(text, end)
                end = tail.end() if tail else end
            if out and start < out[-1][1]:  # overlapping windows found it twice
                out[-1] = (out[-1][0], max(end, out[-1][1]))
                continue
            out.append((start, end))
        return out


@dataclass(frozen=True)
class RedactionConfig:
    """disabled: ids of redact-class rules to skip (refuse rules cannot be disabled);
    extra: user rules (see rule_from_config); phone_region: region for numbers without +;
    private_tags: the tag names whose spans are hidden before any rule runs (the
    admission policy hides them: text/private.py)."""

    disabled: frozenset[str] = frozenset()
    extra: tuple[Rule, ...] = ()
    phone_region: str = "US"
    private_tags: tuple[str, ...] = ("private",)


@dataclass(frozen=True)
class Finding:
    """One match: offsets into the text given to scan(), never the matched text."""

    rule: str
    action: Action
    type: str
    start: int
    end: int


@dataclass
class Redaction:
    text: str  # the text with <REDACTED:TYPE> placeholders (refused secrets included)
    refused: list[str]  # ids of refuse-class rules that matched: the text must not be stored
    counts: dict[str, int]  # rule id -> number of findings (both classes)
    findings: list[Finding] = field(default_factory=list)
    blank: bool = False  # the text was nothing but spans marked private (ops/admission.py)

    @property
    def clean(self) -> bool:
        """Nothing refused: the redacted text may be stored."""
        return not self.refused


# ---------------------------------------------------------------------------------------------
# Matching helpers


def lowered(text: str) -> str:
    """Lower case with the same offsets (str.lower lengthens a few non-ASCII letters)."""
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _windows(text: str, hits: Iterable[re.Match[str]],
             reach: tuple[int, int]) -> list[tuple[int, int]]:
    """Merged windows around anchor hits; each ends after the next whitespace so that a
    lookahead at its end sees the real text rather than an artificial end of string."""
    before, after = reach
    merged: list[list[int]] = []
    for hit in hits:
        i = hit.start()
        start, end = max(0, i - before), i + after
        if merged and start <= merged[-1][1]:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    n = len(text)
    out = []
    for start, end in merged:
        if end >= n:
            out.append((start, n))
            continue
        ws = _WS.search(text, end, min(n, end + _WINDOW_SLACK))
        out.append((start, ws.end() if ws else min(n, end + _WINDOW_SLACK)))
    return out


def _literal_union(literals: Iterable[str]) -> str:
    """A regex for any of `literals`, factored as a trie ("gl(?:pat|dt)-" rather than
    "glpat-|gldt-"): re then tests each text position against one character at a time."""
    trie: dict[str, Any] = {}
    for literal in literals:
        node = trie
        for char in literal:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(c) + emit(child) for c, child in sorted(node.items()) if c]
        if "" in node:  # a literal ends here; it is a prefix of others
            return f"(?:{'|'.join(branches)})?" if branches else ""
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return emit(trie)


def _in_windows(detector: re.Pattern[str], needs: re.Pattern[str] | None, text: str,
                windows: list[tuple[int, int]]) -> Iterator[re.Match[str]]:
    for ws, we in windows:
        if needs is None or needs.search(text, ws, we):
            yield from detector.finditer(text, ws, we)


def _occurrences(hay: str, literal: str) -> Iterator[int]:
    at = hay.find(literal)
    while at != -1:
        yield at
        at = hay.find(literal, at + 1)


def _accepted(detector: re.Pattern[str],
              accept: Callable[[re.Match[str]], tuple[int, int] | None], text: str,
              starts: list[int]) -> Iterator[tuple[int, int]]:
    """The spans `accept` finds in the detector's matches at `starts` (each tried also
    one character before, for a match that opens with "<": <password>...</password>)."""
    end = 0
    for start in starts:
        if start < end:
            continue
        for at in (start, start - 1) if start and text[start - 1] == "<" else (start,):
            m = detector.match(text, at)
            span = accept(m) if m is not None else None
            if span is not None:
                end = m.end() if m is not None else end
                yield span
                break


def _run_starts(detector: re.Pattern[str], run: re.Pattern[str], text: str,
                hits: Iterable[re.Match[str]]) -> Iterator[re.Match[str]]:
    resume = 0
    for hit in hits:
        at = hit.start()
        if at < resume:
            continue
        m = detector.match(text, at)
        if m:
            resume = m.end()
            yield m
        else:
            tail = run.match(text, at)
            resume = tail.end() if tail else at + 1


def _secret_span(m: re.Match[str], group: int | None) -> tuple[int, int]:
    if group is not None:
        return m.span(group) if m.start(group) != -1 else m.span()
    for g in range(1, (m.re.groups or 0) + 1):
        if m.start(g) != -1:
            return m.span(g)
    return m.span()


_LEAD = frozenset(" \t\r\n\f\v\"'=:")
_TRAIL = frozenset(" \t\r\n\f\v\"'")


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop the delimiters some detect-secrets patterns consume around a token."""
    while start < end and text[start] in _LEAD:
        start += 1
    while end > start and text[end - 1] in _TRAIL:
        end -= 1
    return start, end


def _cycle(alphabet: str, n: int, offset: int = 0) -> str:
    """A deterministic, obviously fake token body for fixtures."""
    return "".join(alphabet[(i + offset) % len(alphabet)] for i in range(n))


_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER_ALNUM = "0123456789abcdefghijklmnopqrstuvwxyz"
_HEX = "0123456789abcdef"
_B64 = _ALNUM + "+/"


# ---------------------------------------------------------------------------------------------
# Phones and emails


# A phone-like run: digits with the usual separators, optionally + and a bracketed area code,
# not glued to a word, a dot, a slash or a sign on the left (+ only to a digit or +) nor to
# a word on the right.
_PHONE_CANDIDATE = re.compile(  # a leading character class keeps re's fast scan
    r"[+(\d](?<![\w.+/-][(\d])(?<![\d+]\+)[\d ()./-]{5,40}\d(?!\w)")
_MONTH = r"(?:0?[1-9]|1[0-2])"
_DAY = r"(?:0?[1-9]|[12]\d|3[01])"
# Never inside a phone number: the run is cut there. Dates, IPv4 addresses, decimals with
# five or more places (numeric output) and doubled separators (columns of numbers).
_PHONE_CUT = re.compile(
    r"(?<!\d)(?:19|20)\d\d([-./])" + _MONTH + r"\1" + _DAY + r"(?!\d)"
    r"|(?<!\d)" + _DAY + r"([-./])" + _MONTH + r"\2(?:19|20)\d\d(?!\d)"
    r"|(?<!\d)" + _MONTH + r"([-./])" + _DAY + r"\3(?:19|20)\d\d(?!\d)"
    r"|(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\d.])"
    r"|(?<!\d)\d+\.\d{5,}"
    r"|\s{2,}|[.-]{2,}"
)
_DIGIT_GROUPS = re.compile(r"\d+")
_PHONE_SEPARATORS = " ().-/+"
_PHONE_MARGIN = 8
# 2147483647 (INT32_MAX) is a valid Dallas number to phonenumbers and in half the code there is.
_INT_LIMITS = frozenset(str(2**n + d) for n in (31, 32) for d in (-1, 0))


@dataclass(frozen=True)
class _Region:
    """What phonenumbers says about numbers written without + in a region: their length,
    the pattern of valid national numbers, the national and international prefixes and
    the country code, to drop most digit runs without asking the matcher."""

    min_digits: int
    max_digits: int
    national_number: re.Pattern[str] | None  # None: no shortcut, ask the matcher
    national_prefix: re.Pattern[str] | None
    international_prefix: re.Pattern[str] | None
    country_code: str

    def plausible(self, groups: list[str]) -> bool:
        """Whether some whole groups in a row could be a valid number (phonenumbers with
        STRICT_GROUPING never cuts a group), written nationally, with the national prefix,
        with the country code but no +, or after the international prefix."""
        if self.national_number is None:
            return True
        if self.international_prefix and self.international_prefix.match("".join(groups)):
            return True
        valid = self.national_number.fullmatch
        for i in range(len(groups)):
            digits = ""
            for group in groups[i:]:
                digits += group
                if len(digits) > self.max_digits + 6:
                    break
                if len(digits) < self.min_digits:
                    continue
                if any(valid(form) for form in self._forms(digits)):
                    return True
        return False

    def _forms(self, digits: str) -> Iterator[str]:
        """The number as written, without its national prefix, without the country code,
        and without both (phonenumbers strips either when it parses)."""
        yield digits
        for form in (digits, digits[len(self.country_code):]
                     if digits.startswith(self.country_code) else None):
            if form is None:
                continue
            if form is not digits:
                yield form
            prefix = self.national_prefix.match(form) if self.national_prefix else None
            if prefix and prefix.end():
                yield form[prefix.end():]


@lru_cache(maxsize=32)
def _region(region: str) -> _Region:
    import phonenumbers

    meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
    desc = meta.general_desc if meta else None
    lengths = [n for n in (desc.possible_length if desc else ()) if n > 0]
    if meta is None or desc is None or not lengths or not desc.national_number_pattern or (
            meta.national_prefix_transform_rule):
        return _Region(7, 17, None, None, None, "")

    def compiled(pattern: str | None) -> re.Pattern[str] | None:
        return re.compile(pattern) if pattern else None

    return _Region(max(7, min(lengths)), max(lengths), re.compile(desc.national_number_pattern),
                   compiled(meta.national_prefix_for_parsing or meta.national_prefix),
                   compiled(meta.international_prefix), str(meta.country_code))


def _phone_candidates(text: str) -> Iterator[tuple[int, int, list[str], bool]]:
    """(start, end, digit groups, has +) of phone-shaped runs, cut where no number goes."""
    for m in _PHONE_CANDIDATE.finditer(text):
        run = m.group()
        if len(run) - sum(map(run.count, _PHONE_SEPARATORS)) < 7:  # digits, at C speed
            continue
        pieces = [(0, len(run))]
        if _PHONE_CUT.search(run):
            pieces, at = [], 0
            for cut in _PHONE_CUT.finditer(run):
                pieces.append((at, cut.start()))
                at = cut.end()
            pieces.append((at, len(run)))
        for a, b in pieces:
            groups = _DIGIT_GROUPS.findall(run, a, b)
            if sum(map(len, groups)) < 7 or sum(len(g) == 1 for g in groups) > 2:
                continue
            while not run[a].isdigit() and run[a] not in "+(":
                a += 1
            while not run[b - 1].isdigit():
                b -= 1
            yield m.start() + a, m.start() + b, groups, "+" in run[a:b]


def find_phones(text: str, region: str = "US") -> list[tuple[int, int]]:
    """Phone numbers by phonenumbers (STRICT_GROUPING), asked only about phone-like runs
    that could hold a valid number; a number without + is one of `region` (numbers with +
    parse in any region)."""
    candidates = _phone_candidates(text)
    first = next(candidates, None)
    if first is None:
        return []
    import phonenumbers

    info = _region(region)
    out: list[tuple[int, int]] = []
    n = len(text)
    seen: dict[str, list[tuple[int, int]]] = {}  # the matcher's answers: dumps repeat
    for start, end, groups, plus in (first, *candidates):
        if not plus:
            if len(groups) == 1 and groups[0] in _INT_LIMITS:
                continue
            if not info.plausible(groups):
                continue
        if (len(groups) == 1 and end - start == len(groups[0])
                and (start == 0 or text[start - 1] in _PLAIN_BEFORE)):
            # A bare digit run: only its digits matter to the matcher, so ask once per number.
            ws, window = start - 1, f" {groups[0]} "
        else:
            ws = max(0, start - _PHONE_MARGIN)
            window = text[ws:min(n, end + _PHONE_MARGIN)]
        found = seen.get(window)
        if found is None:
            found = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(
                window, region, leniency=phonenumbers.Leniency.STRICT_GROUPING)]
            seen[window] = found
        spans = [(ws + s, ws + e) for s, e in found]
        for s, e in spans:
            if s < end and e > start and (not out or s >= out[-1][1]):
                out.append((s, e))
    return out


# What may precede a bare number for its verdict not to depend on its neighbours: not a
# letter, a digit or a currency sign, which the matcher looks at.
_PLAIN_BEFORE = frozenset(" \t\r\n\"'`([{<:=,;|>")


_EMAIL = re.compile(
    r"(?<![\w.%+-])"
    r"([A-Za-z0-9][A-Za-z0-9._%+-]{0,63})@"
    r"((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+([A-Za-z]{2,24}))"
    r"(?![A-Za-z0-9-]|\.[A-Za-z0-9])"
)
# "icon@2x.png" and friends are file names; "git@github.com" is every git host's SSH user.
_NOT_TLDS = frozenset(
    "png jpg jpeg gif svg webp ico bmp tif tiff js mjs cjs ts tsx jsx css scss less py pyc "
    "json yaml yml toml md rst txt lock html htm xml zip gz tgz tar whl so dll exe map".split())
_NOT_LOCAL = frozenset({"git"})
_AT = re.compile("@")


def find_emails(text: str, region: str = "US") -> list[tuple[int, int]]:
    """Addresses with a dotted domain and an alphabetic top-level label: "user@localhost",
    "root@host" in a shell prompt and "pkg@1.2.3" are not emails; see _NOT_TLDS/_NOT_LOCAL."""
    out: list[tuple[int, int]] = []
    for ws, we in _windows(text, _AT.finditer(text), (65, 256)):
        for m in _EMAIL.finditer(text, ws, we):
            if m.group(3).lower() in _NOT_TLDS or m.group(1).lower() in _NOT_LOCAL:
                continue
            if not out or m.start() >= out[-1][1]:
                out.append(m.span())
    return out


# ---------------------------------------------------------------------------------------------
# Credentials written as assignments


# KEY OP VALUE, as shell, .env, YAML, JSON, TOML, INI, Python, JS, Go, PHP, SQL, connection
# strings and URL queries write it; or <key>value</key>. The key is a whole identifier
# (possessive: never a tail of one), maybe quoted or in ["..."]; the value is quoted (to
# its closing quote, escapes allowed) or bare (to a space or a separator: ; & , | < >).
_ASSIGNMENT = re.compile(
    r"(?<![\w$@])(?P<key>[$@]?[A-Za-z_][\w.-]{0,63}+)[\"'`]?\]?"
    r"(?P<gap>[ \t]{0,3}(?:=>|->|:=|\?=|=(?![=~>])|:(?![:=/\\]))[ \t]{0,3})"
    r"(?:\"(?P<dq>(?:[^\"\\\n]|\\.){0,256})\""
    r"|'(?P<sq>(?:[^'\\\n]|\\.){0,256})'"
    r"|`(?P<bq>[^`\\\n]{0,256})`"
    r"|(?P<bare>[^\s\"'`\\;&,<>|]{1,256}))"
    r"|<(?P<xkey>[A-Za-z_][\w.-]{0,63})>(?P<xml>[^<\n]{1,256})</(?P=xkey)>")
# A key's words: DB_PASSWORD -> DB, PASSWORD; apiKey -> api, Key; x-api-key -> x, api, key.
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# A credential's name ends with one of these (its last word, or words run together:
# dbpassword, authtoken); the second group only as a last word of their own, "key" only
# after a word that makes it one (api key, secret key, signing key...).
_CRED_ENDINGS = ("password", "passwd", "passphrase", "passwort", "pwd", "secret", "token",
                 "apikey", "accesskey", "secretkey", "privatekey", "authkey", "credential",
                 "credentials", "creds")
_CRED_WORDS = frozenset({"pass", "pw", "auth"})  # a bus pass: only as DB_PASS, PASS=
_KEY_KINDS = frozenset({"api", "access", "secret", "private", "client", "auth", "signing",
                        "encryption", "master", "service", "account", "app", "license",
                        "consumer", "session", "webhook", "admin", "deploy", "db",
                        "database", "storage", "subscription", "sas", "shared", "hmac"})
# Names whose values are never asked to look random by the generic rule.
_ID_WORDS = frozenset({
    "id", "ids", "uuid", "guid", "hash", "sha", "sha1", "sha256", "sha512", "md5", "digest",
    "checksum", "etag", "commit", "rev", "revision", "version", "integrity", "signature",
    "sig", "fingerprint", "name", "title", "path", "file", "filename", "dir", "url", "uri",
    "href", "src", "link", "model", "image", "tag", "ref", "branch", "type", "kind",
    "label", "text", "content", "message", "query", "pattern", "regex", "format", "slug",
    "class", "exc", "func", "meth", "attr", "mod", "obj", "data"})  # reST roles too
# Values that stand for a secret rather than being one. Lower case.
_PLACEHOLDER_WORDS = frozenset(
    "none null nil undefined true false yes no on off empty string str bytes int bool any "
    "unknown object password passwd pass pwd secret token key apikey changeme change_me "
    "example sample test dummy fake placeholder redacted hidden masked required optional "
    "todo tbd fixme n/a na value admin root guest default".split())
_PLACEHOLDER_RE = re.compile(
    r"(?i:your|my|the|some|enter|insert|replace)(?:[-_ ][A-Za-z_ -]*"  # your_token, my key
    r"|(?i:password|passwd|pass|secret|token|api_?key|key)[A-Za-z_-]*)"  # yourpassword
    r"|[A-Z]+\d*(?:_[A-Z]+\d*)+"  # DB_PASSWORD, YOUR_API_KEY_HERE: an env var's name
    r"|(?=.*(?:pass|pwd|secret|token|key|auth|cred|here|example|value|change|dummy|fake"
    r"|sample))[a-z]+(?:[-_][a-z]+)+"  # access-token-value (a passphrase stays a secret)
    r"|[*xX.:\u2022\u2026#_-]+"  # ****, xxxx, ...
    r"|(?i:[a-z_]*(?:pass|pwd|secret|token|key|auth)[a-z_]*\d{0,3})"  # challengePassword
    r"|\d{1,5}|[£$€¥][\d.,]+|\d+[.,]\d+")  # counts, ports, limits, prices
_TEMPLATE_RE = re.compile(r"^\$[A-Za-z_{(]|\$\{|\$\(|\{\{|\{%|^%\(\w+\)[sd]$|^%[sd]$"
                          r"|\{\$|^\{.*\}$|^<.*>$|^\[|^\(|^%\w+%$|^@\w+@$|^!\w|^--?[a-z]|REDACTED")
# A bare value that is code: a dotted name, a call, an index (config.password,
# os.environ["X"], getenv(...)); each name a word, a CONSTANT, a snake_case or a
# CamelCase name, never a run of random letters (icrJfJ6tCLaAV.f8VT6 is a password).
_CODE_NAME = re.compile(r"_*[A-Za-z][A-Za-z0-9_]*")
_CALL = re.compile(r"([\w.]+)[(\[].*")
_PATH_RE = re.compile(r"(?:~|\.{1,2})?/[\w.@~+-]*/|[A-Za-z]:\\|[a-z][a-z0-9+.-]*://")
_LETTERS = re.compile(r"[A-Za-z_]+")
# What an assignment's line may start with for a bare word to be a literal (shell, .env).
_SHELL_LEAD = re.compile(r"(?:^|[\n;&|(])[ \t]*(?:export[ \t]+|set[ \t]+|env[ \t]+|-e[ \t]+)?$")


# What follows a credential's name in an assignment: the rest of the key, a closing quote
# or bracket, an operator (or the > of <password>). Tried first at each anchor: most
# anchors (keyboard, tokenizer.encode, "the token") are not followed by one.
_KEY_THEN_OPERATOR = re.compile(r"[\w.-]{0,60}[\"'`]?\]?[ \t]{0,3}(?:[=:>]|->|\?=)")


def _credential_key_start(text: str, i: int) -> int:
    """_key_start for an anchor followed by an operator; -1 (tried nowhere) otherwise."""
    return _key_start(text, i) if _KEY_THEN_OPERATOR.match(text, i) else -1


def _key_start(text: str, i: int) -> int:
    """Where the key that holds position `i` (an anchor) starts: back over the key's
    characters (at most 64), a $ or @ sigil included, a leading -- or . left out."""
    p, low = i, max(0, i - 64)
    while p > low and (text[p - 1].isalnum() or text[p - 1] in "_.-"):
        p -= 1
    if p > 0 and text[p - 1] in "$@":
        p -= 1
    while p < i and text[p] in ".-":
        p += 1
    return p


def _key_before(text: str, i: int) -> int:
    """Where the key starts whose operator is at `i` (a prefilter's hit: =, : or >)."""
    p, low = i, max(0, i - 12)
    while p > low and text[p - 1] in " \t\"'`]:?-=":
        p -= 1
    return _key_start(text, p)


def _key_words(key: str) -> list[str]:
    return [w.lower() for w in _KEY_WORD.findall(key.lstrip("$@"))]


def credential_name(key: str) -> bool:
    """Whether a key names a credential by its last word: DB_PASSWORD, apiKey, x-api-key,
    client_secret, AUTH_TOKEN; not password_hash, token_count, max_tokens, keyboard."""
    words = _key_words(key)
    while words and words[-1].isdigit():
        words.pop()
    if not words:
        return False
    last = words[-1]
    if last.endswith(_CRED_ENDINGS):
        return True
    if last in _CRED_WORDS:
        return len(words) > 1 or key.lstrip("$@").isupper()
    return last == "key" and len(words) > 1 and words[-2] in _KEY_KINDS


def _value(m: re.Match[str]) -> tuple[str, int, int, bool] | None:
    """The assigned value, its span and whether it was quoted (an XML element's text
    counts as quoted: it is a literal)."""
    for group, quoted in (("dq", True), ("sq", True), ("bq", True), ("xml", True),
                          ("bare", False)):
        start = m.start(group)
        if start != -1:
            value = m.group(group)
            if not quoted and not _TEMPLATE_RE.search(value):  # a call's ")" or a full stop
                value = value.rstrip(")]}.:")
            return value, start, start + len(value), quoted
    return None


# A word of a name: Phoenix, V2, JSONSerializer, 1923, jpg (in Phoenix.Socket.V2.JSONSerializer,
# 1923_Smith_Family.jpg, Qwen2.5-7B-Instruct).
_NAME_PART = re.compile(r"[A-Z]*[a-z]*\d{0,4}|[A-Z]+(?:[A-Z][a-z]+)+|(?:[A-Z][a-z]+)+\d{0,4}")
_NAME_SEPARATORS = re.compile(r"[./:_-]")


def _name_like(value: str) -> bool:
    """Words joined by separators (a module path, a file or model name), not a token."""
    parts = _NAME_SEPARATORS.split(value)
    return len(parts) > 1 and all(_NAME_PART.fullmatch(p) for p in parts)


def _placeholder(value: str) -> bool:
    v = value.strip()
    return (not v or v.lower() in _PLACEHOLDER_WORDS or _PLACEHOLDER_RE.fullmatch(v) is not None
            or _TEMPLATE_RE.search(v) is not None or _PATH_RE.match(v) is not None)


def _literal_word(m: re.Match[str]) -> bool:
    """A bare word after `=` is a literal, not a variable, where a shell or a .env file
    reads it: KEY=word with no spaces, the key in upper case or first on its line."""
    after = m.string[m.end("bare"):m.end("bare") + 1]
    if m.group("gap") != "=" or after not in ("", "\n", "\r", " ", "\t", ";", "&"):
        return False  # (f(secret=match, ...): a keyword argument's variable)
    key = m.group("key")
    if key.isupper():
        return True
    return _SHELL_LEAD.search(m.string, max(0, m.start() - 200), m.start()) is not None


# A key written in groups (ABCD-1234-EFGH-5678, a UUID), not a name (hmac-sha256-128-hex).
_GROUPED_KEY = re.compile(r"(?=.*\d.*-.*\d)[A-Za-z0-9]{4,}(?:-[A-Za-z0-9]{4,}){2,}")
_PASSWORD_ENDINGS = ("password", "passwd", "passphrase", "passwort", "pwd", "pass", "pw",
                     "secret", "credential", "credentials", "creds")
# Prose, not a password: a sentence's punctuation between words, or many words.
_PROSE = re.compile(r"\S[,;.?!] |(?:\S+\s+){5}\S")


def _credential_assignment(m: re.Match[str]) -> tuple[int, int] | None:
    """The value assigned to a credential's name, unless it is a placeholder, a variable,
    an expression, a type or prose: DB_PASSWORD="...", password: hunter2hunter2,
    Password=...; A token's or key's value must look like one (not a plain word, not a
    name such as hmac-sha256-128-hex) where a password may be any word but a placeholder."""
    key = m.group("key") or m.group("xkey")
    found = _value(m)
    if found is None or not credential_name(key):
        return None
    value, start, end, quoted = found
    if len(value) < 4 or _placeholder(value) or _PROSE.search(value) or value != value.strip():
        return None  # (a value that starts or ends with a space is a concatenation's)
    random = random_looking(value)
    if not quoted and not random:
        if _expression(value) or (m.group("gap").strip() == ":" and _type_name(value)):
            return None
        if _LETTERS.fullmatch(value) and not _literal_word(m):
            return None
    if not _key_words(key)[-1].endswith(_PASSWORD_ENDINGS) and not random:
        if len(value) < 8 or _LETTERS.fullmatch(value) or (
                _name_like(value) and not _GROUPED_KEY.fullmatch(value)):
            return None
    return start, end


def _code_name(name: str) -> bool:
    bare = name.strip("_")
    return _CODE_NAME.fullmatch(name) is not None and (
        bare.islower() or bare.isupper() or not _short_humps(bare))


def _expression(value: str) -> bool:
    """config.password, os.environ[..., getpass.getpass(): code, not a literal."""
    call = _CALL.fullmatch(value)
    names = (call.group(1) if call else value).split(".")
    if not call and len(names) < 2:
        return False
    return all(names) and all(_code_name(n) for n in names)


# A type's name: CamelCase words and acronyms (PKCS7PrivateKeyTypes, SecretStr), at most
# one run of one or two letters (Ed25519PublicKey); a random BCrps51DIRSUb0 has more.
_TYPE_HUMP = re.compile(r"[A-Z][a-z]{2,}|[A-Z]{2,}(?![a-z])|[A-Z][a-z]?(?![a-z])|\d+")


def _type_name(value: str) -> bool:
    """PKCS7PrivateKeyTypes, SecretStr, bytes: what an annotation names after a colon."""
    if not value[:1].isupper():
        return False
    humps = _TYPE_HUMP.findall(value)
    if "".join(humps) != value:
        return False
    return sum(1 for h in humps if not h.isdigit() and len(h) <= 2) <= 1


def _short_humps(value: str) -> bool:
    """Whether a value's runs of letters (split where a capital starts one, as in
    FooBar or fooBAR) are short, as in a random token (q8Zt3LmN0vXa: q, Zt, Lm, N, v,
    Xa): two in five at most two letters long, or three letters a run on average; unlike
    words run together (ChaCha20Poly1305: Cha, Cha, Poly; Ed25519PublicKey: Ed, Public,
    Key)."""
    humps = _HUMP.findall(value)
    if not humps:
        return False
    short = sum(len(h) <= 2 for h in humps) >= 0.4 * len(humps)
    return short or sum(map(len, humps)) < 3 * len(humps)


_HUMP = re.compile(r"[A-Z]+[a-z]*|[a-z]+")
_SEGMENT = re.compile(r"[./]")


def _entropy(value: str) -> float:
    from collections import Counter
    from math import log2

    n = len(value)
    return -sum(c / n * log2(c / n) for c in Counter(value).values())


_HEXISH = re.compile(r"(?:0x)?[0-9a-fA-F-]+")
_VALUE_CHAR = r"[A-Za-z0-9+/=_.~$!#%*@:-]"
_TOKEN_VALUE = re.compile(_VALUE_CHAR + r"{20,256}")


def random_looking(value: str) -> bool:
    """Whether a value looks like a random secret rather than a word, a name or an id: 20+
    characters of a token's alphabet with capitals, small letters and digits, not hex,
    Shannon entropy >= 3.5 bits a character (gitleaks' generic-api-key threshold), and
    letters, capitals and digits changing often (a third of neighbours, where random
    base62 changes two of three and a name like Qwen2.5-7B-Instruct one of six), in
    short runs of letters (see _short_humps: not ChaCha20Poly1305 nor SSLv23_METHOD)."""
    if not _TOKEN_VALUE.fullmatch(value) or _HEXISH.fullmatch(value):
        return False
    if not (any(c.isupper() for c in value) and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)):
        return False
    if _PATH_RE.match(value) or _name_like(value) or _entropy(value) < 3.5:
        return False
    if not all(_short_humps(part) for part in _SEGMENT.split(value) if len(part) >= 12):
        return False  # ed25519.Ed25519PublicKey: a module and a class
    classes = ["u" if c.isupper() else "l" if c.islower() else "d" if c.isdigit() else "s"
               for c in value]
    changes = sum(a != b for a, b in zip(classes, classes[1:], strict=False))
    return changes >= 0.3 * (len(value) - 1) and _short_humps(value)


def _random_assignment(m: re.Match[str]) -> tuple[int, int] | None:
    """A random-looking value assigned to any other key (session=..., "dsn": "...")."""
    key = m.group("key") or m.group("xkey")
    found = _value(m)
    if found is None or credential_name(key):  # credential-assignment's to decide
        return None
    words = _key_words(key)
    if words and words[-1] in _ID_WORDS:
        return None
    value, start, end, _ = found
    return (start, end) if random_looking(value) else None


# ---------------------------------------------------------------------------------------------
# The table


def _ds(plugin: str, *indexes: int) -> tuple[Deferred, str]:
    """Compile detect-secrets' pattern(s) of `plugin` (all of them when no index is given)."""
    rows = [(p, f) for name, _, p, f in PATTERNS if name == plugin]
    if not rows:
        raise RuntimeError(f"detect-secrets {DETECT_SECRETS_VERSION} has no plugin {plugin}")
    chosen = [rows[i] for i in indexes] if indexes else rows
    flags = {f for _, f in chosen}
    if len(flags) != 1:
        raise RuntimeError(f"{plugin}: patterns with different flags cannot be combined")
    pattern = "|".join(f"(?:{p})" for p, _ in chosen) if len(chosen) > 1 else chosen[0][0]
    which = f" pattern {', '.join(map(str, indexes))}" if indexes else ""
    return Deferred(pattern, flags.pop()), f"{_DS} {plugin}{which} (Apache-2.0)"


# Public IPs are not secrets (and prose is full of addresses). PrivateKeyDetector's BEGIN
# headers are superseded by private-key, which also needs key material after the header:
# the header alone is every line of code that parses keys (a test feeds it every header);
# its PuTTY marker becomes putty-private-key. tests/test_redact.py keeps this list honest.
DETECT_SECRETS_EXCLUDED = {"IPPublicDetector": "a public IP address is not a secret"}

# What an Authorization header or a bearer token carries: not an identifier, a
# SCREAMING_CASE or kebab-case placeholder or xxxx (docs and code), but anything
# token-shaped (a random token of 8+ characters is all capitals or all small letters
# about once in ten million).
_CRED_GUARD = r"(?![A-Z_-]++(?![\w.~+/=])|[a-z_-]++(?![\w.~+/=])|[xX*.]{4})"
_SCHEMES = (r"(?:basic|bearer|token|api-?key|apikey|digest|negotiate|ntlm|sso-key|key|"
            r"aws4-hmac-sha256|hmac|otp|splunk|dsn)")
_NL = r"(?:\s|\\+[rnt])"  # a line break, also as a (multiply) JSON-escaped one
_GAP = r"(?:\s|\\+[rnt]|[\"'+,])"  # ...or where code closes one string literal, opens the next


def _build_table() -> tuple[Rule, ...]:
    pem_body = "MIIEpAIBAAKCAQEA" + _cycle(_B64, 60) + "\n" + _cycle(_B64, 64, 7) + "\n"
    gh = _cycle(_ALNUM, 36, 3)
    jwt = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
    rules: list[Rule] = []

    def add(id: str, action: Action, type: str, detector: re.Pattern[str] | Deferred | Finder,
            positives: Iterable[str], negatives: Iterable[str], source: str,
            **kw: Any) -> None:
        rules.append(Rule(id, action, type, detector, tuple(positives), tuple(negatives),
                          source, **kw))

    # --- refuse: private keys -----------------------------------------------------------
    add("private-key", "refuse", "PRIVATE_KEY", Deferred(
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        + _GAP + r"*"
        # Proc-Type, DEK-Info, Version...: each ends at a line break, which keeps this linear
        + r"(?:[A-Z][A-Z0-9-]*:[^\r\n\\]*(?:[\r\n]|\\+[rn])" + _NL + r"*)*"
        + r"[A-Z0-9+/=]{20,}"  # key material: a header alone is code that handles keys
        # ...with its line breaks, escaped too, and where code closes one string literal
        # and opens the next ("...\\n"\n  "..."): never at an escaped quote or where a
        # quote meets the other kind, which would run on into the next JSON string.
        + r"(?:[A-Z0-9+/=\s]|\\+[rnt]|\"\s*\"|'\s*')*"
        + r"(?:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)?", re.IGNORECASE),
        [f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}-----END RSA PRIVATE KEY-----",
         f"-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAAA{_cycle(_B64, 40)}",
         "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
         f"lQOYBF{_cycle(_B64, 50)}\n=ab12\n-----END PGP PRIVATE KEY BLOCK-----",
         "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
         f"{_cycle(_HEX, 32).upper()}\n\n{_cycle(_B64, 64)}\n-----END EC PRIVATE KEY-----",
         f'{{"private_key": "-----BEGIN PRIVATE KEY-----\\n{_cycle(_B64, 64)}\\n'
         '-----END PRIVATE KEY-----\\n"}',
         f'KEY = ("-----BEGIN EC PRIVATE KEY-----\\n"\n       "{_cycle(_B64, 64, 3)}\\n"\n'
         '       "-----END EC PRIVATE KEY-----\\n")'],
        ['HEADER = b"-----BEGIN RSA PRIVATE KEY-----"',
         "if line.startswith('-----BEGIN PRIVATE KEY-----'):\n    return load(line)",
         "-----BEGIN PUBLIC KEY-----\n" + _cycle(_B64, 64) + "\n-----END PUBLIC KEY-----",
         "-----BEGIN CERTIFICATE-----\n" + _cycle(_B64, 64)],
        f"{_GITLEAKS} private-key, adapted: key material must follow the header, the END "
        f"line may be missing (a truncated paste still leaks), escaped line breaks allowed; "
        f"covers every header of {_DS} PrivateKeyDetector",
        anchors=("private key",), anchors_ignore_case=True, reach=(120, 65536))
    add("putty-private-key", "refuse", "PRIVATE_KEY",
        Deferred(r"PuTTY-User-Key-File-\d+: *[A-Za-z0-9@.-]+"
                   r"(?:[A-Za-z0-9+/=:@ ,.-]|\s|\\+[rn])*"),
        ["PuTTY-User-Key-File-2: ssh-rsa\nEncryption: none\nComment: rsa-key\n"
         f"Public-Lines: 1\n{_cycle(_B64, 60)}\nPrivate-Lines: 1\n{_cycle(_B64, 60, 5)}",
         "PuTTY-User-Key-File-3: ssh-ed25519\\nEncryption: none"],
        ["PuTTY key files (.ppk) are supported", "PuTTY-User-Key-File is the header"],
        f"{_DS} PrivateKeyDetector (PuTTY-User-Key-File-2), widened to format 3",
        anchors=("PuTTY-User-Key-File-",), reach=(0, 16384))

    # --- refuse: Authorization headers and bearer tokens ----------------------------------
    add("authorization-header", "refuse", "AUTHORIZATION", Deferred(
        r"\b(?:proxy-)?authorization[\"']?\s*:\s*[\"']?"
        r"(?:" + _SCHEMES + r"\s+(?-i:" + _CRED_GUARD + r")([\w.~+/=:,@-]{8,})"
        r"|(?!" + _SCHEMES + r"\b)(?-i:" + _CRED_GUARD + r")([\w.~+/=:,@-]{16,}))",
        re.IGNORECASE),
        ["Authorization: Bearer " + _cycle(_ALNUM, 40, 9),
         "curl -H 'Authorization: token " + gh + "' https://api.example.com",
         '{"headers": {"Authorization": "Basic ' + _cycle(_B64, 24) + '=="}}',
         "proxy-authorization: " + _cycle(_ALNUM, 32, 4),
         "Authorization: AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/"
         "s3/aws4_request, SignedHeaders=host, Signature=" + _cycle(_HEX, 64)],
        ["Authorization: Bearer <token>", "Authorization: Bearer ${TOKEN}",
         "Authorization: Bearer YOUR_ACCESS_TOKEN_HERE", 'headers["Authorization"] = token',
         '"Authorization": f"Bearer {token}"', "Authorization: Negotiate",
         "the Authorization header carries a bearer token",
         "Authorization: Bearer access_token_value", "Authorization: Bearer xxxxxxxxxxxx",
         "Authorization: token OAUTH-TOKEN", "Authorization: Bearer your-token-here"],
        f"{_GITLEAKS} curl-auth-header, adapted: the header anywhere, not only in curl, and "
        "placeholders instead of an entropy threshold",
        anchors=("authorization",), anchors_ignore_case=True, reach=(8, 8192), extend=True)
    add("bearer-token", "refuse", "BEARER_TOKEN", Deferred(
        r"\bbearer\s+(?-i:" + _CRED_GUARD + r")([A-Za-z0-9._~+/-]{20,}=*)", re.IGNORECASE),
        ["token = 'Bearer " + _cycle(_ALNUM, 30) + "'", "bearer " + jwt,
         "use Bearer " + _cycle(_ALNUM + "-._~", 24, 50) + " for the call"],
        ["Bearer tokens expire after an hour", "bearer " + "authorization_header_value",
         "Bearer YOUR_TOKEN_GOES_HERE_PLEASE", 'f"Bearer {self.access_token}"',
         '"Bearer " + token'],
        f"{_GITLEAKS} curl-auth-header (its Bearer branch), adapted: outside curl too, "
        "placeholders instead of an entropy threshold",
        anchors=("bearer",), anchors_ignore_case=True, reach=(0, 8192), extend=True)

    # --- refuse: cloud access keys --------------------------------------------------------
    pattern, source = _ds("AWSKeyDetector", 0)
    add("aws-access-key", "refuse", "AWS_ACCESS_KEY", pattern,
        ["AKIAIOSFODNN7EXAMPLE",
         "aws_access_key_id = ASIA" + _cycle("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)],
        ["AKIA is the prefix of long-term keys", "AKIAshort"],
        source, anchors=("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), reach=(0, 24), extend=True)
    pattern, source = _ds("AWSKeyDetector", 1)
    aws_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # noqa: S105 - AWS's doc example
    add("aws-secret-key", "refuse", "AWS_SECRET_KEY", pattern,
        [f'aws_secret_key = "{aws_secret}"', f"AWS_PASSWORD: '{aws_secret}'"],
        ['aws_secret_key = os.environ["AWS_SECRET_ACCESS_KEY"]', f'"{aws_secret}"'],
        source, anchors=("aws",), anchors_ignore_case=True, reach=(0, 140))
    add("aws-secret-key-assignment", "refuse", "AWS_SECRET_KEY", Deferred(
        r"\baws_?secret_?(?:access_?)?key[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})"
        r"(?![A-Za-z0-9/+=])", re.IGNORECASE),
        [f"aws_secret_access_key = {aws_secret}", f"AWS_SECRET_ACCESS_KEY={aws_secret}",
         f'{{"AwsSecretAccessKey": "{aws_secret}"}}'],
        ["AWS_SECRET_ACCESS_KEY=${AWS_SECRET}", "aws_secret_access_key = <your key>"],
        f"mem: the unquoted credentials-file and environment form that {_DS} AWSKeyDetector "
        "pattern 1 misses (it needs quotes)",
        anchors=("aws_secret", "awssecret"), anchors_ignore_case=True, reach=(0, 120))
    pattern, source = _ds("AzureStorageKeyDetector")
    add("azure-storage-key", "refuse", "AZURE_STORAGE_KEY", pattern,
        ["DefaultEndpointsProtocol=https;AccountName=demo;AccountKey=" + _cycle(_B64, 86) + "==;"],
        ["AccountKey=<key>", "AccountKey=" + _cycle(_B64, 20)],
        source, anchors=("AccountKey=",), reach=(0, 110))
    add("gcp-api-key", "refuse", "GCP_API_KEY",
        Deferred(r"\bAIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
        ["key=AIza" + _cycle(_ALNUM + "_-", 35, 2), '"apiKey": "AIza' + _cycle(_ALNUM, 35) + '"'],
        ["AIza is the prefix of Google API keys", "AIza" + _cycle(_ALNUM, 20)],
        f"{_GITLEAKS} gcp-api-key, adapted: ends at any non-token character",
        anchors=("AIza",), reach=(0, 40))
    pattern, source = _ds("IbmCloudIamDetector")
    add("ibm-cloud-iam-key", "refuse", "IBM_CLOUD_KEY", pattern,
        ['ibm_cloud_iam_api_key = "' + _cycle(_ALNUM + "_-", 44, 1) + '"',
         "IBM_API_KEY: " + _cycle(_ALNUM, 44, 6)],
        ['ibm_api_key = "' + _cycle(_ALNUM, 20) + '"', "ibm_api_key = os.environ['KEY']"],
        source, anchors=("key", "pwd", "pass", "token"), anchors_ignore_case=True,
        reach=(40, 100), needs=re.compile(r"[a-zA-Z0-9_-]{44}"))
    pattern, source = _ds("IbmCosHmacDetector")
    add("ibm-cos-hmac-key", "refuse", "IBM_CLOUD_KEY", pattern,
        ['cos_hmac_secret_access_key = "' + _cycle(_HEX, 48, 3) + '"',
         "secret_access_key: " + _cycle(_HEX, 48)],
        ["secret_access_key: " + _cycle(_HEX, 40), 'secret_key = "changeme"'],
        source, anchors=("secret",), anchors_ignore_case=True, reach=(30, 130),
        needs=re.compile(r"[a-f0-9]{48}"))

    # --- refuse: VCS tokens ---------------------------------------------------------------
    pattern, source = _ds("GitHubTokenDetector")
    add("github-token", "refuse", "GITHUB_TOKEN", pattern,
        ["ghp_" + gh, "GITHUB_TOKEN=gho_" + _cycle(_ALNUM, 36, 8), "ghs_" + _cycle(_ALNUM, 36, 1)],
        ["ghp_ is a personal access token prefix", "ghp_" + _cycle(_ALNUM, 20)],
        source, anchors=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), reach=(0, 40), extend=True)
    add("github-fine-grained-pat", "refuse", "GITHUB_TOKEN",
        Deferred(r"github_pat_[A-Za-z0-9_]{82}"),
        ["github_pat_" + _cycle(_ALNUM, 22) + "_" + _cycle(_ALNUM, 59, 4)],
        ["github_pat_ tokens are fine-grained", "github_pat_" + _cycle(_ALNUM, 30)],
        f"{_GITLEAKS} github-fine-grained-pat", anchors=("github_pat_",), reach=(0, 94),
        extend=True)
    pattern, source = _ds("GitLabTokenDetector")
    add("gitlab-token", "refuse", "GITLAB_TOKEN", pattern,
        ["glpat-" + _cycle(_ALNUM, 20, 5), "GR1348941" + _cycle(_ALNUM, 20),
         "glptt-" + _cycle(_HEX, 40)],
        ["glpat- is GitLab's prefix", "glpat-" + _cycle(_ALNUM, 10)],
        source, anchors=("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-",
                         "glimt-", "glptt-", "glagent-", "gloas-"), reach=(0, 1100),
        group=0, extend=True)

    # --- refuse: LLM provider keys --------------------------------------------------------
    pattern, source = _ds("OpenAIDetector")
    add("openai-api-key", "refuse", "OPENAI_API_KEY", pattern,
        ["sk-" + _cycle(_ALNUM, 20) + "T3BlbkFJ" + _cycle(_ALNUM, 20, 3)],
        ["sk-" + _cycle(_ALNUM, 20), "T3BlbkFJ"],
        source, anchors=("T3BlbkFJ",), reach=(200, 40), extend=True)
    add("openai-project-key", "refuse", "OPENAI_API_KEY",
        Deferred(r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"),
        ["OPENAI_API_KEY=sk-proj-" + _cycle(_ALNUM + "_-", 74) + "T3BlbkFJ" + _cycle(_ALNUM, 74),
         "sk-svcacct-" + _cycle(_ALNUM + "-_", 120, 3)],
        ["sk-proj- keys belong to a project", "sk-proj-" + _cycle(_ALNUM, 20)],
        f"{_GITLEAKS} openai-api-key, adapted: any long sk-proj-/sk-svcacct-/sk-admin- key, "
        "with or without the T3BlbkFJ marker", anchors=("sk-proj-", "sk-svcacct-", "sk-admin-"),
        reach=(0, 400), extend=True)
    add("anthropic-api-key", "refuse", "ANTHROPIC_API_KEY",
        Deferred(r"\bsk-ant-[a-z]{2,8}\d\d-[A-Za-z0-9_-]{80,}"),
        ["sk-ant-api03-" + _cycle(_ALNUM + "_-", 93) + "AA",
         "x-api-key: sk-ant-admin01-" + _cycle(_ALNUM, 93, 2) + "AA",
         "sk-ant-oat01-" + _cycle(_ALNUM, 95, 7)],
        ["sk-ant-api03-", "sk-ant-api03-" + _cycle(_ALNUM, 30)],
        f"{_GITLEAKS} anthropic-api-key and anthropic-admin-api-key, adapted: any "
        "sk-ant-<kind>NN- key of 80+ characters (OAuth tokens too)",
        anchors=("sk-ant-",), reach=(0, 400), extend=True)
    add("huggingface-token", "refuse", "HUGGINGFACE_TOKEN",
        Deferred(r"\b(?:hf_|api_org_)[A-Za-z]{34}(?![A-Za-z0-9_-])"),
        ["HF_TOKEN=hf_" + _cycle("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 34),
         "api_org_" + _cycle("abcdefghijklmnopqrstuvwxyzABCDEF", 34, 3)],
        ["hf_hub_download(repo_id)", "hf_" + _cycle("abcdefghij", 20)],
        f"{_GITLEAKS} huggingface-access-token and huggingface-organization-api-token",
        anchors=("hf_", "api_org_"), reach=(0, 48))

    # --- redact: personal data ------------------------------------------------------------
    add("email", "redact", "EMAIL", find_emails,
        ["mail me at ana@example.com", "Ana <ana.maria+tag@mail.example.co.uk>",
         '{"email": "j.doe@corp.example.org"}'],
        ["user@localhost", "git@github.com:org/repo.git", "icon@2x.png", "@decorator",
         "npm install pkg@1.2.3", "docker pull image@sha256:" + _cycle(_HEX, 64)],
        "mem: a dotted domain with an alphabetic top-level label; file names and git@ excluded")
    add("phone", "redact", "PHONE", find_phones,
        ["call +1 415-555-2671 now", "(415) 555-2671", "tel:+14155552671",
         "+44 20 7946 0958", "office: 415.555.2671"],
        ["2024-01-15", "v1.2.3.4", "192.168.100.200", "3.14159265358979", "1700000000",
         "order 1048213", "e7e8f9f60a227385459c945c43fc052715850a03", "$1,234,567.89",
         "12:30:45", "555-2671"],
        "phonenumbers (Apache-2.0) PhoneNumberMatcher, Leniency.STRICT_GROUPING, on "
        "windows around phone-like digit runs")

    # --- redact: tokens -------------------------------------------------------------------
    pattern, source = _ds("JwtTokenDetector")
    add("jwt", "redact", "JWT", pattern, [jwt, "token=" + jwt + "&x=1"],
        ["eyJ", "eyJhbGciOiJIUzI1NiJ9"], source, anchors=("eyJ",),
        run=re.compile(r"[A-Za-z0-9_=-]*"), extend=True)
    pattern, source = _ds("BasicAuthDetector")
    add("basic-auth", "redact", "PASSWORD", pattern,
        ["https://admin:hunter2secret@db.example.com/", "postgres://app:" + _cycle(_ALNUM, 16)
         + "@10.0.0.5:5432/prod"],
        ["https://example.com/a:b@c", "postgres://app:${DB_PASSWORD}@db/prod",
         "ssh://git@github.com/org/repo"],
        source, anchors=("://",), reach=(0, 512))
    add("credential-assignment", "redact", "SECRET", _ASSIGNMENT,
        ['DB_PASSWORD="Xk9#mQ2$vL8pZr"', "export PASSWORD=Xk9mQ2vL8pZr", "password: hunter2hunter2",
         '{"api_key": "' + _cycle(_ALNUM, 32, 5) + '"}', "POSTGRES_PASSWORD=correcthorsebattery",
         "Server=db;Database=app;User Id=sa;Password=Pa55w0rd!;",
         "jdbc:mysql://db/app?user=app&password=s3cr3tpass", "clientSecret := \"a8f9Zk2Lq\"",
         "'password' => 'hunter2hunter2'", "<password>hunter2hunter2</password>",
         "--password=Xk9mQ2vL8pZr", "AUTH_TOKEN = '" + _cycle(_ALNUM, 24, 9) + "'"],
        ["password=<your-password>", "PASSWORD=${PASSWORD}", "password=$DB_PASS",
         'password = os.environ["PASSWORD"]', 'api_key = os.getenv("API_KEY")',
         "password: str", "password = None", 'password = ""', "password: null",
         "secret = true", 'password_hash = "abc123def"', "token_count = 12",
         "the password: is it safe", "max_tokens: 4096", '"token": "the"',
         "password: '********'", "api_key: YOUR_API_KEY", "password = password",
         "PWD=/home/alice/proj", "password: {{ vault_password }}"],
        f"mem, after {_GITLEAKS} generic-api-key and {_DS} KeywordDetector: a credential's "
        "name (its last word) assigned a value that is not a placeholder, a variable, an "
        "expression or a type; only the value is masked",
        anchors=("pass", "pw", "secret", "token", "key", "auth", "cred"),
        anchors_ignore_case=True, accept=_credential_assignment, locate=_credential_key_start)
    add("random-assignment", "redact", "SECRET", _ASSIGNMENT,
        ["session = q8Zt3LmN0vXa7RkP2sWy5BcE9hJd4GfU",
         '{"dsn": "Xk2/9fQa+Lz7Wm3Rt8Yp0Nc5Vb1Hg4Js"}',
         "SIGNED_COOKIE=aZ3kP9qL2mX7vB4nR8tY1wE6"],
        ['commit = "' + _cycle(_HEX, 40) + '"', 'model: "Qwen2.5-7B-Instruct-GGUF"',
         'id: "' + _cycle(_ALNUM, 32) + '"', 'path = "src/memvault/text/redact.py"',
         "name = getUserAccountById", "request = 123e4567-e89b-12d3-a456-426614174000"],
        f"mem, after {_GITLEAKS} generic-api-key: a random-looking value (20+ characters, "
        "mixed case and digits, entropy >= 3.5 bits) assigned to any key but an id's, a "
        "hash's, a name's or a path's",
        prefilter=re.compile(r"[=:>][ \t]{0,4}[\"'`]?(?=" + _VALUE_CHAR + r"{20})"
                             r"(?=" + _VALUE_CHAR + r"{0,255}?\d)"
                             r"(?=" + _VALUE_CHAR + r"{0,255}?[A-Z])"
                             r"(?=" + _VALUE_CHAR + r"{0,255}?[a-z])"),
        accept=_random_assignment, locate=_key_before)
    pattern, source = _ds("SlackDetector", 0)
    add("slack-token", "redact", "API_KEY", pattern,
        ["xoxb-123456789012-1234567890123-" + _cycle(_LOWER_ALNUM, 24)],
        ["xoxb- is a bot token prefix"], source, anchors=("xox",), anchors_ignore_case=True,
        reach=(0, 300), extend=True)
    pattern, source = _ds("SlackDetector", 1)
    add("slack-webhook", "redact", "API_KEY", pattern,
        ["https://hooks.slack.com/services/T" + _cycle(_ALNUM, 8) + "/B" + _cycle(_ALNUM, 8)
         + "/" + _cycle(_ALNUM, 24)],
        ["https://hooks.slack.com/services/"], source, anchors=("hooks.slack.com",),
        anchors_ignore_case=True, reach=(8, 300))
    pattern, source = _ds("StripeDetector")
    add("stripe-key", "redact", "API_KEY", pattern,
        ["sk_live_" + _cycle(_ALNUM, 24), "rk_live_" + _cycle(_ALNUM, 99, 5)],
        ["sk_test_" + _cycle(_ALNUM, 24), "sk_live_"], source, anchors=("k_live_",),
        reach=(1, 40), extend=True)
    pattern, source = _ds("SendGridDetector")
    add("sendgrid-api-key", "redact", "API_KEY", pattern,
        ["SG." + _cycle(_ALNUM, 22) + "." + _cycle(_ALNUM + "_-", 43)], ["SG.foo.bar"],
        source, anchors=("SG.",), reach=(0, 80), extend=True)
    pattern, source = _ds("TwilioKeyDetector")
    add("twilio-api-key", "redact", "API_KEY", pattern,
        ["AC" + _cycle(_LOWER_ALNUM, 32), "SK" + _cycle(_HEX, 32, 4)],
        ["ACME corporation", "SK" + _cycle(_HEX, 20)], source, anchors=("AC", "SK"),
        reach=(0, 40), extend=True)
    pattern, source = _ds("NpmDetector")
    add("npm-token", "redact", "API_KEY", pattern,
        ["//registry.npmjs.org/:_authToken=" + _cycle(_HEX, 8) + "-" + _cycle(_HEX, 4) + "-"
         + _cycle(_HEX, 4) + "-" + _cycle(_HEX, 4) + "-" + _cycle(_HEX, 12)],
        ["//registry.npmjs.org/:_authToken=${NPM_TOKEN}"], source,
        anchors=(":_authToken=",), reach=(300, 200))
    add("npm-access-token", "redact", "API_KEY",
        Deferred(r"\bnpm_[A-Za-z0-9]{36}(?![A-Za-z0-9_-])"),
        ["NPM_TOKEN=npm_" + _cycle(_ALNUM, 36, 12)],
        ["npm_config_cache", "npm_" + _cycle(_ALNUM, 10)],
        f"{_GITLEAKS} npm-access-token, adapted: ends at any non-token character",
        anchors=("npm_",), reach=(0, 44))
    pattern, source = _ds("PypiTokenDetector")
    add("pypi-token", "redact", "API_KEY", pattern,
        ["pypi-AgEIcHlwaS5vcmc" + _cycle(_ALNUM + "-_", 120)], ["pypi-AgEIcHlwaS5vcmc"],
        source, anchors=("pypi-AgE",), reach=(0, 4096), extend=True)
    pattern, source = _ds("MailchimpDetector")
    add("mailchimp-api-key", "redact", "API_KEY", pattern,
        [_cycle(_LOWER_ALNUM, 32, 3) + "-us12"], ["us-east-1", "the-us1"], source,
        anchors=("-us",), reach=(34, 4), extend=True)
    pattern, source = _ds("DiscordBotTokenDetector")
    add("discord-bot-token", "redact", "API_KEY", pattern,
        ["M" + _cycle(_ALNUM, 23) + "." + _cycle(_ALNUM, 6) + "." + _cycle(_ALNUM + "_-", 27)],
        ["Mozilla.Firefox.Release"], source, extend=True,
        prefilter=re.compile(r"\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"), reach=(27, 40))
    pattern, source = _ds("TelegramBotTokenDetector")
    add("telegram-bot-token", "redact", "API_KEY", pattern,
        ["bot123456789:" + _cycle(_ALNUM + "_-", 35, 6)], ["12:30:45", "123456789:short"],
        source, extend=True, prefilter=re.compile(r":[0-9A-Za-z_-]{35}"), reach=(10, 40))
    pattern, source = _ds("SquareOAuthDetector")
    add("square-oauth-secret", "redact", "API_KEY", pattern,
        ["sq0csp-" + _cycle(_ALNUM + "-_", 43)], ["sq0csp-short"], source,
        anchors=("sq0csp-",), reach=(0, 52), extend=True)
    pattern, source = _ds("ArtifactoryDetector", 0)
    add("artifactory-api-key", "redact", "API_KEY", pattern,
        ["artifactory_key: AKC" + _cycle(_ALNUM, 70)],
        ["AKC is short", "xAKC" + _cycle(_ALNUM, 12)],
        source, anchors=("AKC",), reach=(1, 200), extend=True)
    pattern, source = _ds("ArtifactoryDetector", 1)
    add("artifactory-password", "redact", "API_KEY", pattern,
        ['password="AP6' + _cycle(_ALNUM, 20) + '"'], ["APPLICATION_NAME", "APIs are fun"],
        source, anchors=tuple(f"AP{c}" for c in "0123456789ABCDEF"), reach=(1, 200),
        extend=True)
    pattern, source = _ds("CloudantDetector")
    add("cloudant-credentials", "redact", "API_KEY", pattern,
        ['cloudant_password = "' + _cycle(_HEX, 64) + '"',
         "https://user:" + _cycle(_HEX, 64) + "@acct.cloudant.com"],
        ['cloudant_password = "short"'], source,
        anchors=("cloudant", "clou", "clkey", "clpw", "clpass", "cltoken", "clapi", "cl_", "cl-"),
        anchors_ignore_case=True, reach=(200, 200))
    pattern, source = _ds("SoftlayerDetector")
    add("softlayer-api-key", "redact", "API_KEY", pattern,
        ['softlayer_api_key = "' + _cycle(_LOWER_ALNUM, 64) + '"',
         "https://api.softlayer.com/soap/v3/" + _cycle(_LOWER_ALNUM, 64, 9)],
        ['softlayer_api_key = "short"'], source,
        anchors=("softlayer", "sl_", "sl-", "slapi", "slkey", "slpwd", "slpass", "sltoken"),
        anchors_ignore_case=True, reach=(30, 200))
    return tuple(rules)


@lru_cache(maxsize=1)
def builtin_rules() -> tuple[Rule, ...]:
    """The built-in table, built on first use (importing this module builds nothing); most
    detectors are compiled only when a text first holds their anchors (Deferred)."""
    return _build_table()


# ---------------------------------------------------------------------------------------------
# Configuration


def rule_from_config(doc: dict[str, Any]) -> Rule:
    """A user rule from config.yaml: {"id": ..., "pattern": ..., "class": "refuse" | "redact:TYPE"}.

    A refuse rule's placeholder type is its id in upper case. Optional "positives" and
    "negatives" lists are checked now. Messages name the rule and the problem, never the
    pattern or an example (either may be a secret). The pattern is a Python regex run on
    the whole text: keep it linear (no nested quantifiers), mem cannot bound its run time.
    """
    if not isinstance(doc, dict):
        raise ConfigError("a redaction rule must be a mapping with id, pattern and class")
    rule_id = doc.get("id")
    if not isinstance(rule_id, str) or not RULE_ID_RE.fullmatch(rule_id):
        raise ConfigError("a redaction rule needs an id of 1-64 lower-case letters, digits "
                          "or '-'")
    unknown = sorted(set(doc) - {"id", "pattern", "class", "positives", "negatives"})
    if unknown:
        raise ConfigError(f"redaction rule {rule_id!r}: unknown key {unknown[0]!r}")
    if any(r.id == rule_id for r in builtin_rules()):
        raise ConfigError(f"redaction rule {rule_id!r}: a built-in rule has that id")
    klass = doc.get("class")
    action: Action
    if klass == "refuse":
        action, type_ = "refuse", rule_id.upper().replace("-", "_")[:32]
    elif isinstance(klass, str) and klass.startswith("redact:") and TYPE_RE.fullmatch(klass[7:]):
        action, type_ = "redact", klass[7:]
    else:
        raise ConfigError(f"redaction rule {rule_id!r}: class must be 'refuse' or "
                          "'redact:TYPE' (TYPE: upper-case letters, digits, '_')")
    source = doc.get("pattern")
    if not isinstance(source, str) or not source:
        raise ConfigError(f"redaction rule {rule_id!r}: pattern must be a non-empty string")
    try:
        pattern = re.compile(source)
    except (re.error, OverflowError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, re.error) else type(exc).__name__
        raise ConfigError(f"redaction rule {rule_id!r}: pattern does not compile ({reason})"
                          ) from None
    if pattern.fullmatch(""):
        raise ConfigError(f"redaction rule {rule_id!r}: pattern matches the empty string")
    if _nested_repeat(source):
        raise ConfigError(f"redaction rule {rule_id!r}: pattern repeats a repetition (like "
                          "(a+)+ or (\\w+\\s?)*), which can take exponential time on some "
                          "text; write it without the nested repetition, or make the inner "
                          "one possessive (a++)")
    examples: dict[str, tuple[str, ...]] = {}
    for key in ("positives", "negatives"):
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"redaction rule {rule_id!r}: {key} must be a list of strings")
        examples[key] = tuple(value)
    rule = Rule(rule_id, action, type_, pattern, examples["positives"], examples["negatives"],
                "config.yaml")
    for i, text in enumerate(rule.positives, 1):
        if not rule.spans(text):
            raise ConfigError(f"redaction rule {rule_id!r}: positive example {i} is not matched")
    for i, text in enumerate(rule.negatives, 1):
        if rule.spans(text):
            raise ConfigError(f"redaction rule {rule_id!r}: negative example {i} is matched")
    return rule


def _nested_repeat(source: str) -> bool:
    """Whether a pattern repeats (more than once) something that has a variable length
    itself: `(a+)+`, `(\\w+\\s?)*`, `(x{1,3})+`. Python's backtracking engine can take time
    exponential in the text's length on such a pattern, and a user rule runs on every
    text mem stores, under the user's lock. (Possessive repeats and atomic groups do not
    backtrack into their body: allowed.) Uses the stdlib's own regex parser."""
    import importlib

    parser: Any = importlib.import_module("re._parser")
    c: Any = importlib.import_module("re._constants")
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT)

    def variable(items: Any) -> bool:
        """Whether the items contain a repeat that matches a variable number of times."""
        return any(walk(items, inside=True))

    def children(op: Any, av: Any) -> list[Any]:
        if op in repeats or op is c.POSSESSIVE_REPEAT:
            return [av[2]]
        if op is c.SUBPATTERN:
            return [av[3]]
        if op is c.BRANCH:
            return list(av[1])
        if op in (c.ASSERT, c.ASSERT_NOT):
            return [av[1]]
        if op is c.GROUPREF_EXISTS:
            return [b for b in av[1:] if b is not None]
        if op is c.ATOMIC_GROUP:
            return [av]
        return []

    def walk(items: Any, inside: bool) -> Iterator[bool]:
        """Yields True for each repeat of variable count (inside: any, at all)."""
        for op, av in items:
            if op in repeats:
                low, high, body = av
                if inside and high != low:
                    yield True
                    continue
                if high > 1 and variable(body):
                    yield True
                    continue
            if op is c.POSSESSIVE_REPEAT or op is c.ATOMIC_GROUP:
                continue  # never backtracks into its body
            for child in children(op, av):
                yield from walk(child, inside)

    try:
        return any(walk(parser.parse(source), inside=False))
    except (ImportError, AttributeError):  # a Python whose parser moved: compile decides
        return False


_DEFAULT = RedactionConfig()


@lru_cache(maxsize=16)
def _active(config: RedactionConfig) -> tuple[Rule, ...]:
    table = builtin_rules()
    by_id = {r.id: r for r in table}
    for rule_id in sorted(config.disabled):
        if rule_id not in by_id:
            raise ConfigError(f"cannot disable unknown redaction rule {rule_id!r}")
        if by_id[rule_id].action == "refuse":
            raise ConfigError(f"redaction rule {rule_id!r} guards a critical secret and "
                              "cannot be disabled")
    if not REGION_RE.fullmatch(config.phone_region) or not _known_region(config.phone_region):
        # An unknown region would make every number without a + unparseable: phone
        # redaction off without a word.
        raise ConfigError(f"invalid phone region {config.phone_region!r}: use a two-letter "
                          "region code such as US or GB")
    seen = set(by_id)
    for rule in config.extra:
        if rule.id in seen:
            raise ConfigError(f"redaction rule {rule.id!r} is defined twice")
        seen.add(rule.id)
    return tuple(r for r in table if r.id not in config.disabled) + config.extra




def _known_region(region: str) -> bool:
    if region == "US":  # the default: no need to load the phone library to know it
        return True
    import phonenumbers

    return region in phonenumbers.SUPPORTED_REGIONS
def rules(config: RedactionConfig | None = None) -> list[Rule]:
    """The active table: built-in rules minus the disabled ones, then the user's."""
    return list(_active(config or _DEFAULT))


# ---------------------------------------------------------------------------------------------
# JSON-unescaped views


_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_U_ESCAPE = re.compile(r"\\u[0-9a-fA-F]{4}")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n",
                   "r": "\r", "t": "\t"}


_MARKS = "\x00\x01\x02\x03" + "".join(map(chr, range(0xE000, 0xF900)))


def _unescape_one(m: re.Match[str]) -> str:
    esc = m.group()
    return _SIMPLE_ESCAPES[esc[1]] if len(esc) == 2 else chr(int(esc[2:], 16))


def _decode(source: str) -> str:
    """Every JSON escape becomes the one character it stands for (a lone surrogate for half
    of a \\u pair, so that offsets stay simple)."""
    if "\\\\" in source:
        # An escaped backslash is a whole escape and JSON reads escapes left to right, as
        # str.split does: the pieces between them decode on their own, so they are joined
        # by a character the text lacks, decoded, and that character becomes the backslash.
        mark = next(c for c in _MARKS if c not in source)
        return _decode(mark.join(source.split("\\\\"))).replace(mark, "\\")
    for esc, char in _SIMPLE_ESCAPES.items():  # at C speed
        source = source.replace("\\" + esc, char)
    if "\\u" in source:  # last: no character decoded above is a backslash or a hex digit
        return _U_ESCAPE.sub(_unescape_one, source)
    return source


class _Decoded:
    """A piece of text with its JSON escapes decoded, and the way back to its offsets.

    `valid`: the piece is known to be a JSON string body (json.loads read it). Offsets then
    come from counting escapes (C-speed str.count from the nearest known offset) instead of
    an index of every escape, which costs ~0.4 s on 5 MB of escaped text."""

    def __init__(self, source: str, valid: bool = False, text: str | None = None) -> None:
        self.source = source
        self.text = _decode(source) if text is None else text
        self._valid = valid
        self._plain = len(self.text) == len(source)
        self._out: list[int] | None = None  # per escape: its offset in self.text
        self._start: list[int] = []  # per escape: its offset in the source
        self._saved: Sequence[int] = []  # per escape: source characters saved up to its end
        self._counted: str | None = None  # the source, escaped backslashes made mark + " "
        self._mark = ""
        self._known: list[tuple[int, int]] = [(0, 0)]  # (source offset, characters saved)

    def to_source(self, pos: int) -> int:
        """The source offset where the character at `pos` begins (or the source's end)."""
        if pos >= len(self.text):
            return len(self.source)
        if self._plain:
            return pos
        if self._valid:
            # The least x with x == pos + saved(x): saved() only grows, so iterating from pos
            # climbs to it without passing it.
            x = pos
            while (nx := pos + self._saved_before(x)) != x:
                x = nx
            return x
        if self._out is None:  # built on the first finding only
            if "\\u" in self.source:
                spans = [m.span() for m in _ESCAPE.finditer(self.source)]
                self._start = [s for s, _ in spans]
                self._saved = list(accumulate(e - s - 1 for s, e in spans))
            else:  # every escape is two characters: the k-th saves k + 1
                self._start = [m.start() for m in _ESCAPE.finditer(self.source)]
                self._saved = range(1, len(self._start) + 1)
            self._out = list(map(operator.sub, self._start, [0, *self._saved[:-1]]))
        k = bisect.bisect_right(self._out, pos) - 1
        if k < 0:
            return pos
        return self._start[k] if self._out[k] == pos else pos + self._saved[k]

    def _saved_before(self, x: int) -> int:
        """Source characters saved by the escapes that start before source offset x."""
        if self._counted is None:
            self._mark = next(c for c in _MARKS if c not in self.source)
            self._counted = self.source.replace("\\\\", self._mark + " ")
        i = bisect.bisect_right(self._known, (x, len(self.source))) - 1
        at, saved = self._known[i]
        t = self._counted
        saved += (t.count("\\", at, x) + t.count(self._mark, at, x)
                  + 4 * t.count("\\u", max(0, at - 1), x))  # \uXXXX saves 5: 1 + 4
        bisect.insort(self._known, (x, saved))
        return saved


class _View:
    """The decoded form of the lines of `parent` that hold JSON escapes, joined by newlines
    (consecutive lines stay as they were); offsets map back to `parent`."""

    def __init__(self, parent: str, whole: str | None = None) -> None:
        """`whole`: all of `parent` is one JSON string body, and this is its decoded form."""
        self.parent = parent
        self._starts: list[int] = []  # per piece: its offset in self.text
        self._origins: list[int] = []  # per piece: its offset in parent
        self._pieces: list[_Decoded] = []
        texts = []
        at = 0
        lines = [(0, parent)] if whole is not None else _escaped_lines(parent)
        for origin, line in lines:
            piece = _Decoded(line, valid=whole is not None, text=whole)
            self._starts.append(at)
            self._origins.append(origin)
            self._pieces.append(piece)
            texts.append(piece.text)
            at += len(piece.text) + 1
        self.text = "\n".join(texts)

    def to_parent(self, pos: int) -> int:
        k = max(0, bisect.bisect_right(self._starts, pos) - 1)
        if not self._pieces:
            return pos
        return self._origins[k] + self._pieces[k].to_source(pos - self._starts[k])


def _escaped_lines(text: str) -> list[tuple[int, str]]:
    out = []
    at = 0
    for line in text.split("\n"):
        if "\\" in line and _ESCAPE.search(line):
            out.append((at, line))
        at += len(line) + 1
    return out


def _json_body(text: str) -> str | None:
    """If all of `text` is the inside of one JSON string, its decoded form (else None):
    json.loads decodes it at C speed, and offsets map back by counting escapes.

    The raw form must still be scanned: its decoded form does not hold everything it does.
    An escape's letter reads as part of a word in the raw form only, so a rule can match
    raw text that runs through an escape ("\\n@app.command" holds the email-shaped
    "n@app.command"; "s\\rk_live_..." a Stripe key) where the decoded form has a line
    break; and a backslash ends a token there where a decoded "\\u00e9" would continue it."""
    if "\\" not in text:
        return None
    import json

    try:
        decoded = json.loads(f'"{text}"')
    except ValueError:
        return None
    if _SURROGATE_ESCAPE.search(text):
        # json.loads joins an escaped surrogate pair into one character, where _decode (and
        # the offset counting) keeps one per escape: split them again, unless the text
        # also holds such a character as itself.
        if not text.isascii() and _ASTRAL.search(text):
            return _decode(text)
        return _ASTRAL.sub(_split_astral, decoded)
    return str(decoded)


def _split_astral(m: re.Match[str]) -> str:
    code = ord(m.group()) - 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


def _align(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span of escaped text so that it splits no escape: "\\nana@x.org" -> the
    email starts after the \\n; a key body ending in the backslash of \\" leaves it be."""
    if _odd_backslashes_before(text, start):
        start += 5 if text.startswith("u", start) and _ESCAPE.match(text, start - 1) else 1
    if end > start and _odd_backslashes_before(text, end):
        end -= 1
    return start, end


def _odd_backslashes_before(text: str, pos: int) -> bool:
    n = 0
    while pos - n > 0 and text[pos - n - 1] == "\\":
        n += 1
    return n % 2 == 1


# ---------------------------------------------------------------------------------------------
# Scanning


@dataclass(frozen=True)
class _Gate:
    """Which rules' anchors occur in a text, found with two regex passes.

    Each pattern is a trie of every anchor, searched again from the position after each
    hit, so it reports the longest anchor starting at every position where one does, as a
    zero-width lookahead tried at every position would, twice as fast; `rules_of` maps that
    literal to every rule with an anchor inside it (a shorter anchor at the same spot)."""

    sensitive: re.Pattern[str] | None
    insensitive: re.Pattern[str] | None
    rules_of: dict[tuple[bool, str], frozenset[str]]
    gated: frozenset[str]
    ungated: tuple[Rule, ...]  # the rules run on every text, in the active order

    def triggered(self, text: str, lower: str | None) -> set[str]:
        ids: set[str] = set()
        for ignore_case, pattern, hay in ((False, self.sensitive, text),
                                          (True, self.insensitive, lower)):
            if pattern is None or hay is None:
                continue
            m = pattern.search(hay)
            while m:
                ids |= self.rules_of[(ignore_case, m.group())]
                m = pattern.search(hay, m.start() + 1)
        return ids


_GATES: dict[int, tuple[tuple[Rule, ...], _Gate]] = {}


def _gate(active: tuple[Rule, ...]) -> _Gate:
    cached = _GATES.get(id(active))
    if cached is not None and cached[0] is active:
        return cached[1]
    gated = [r for r in active if r.anchors and r.prefilter is None
             and isinstance(r.detector, re.Pattern | Deferred)]
    patterns: dict[bool, re.Pattern[str] | None] = {}
    rules_of: dict[tuple[bool, str], frozenset[str]] = {}
    for ignore_case in (False, True):
        group = [r for r in gated if r.anchors_ignore_case == ignore_case]
        literals = {a for r in group for a in r.anchors}
        patterns[ignore_case] = re.compile(_literal_union(literals)) if literals else None
        for literal in literals:
            rules_of[(ignore_case, literal)] = frozenset(
                r.id for r in group if any(a in literal for a in r.anchors))
    ids = frozenset(r.id for r in gated)
    gate = _Gate(patterns[False], patterns[True], rules_of, ids,
                 tuple(r for r in active if r.id not in ids))
    _GATES[id(active)] = (active, gate)
    return gate


def _find(text: str, active: tuple[Rule, ...], region: str, refuse_only: bool = False,
          lower: str | None = None) -> list[tuple[int, int, Rule]]:
    if lower is None and any(r.anchors_ignore_case for r in active):
        lower = lowered(text)
    found = []
    # Short texts (one message each, on the ingest path) first learn in one pass which
    # rules' anchors occur at all: most messages hold none, and spans() per rule costs
    # far more than the regexes themselves. Long texts go straight to each rule.
    gate = _gate(active)
    rules = active
    if len(text) < _LONG:
        triggered = gate.triggered(text, lower)
        rules = gate.ungated if not triggered else tuple(
            r for r in active if r.id not in gate.gated or r.id in triggered)
    for rule in rules:
        if refuse_only and rule.action != "refuse":
            continue
        for start, end in rule.spans(text, region, lower):
            found.append((start, end, rule))
    return found


def scan(text: str, config: RedactionConfig | None = None,
         lower: str | None = None) -> Redaction:
    """Find every rule's matches in `text` and in its JSON-unescaped forms; replace them.
    `lower`: lowered(text), when the caller has it already (admission does).

    Forms scanned: the text, the decoded lines that hold JSON escapes (every rule) and,
    for JSON inside JSON, those lines decoded once more (refuse rules only: a critical
    secret two escapes deep still refuses). Neither form holds everything the other does,
    not even when the whole text is one JSON string body (see _json_body)."""
    config = config or _DEFAULT
    active = _active(config)
    region = config.phone_region
    hits: list[tuple[int, int, Rule]] = []
    if "\\" not in text or not _ESCAPE.search(text):
        return _apply(text, _find(text, active, region, lower=lower))
    for s, e, rule in _find(text, active, region, lower=lower):
        s, e = _align(text, s, e)
        if s < e:
            hits.append((s, e, rule))
    chain = [_View(text, whole=_json_body(text))]
    if "\\" in chain[0].text and _ESCAPE.search(chain[0].text):
        chain.append(_View(chain[0].text))
    for depth, view in enumerate(chain):
        for s, e, rule in _find(view.text, active, region, refuse_only=depth > 0):
            for up in reversed(chain[:depth + 1]):
                s, e = up.to_parent(s), up.to_parent(e)
            if s < e:
                hits.append((s, e, rule))
    return _apply(text, hits)


def _apply(text: str, hits: list[tuple[int, int, Rule]]) -> Redaction:
    # One finding per rule and overlapping span: both forms often find the same thing.
    hits.sort(key=lambda h: (h[2].id, h[0], -h[1]))
    merged: list[list[Any]] = []
    for s, e, rule in hits:
        if merged and merged[-1][2] is rule and s < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e, rule])
    findings = sorted((Finding(r.id, r.action, r.type, s, e) for s, e, r in merged),
                      key=lambda f: (f.start, -f.end))
    counts: dict[str, int] = {}
    refused: list[str] = []
    for f in findings:
        counts[f.rule] = counts.get(f.rule, 0) + 1
        if f.action == "refuse" and f.rule not in refused:
            refused.append(f.rule)
    # Overlapping findings of different rules become one placeholder, typed by a refuse rule
    # if one is involved, else by the longest finding.
    pieces: list[str] = []
    pos = i = 0
    while i < len(findings):
        group = [findings[i]]
        end = findings[i].end
        i += 1
        while i < len(findings) and findings[i].start < end:
            group.append(findings[i])
            end = max(end, findings[i].end)
            i += 1
        best = max(group, key=lambda f: (f.action == "refuse", f.end - f.start))
        pieces += [text[pos:group[0].start], f"<REDACTED:{best.type}>"]
        pos = end
    pieces.append(text[pos:])
    return Redaction("".join(pieces), refused, counts, findings)
