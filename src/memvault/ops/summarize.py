"""Summarisers for compaction: the built-in memory card, and an external command.

The built-in one is extractive, offline and deterministic. It reads a session with the
analyzer the index uses (the same stems, so the card keeps the words a later search
will look for) and writes a memory card: a title, key points, decisions, to-dos,
entities, keywords and notable quotes. A word's weight is its frequency in the
session times its rarity in the user's whole memory (the index's document frequency
of its keyed term), so the words that tell this session apart come first.

An external summariser is any command (an LLM CLI) that reads a prompt and the session
text on stdin and prints a summary, or JSON {"summary": str, "facts": [...]}. It runs
without a shell, with a minimal environment, a time-out and size caps, and nothing it
starts outlives it (memvault.process).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from memvault.config import BUILTIN_SUMMARIZER, CompactionConfig
from memvault.errors import ConfigError, MemError
from memvault.model.records import MAX_CONTENT, TYPES, Record
from memvault.text.transcripts import TOOL_CALL

CARD_KEYWORDS = 60  # the words a later search is most likely to use
CARD_POINTS = 6
POINT_CHARS = 240
OUTPUT_LIMIT = 1 << 20  # an external summariser's answer: a summary, not a book
TOOL_SHARE = 0.25  # a tool's output (file contents, logs) says less about a session
MESSAGE_CHARS = 4000  # one message's share of what an external summariser is sent

DEFAULT_PROMPT = """\
You are summarising a past conversation between a user and an AI assistant, for the
assistant's long-term memory of this user. Write a dense summary of at most 200 words:
what was discussed and done, decisions, open to-dos, names, tools, files and the exact
words someone would later search for. Do not invent anything that is not in the text.
If you can, answer with JSON only:
{"summary": "...", "facts": [{"type": "fact", "content": "...", "tags": []}]}
where each fact is something durable learned about the user (type fact, preference,
instruction, correction, context or pattern), not transient state. Otherwise answer
with the summary alone, as plain text. The conversation follows."""

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ENTITY = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*")
_CODEISH = re.compile(r"[\w.-]*[/_.][\w./-]*\w")  # paths, file names, identifiers
_DECISION = re.compile(
    r"\b(decided|decide to|decision|agreed|settled on|chose|choose to|opted|going with|"
    r"go with|switched to|switch to|let's use|we will use|we'll use)\b", re.I)
_TODO = re.compile(
    r"\b(todo|to-do|to do list|need to|needs to|have to|must|next step|remember to|"
    r"don't forget|plan to|planning to|going to|will (?:add|fix|write|send|call|check|"
    r"try|look|start|finish|update|make|book|buy))\b", re.I)
_QUOTE = re.compile(r"\b(I love|I hate|I prefer|my favou?rite|I always|I never|I really|"
                    r"I want|I'd like|I would like|I feel|I think)\b", re.I)


@dataclass(frozen=True)
class Fact:
    type: str
    content: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Digest:
    """What a summariser made of a unit: the summary text, and facts (external only)."""

    summary: str
    facts: tuple[Fact, ...] = ()


class SummarizerFailed(MemError):
    """The summariser gave nothing usable: the unit is left as it is."""


class SummarizerBroken(ConfigError):
    """The summariser cannot work at all (it cannot be started, or it failed before it
    ever answered): a set-up to fix, said once, and compaction stops (exit 78)."""


@dataclass
class _Sentence:
    text: str
    speaker: str
    tool: bool = False
    stems: list[str] = field(default_factory=list)


Analyze = Callable[[str], list[tuple[str, int, int]]]  # stems with character offsets
DocFreq = Callable[[list[str]], tuple[dict[str, int], int]]  # stems → df, and N


def speaker(record: Record) -> str:
    return record.name or record.role or "user"


def card(records: Sequence[Record], analyze: Analyze, stopwords: frozenset[str],
         doc_freq: DocFreq | None = None) -> str:
    """The memory card of a unit's messages (in order). Deterministic."""
    sentences: list[_Sentence] = []
    tf: dict[str, float] = {}  # weighted counts: a word of a tool's output counts a quarter
    surface: dict[str, Counter[str]] = {}
    for record in records:
        # Lines of a message (a list, a tool's output) are sentences of their own; in a
        # single line, runs of spaces are folded.
        text = " ".join(record.content.split()) if "\n" not in record.content \
            else record.content
        for piece in _SENTENCE.split(text):
            piece = " ".join(piece.split())
            if not piece:
                continue
            # A tool's output, or a call the assistant made ("[tool NAME] what it was
            # asked", as transcripts are read): what was done, not what was said.
            sentence = _Sentence(piece, speaker(record),
                                 tool=record.role == "tool" or piece.startswith(TOOL_CALL))
            share = TOOL_SHARE if sentence.tool else 1.0
            for stem, start, end in analyze(piece):
                token = piece[start:end]
                if token.lower() in stopwords or len(stem) < 2 or stem.isdigit():
                    continue
                sentence.stems.append(stem)
                tf[stem] = tf.get(stem, 0.0) + share
                surface.setdefault(stem, Counter())[token.lower()] += 1
            sentences.append(sentence)
    if not sentences:
        return ""
    dfs, total = doc_freq(list(tf)) if doc_freq is not None else ({}, 0)

    def idf(stem: str) -> float:
        if not total:
            return 1.0
        df = dfs.get(stem, 0)
        return math.log(1 + (total - df + 0.5) / (df + 0.5))

    weight = {s: (1 + math.log(max(n, 1.0))) * idf(s) * min(n, 1.0) for s, n in tf.items()}
    ranked = sorted(weight, key=lambda s: (-weight[s], s))

    def word(stem: str) -> str:
        return surface[stem].most_common(1)[0][0]

    # Named speakers (a chat's members) lead the title; "user" and "assistant" say nothing.
    speakers = list(dict.fromkeys(r.name for r in records if r.name))
    # The title names topics in words; a hash, a version or a file size ("ds906659",
    # "160p") still counts among the keywords a search finds the card by.
    worded = [s for s in ranked if _worded(word(s))] or ranked
    topics = ", ".join(word(s) for s in worded[:5])
    lines = [f"{', '.join(speakers[:4])}: {topics}" if speakers else topics.capitalize()]
    points = _points(sentences, weight)
    if points:
        lines.append("Key points:")
        lines += [f"- {s.speaker}: {_cut(s.text, POINT_CHARS)}" for s in points]
    chosen = {id(s) for s in points}
    for title, pattern in (("Decisions", _DECISION), ("To-dos", _TODO)):
        found = [s for s in sentences if not s.tool and pattern.search(s.text)
                 and id(s) not in chosen][:4]
        chosen |= {id(s) for s in found}
        if found:
            lines.append(f"{title}: " + " | ".join(
                f"{s.speaker}: {_cut(s.text, 160)}" for s in found))
    entities = _entities(sentences, speakers)
    if entities:
        lines.append("Entities: " + ", ".join(entities))
    lines.append("Keywords: " + ", ".join(word(s) for s in ranked[:CARD_KEYWORDS]))
    quotes = sorted((s for s in sentences if not s.tool and _QUOTE.search(s.text)
                     and id(s) not in chosen and len(s.text) <= 160),
                    key=lambda s: -_mass(s, weight))[:2]
    if quotes:
        lines.append("Quotes: " + " ".join(f'{s.speaker}: "{s.text}"' for s in quotes))
    return "\n".join(lines)


