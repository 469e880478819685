"""What the assignment rules (credential-assignment, random-assignment) and `<private>`
spans find in real text that holds no planted secret: the Claude Code, Codex and Gemini
sessions and the LoCoMo and LongMemEval conversations of ../shared/bench-data, each
message scanned as ingest scans it (parsed by mem's own parsers; the conversations turn
by turn), and the transcript files' raw lines (tool output and code included). Prints,
per corpus, the messages, the messages masked by each rule and the matches, then every
match on the transcripts and a sample on the conversations, the key and a few
characters of the value around the placeholder, to be judged by eye.

Run: `.venv/bin/python bench/bench_assignments.py [--all] [--code]` (--all prints every
match; --code adds the Python source of mem and of installed packages, line by line).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator

from common import BENCH_DATA, ROOT, report

RULES = ("credential-assignment", "random-assignment")


def transcripts() -> Iterator[tuple[str, list[str]]]:
    from memvault.errors import NotTranscript
    from memvault.text.transcripts import parse

    folder = BENCH_DATA / "transcripts"
    for path in sorted(folder.rglob("*.jsonl")):
        try:
            transcript = parse(path.read_text(encoding="utf-8"))
        except NotTranscript:  # the compaction agent's restatement: ingest passes it over
            continue
        texts = [m.content for m in [*transcript.messages, *transcript.summaries]]
        yield f"{transcript.format}:{path.relative_to(folder)}", texts


def raw_lines() -> list[str]:
    """Every line of the transcript files as written (tool calls and their output, code,
    file contents), scanned as is: more than the parsers keep, and much of it code."""
    return [line for path in sorted((BENCH_DATA / "transcripts").rglob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


CODE_PACKAGES = ("rich", "typer", "yaml", "click", "hypothesis", "_pytest", "pip", "requests",
                 "urllib3", "cryptography", "pydantic", "mcp", "botocore", "boto3",
                 "detect_secrets", "platformdirs")


def code_lines() -> list[str]:
    """Lines of Python that assign something: mem's src/ and installed packages (the rule
    table's own fixtures left out)."""
    import sysconfig
    from pathlib import Path

    site = Path(sysconfig.get_paths()["purelib"])
    lines = []
    for root in [ROOT / "src", *(site / name for name in CODE_PACKAGES)]:
        for path in sorted(root.rglob("*.py")):
            if path.name in ("redact.py", "_detect_secrets_patterns.py"):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            lines += [line for line in text.splitlines() if "=" in line or ":" in line]
    return lines


def locomo() -> list[str]:
    doc = json.loads((BENCH_DATA / "locomo_dev.json").read_text(encoding="utf-8"))
    return [turn["text"] for conv in doc for key, session in conv["conversation"].items()
            if key.startswith("session_") and isinstance(session, list) for turn in session]


def longmemeval() -> list[str]:
    doc = json.loads((BENCH_DATA / "longmemeval_dev.json").read_text(encoding="utf-8"))
    seen: set[str] = set()
    out = []
    for question in doc:
        for session in question["haystack_sessions"]:
            for turn in session:
                if turn["content"] not in seen:  # haystacks share sessions
                    seen.add(turn["content"])
                    out.append(turn["content"])
    return out


def context(text: str, start: int, end: int) -> str:
    line_start = text.rfind("\n", 0, start) + 1
    before = text[max(line_start, start - 50):start]
    value = text[start:end]
    shown = value if len(value) <= 12 else value[:6] + "…" + value[-4:]
    return f"{before}[{shown}]{text[end:end + 20]}".replace("\n", " ")


def measure(name: str, texts: list[str], show: int, rng: random.Random) -> dict[str, object]:
    from memvault.text.private import hide
    from memvault.text.redact import scan

    messages = {r: 0 for r in RULES}
    matches = {r: 0 for r in RULES}
    private = 0
    seen: list[tuple[str, str]] = []
    for text in texts:
        if hide(text).count:
            private += 1
        result = scan(text)
        for rule in RULES:
            if rule in result.counts:
                messages[rule] += 1
                matches[rule] += result.counts[rule]
        seen += [(f.rule, context(text, f.start, f.end)) for f in result.findings
                 if f.rule in RULES]
    print(f"\n{name}: {len(texts)} messages, {sum(map(len, texts)) / 1e6:.1f} MB; "
          + "; ".join(f"{r}: {matches[r]} matches in {messages[r]} messages" for r in RULES)
          + f"; <private> spans in {private} messages")
    for rule, where in seen if show < 0 else rng.sample(seen, min(show, len(seen))):
        print(f"  {rule:<22} {where}")
    return {"corpus": name, "messages": len(texts), "matches": matches,
            "messages_masked": messages, "private_messages": private}


def main(show_all: bool = False, code: bool = False) -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "src"))
    if not BENCH_DATA.is_dir():
        print(f"no bench data at {BENCH_DATA}: nothing measured")
        return {}
    rng = random.Random(5)
    rows = []
    for name, texts in transcripts():
        rows.append(measure(name, texts, -1, rng))
    for name, load in (("transcript files, raw lines", raw_lines), ("locomo", locomo),
                       ("longmemeval", longmemeval)):
        rows.append(measure(name, load(), -1 if show_all else 25, rng))
    if code:
        rows.append(measure("python source", code_lines(), -1, rng))
    doc = {"results": rows}
    report("assignments", doc)
    return doc


if __name__ == "__main__":
    main("--all" in sys.argv[1:], "--code" in sys.argv[1:])