def _worded(token: str) -> bool:
    """A word as a title would name one: letters only, three at least (two of a script
    written without spaces, where two characters are a word)."""
    return token.isalpha() and (len(token) >= 3 or not token.isascii())


def _points(sentences: list[_Sentence], weight: dict[str, float]) -> list[_Sentence]:
    """The sentences that carry the most of the session's weight, in their order; one
    that adds little beyond those already chosen is passed over."""
    def score(s: _Sentence) -> float:
        return _mass(s, weight) / math.sqrt(len(s.stems) + 4)

    # What the people said comes first; a tool's output only when there is nothing else.
    said = [s for s in sentences if len(set(s.stems)) >= 3 and not s.tool]
    candidates = sorted(said or [s for s in sentences if len(set(s.stems)) >= 3],
                        key=lambda s: -score(s))
    chosen: list[_Sentence] = []
    covered: set[str] = set()
    for s in candidates:
        distinct = set(s.stems)
        if len(distinct - covered) < 0.5 * len(distinct):
            continue
        chosen.append(s)
        covered |= distinct
        if len(chosen) == CARD_POINTS:
            break
    order = {id(s): n for n, s in enumerate(sentences)}
    return sorted(chosen, key=lambda s: order[id(s)])


def _mass(sentence: _Sentence, weight: dict[str, float]) -> float:
    """The weight of a sentence's distinct words. fsum is exact whatever the order of
    addition, and a set's order changes with each process's string hashes
    (PYTHONHASHSEED): a plain sum would rank equal sentences differently from run to run."""
    return math.fsum(weight.get(t, 0.0) for t in set(sentence.stems))


def _entities(sentences: list[_Sentence], speakers: list[str]) -> list[str]:
    """Names and code-like words (paths, identifiers), most frequent first."""
    counts: Counter[str] = Counter()
    lowered = {s.lower() for s in speakers}
    for s in sentences:
        for m in _ENTITY.finditer(s.text):
            name = m.group(0).strip()
            words = name.split()
            if m.start() == 0 and len(words) == 1:
                continue  # a sentence's first word is capitalised anyway
            if name.lower() in lowered or words[0] in ("I", "I'm", "I've", "I'll", "I'd"):
                continue
            counts[name] += 1
        for m in _CODEISH.finditer(s.text):
            if len(m.group(0)) > 3 and not m.group(0).replace(".", "").isdigit():
                counts[m.group(0)] += 1
    return [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:12]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- external summarisers -------------------------------------------------------------


def transcript_text(records: Sequence[Record], max_chars: int) -> str:
    """The unit as an external summariser reads it, one message per paragraph, within
    `max_chars`: long messages are cut, and when the whole is still too long the middle
    messages give way (the opening and the end say the most about a session)."""
    parts = [f"[{r.created_at[:16].replace('T', ' ')}] {speaker(r)}: "
             f"{_cut(r.content.strip(), MESSAGE_CHARS)}" for r in records]
    if sum(len(p) + 2 for p in parts) <= max_chars:
        return "\n\n".join(parts)
    head: list[str] = []
    tail: list[str] = []
    used, left, right = 0, 0, len(parts) - 1
    while left <= right:
        part = parts[left] if len(head) <= len(tail) else parts[right]
        if used + len(part) + 2 > max_chars - 60:
            break
        used += len(part) + 2
        if len(head) <= len(tail):
            head.append(part)
            left += 1
        else:
            tail.insert(0, part)
            right -= 1
    omitted = right - left + 1
    return "\n\n".join([*head, f"[... {omitted} messages omitted ...]", *tail])


STDERR_LINES = 5  # of a summariser that failed before answering, shown to say why
STDERR_TAIL = 4096


class External:
    """An external summariser over one run (one process of it: a compaction pool's
    worker has its own). Until it has answered once, a failure is taken for its set-up's
    (SummarizerBroken); after that, for one unit's (SummarizerFailed).

    The rule: it cannot be started (not found, not executable, not a program), at any
    time; or, before it has ever exited 0 or printed anything on stdout in this run, it
    exits non-zero having printed nothing there. A time-out, an answer too long, empty
    or unusable, or a non-zero exit after an answer, are the unit's."""

    def __init__(self, cfg: CompactionConfig) -> None:
        self.cfg = cfg
        self.answered = False

    def __call__(self, records: Sequence[Record]) -> Digest:
        return run_external(self.cfg.summarizer, records, self.cfg, self)


def run_external(command: str, records: Sequence[Record], cfg: CompactionConfig,
                 run: External | None = None) -> Digest:
    """Run an external summariser on a unit (SummarizerFailed when it gives nothing
    usable: it timed out, exited non-zero, printed nothing or too much; SummarizerBroken
    when it cannot be started, or, in a `run` where it has not answered yet, exits
    non-zero without a word on stdout)."""
    from memvault.process import minimal_env, run_bounded

    argv = summarizer_argv(command)
    prompt = cfg.summarizer_prompt or DEFAULT_PROMPT
    text = prompt.rstrip() + "\n\n" + transcript_text(records, cfg.summarizer_max_chars)
    try:
        # The least environment: never the master key nor any MEM_* setting, and
        # nothing else of the user's but what compaction.summarizer_env names.
        done = run_bounded(argv, text.encode(), cfg.summarizer_timeout, OUTPUT_LIMIT,
                           minimal_env(cfg.summarizer_env.split()),
                           stderr_tail=STDERR_TAIL if run and not run.answered else 0)
    except (OSError, ValueError) as exc:
        raise SummarizerBroken(f"the summariser {argv[0]!r} cannot be started: "
                               f"{getattr(exc, 'strerror', None) or exc}",
                               hint="summarizer") from None
    if run is not None and not run.answered:
        if done.problem is None and done.returncode != 0 and not done.output.strip():
            said = _last_lines(done.stderr)
            raise SummarizerBroken(
                f"the summariser {argv[0]!r} exited with status {done.returncode} before "
                "answering" + (f"; it said: {said}" if said else ", and said nothing"),
                hint="summarizer")
        run.answered = done.returncode == 0 or bool(done.output.strip())
    if done.problem == "timeout":
        raise SummarizerFailed(f"the summariser did not finish within "
                               f"{cfg.summarizer_timeout:g}s; it was stopped")
    if done.problem is not None:
        raise SummarizerFailed("the summariser printed more than "
                               f"{OUTPUT_LIMIT >> 20} MiB")
    if done.returncode != 0:
        raise SummarizerFailed(f"the summariser exited with status {done.returncode}")
    return parse_output(done.output.decode(errors="replace"))


def _last_lines(raw: bytes) -> str:
    """The last lines a summariser wrote on stderr, as one line (each cut short)."""
    lines = [" ".join(line.split()) for line in raw.decode(errors="replace").splitlines()]
    kept = [_cut(line, 200) for line in lines if line][-STDERR_LINES:]
    return " | ".join(kept)


def summarizer_argv(command: str) -> list[str]:
    """The summariser command as argv (no shell); ConfigError when it is malformed."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"the summariser command cannot be parsed: {exc}") from None
    if not argv:
        raise ConfigError("the summariser command is empty")
    return argv


def is_builtin(command: str) -> bool:
    return command.strip() == BUILTIN_SUMMARIZER


def parse_output(output: str) -> Digest:
    """A summariser's answer: JSON {"summary", "facts"} (also inside a ``` fence), or
    plain text as the summary."""
    text = output.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    candidate = fenced.group(1) if fenced else text
    if candidate.startswith("{"):
        try:
            doc = json.loads(candidate)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("summary"), str):
            if not doc["summary"].strip():
                raise SummarizerFailed("the summariser's summary is empty")
            return Digest(_fit(doc["summary"].strip()), tuple(_facts(doc.get("facts"))))
    if not text:
        raise SummarizerFailed("the summariser printed nothing")
    return Digest(_fit(text))


def _facts(raw: object) -> list[Fact]:
    """The well-formed facts of an answer; anything else is left out."""
    out: list[Fact] = []
    if not isinstance(raw, list):
        return out
    for item in raw[:50]:
        if not isinstance(item, dict):
            continue
        kind, content = item.get("type", "fact"), item.get("content")
        tags = item.get("tags") or []
        if (kind in TYPES and kind not in ("message", "summary") and isinstance(content, str)
                and content.strip() and isinstance(tags, list)):
            out.append(Fact(kind, _fit(content.strip()),
                            tuple(str(t) for t in tags if isinstance(t, str))[:10]))
    return out


def _fit(text: str) -> str:
    raw = text.encode()
    if len(raw) <= MAX_CONTENT:
        return text
    return raw[: MAX_CONTENT - 3].decode(errors="ignore") + "…"
