"""Redaction throughput: MB/s of mem.redact.scan() on ~5 MB of transcript-like text (prose,
source code, JSON tool calls, a few emails and phone numbers), plain and JSON-escaped.
Target: >= 5 MB/s on both. Each figure is the median of a few runs in this process, with
its ratio to the same run's baseline: the table without the assignment rules; and the
cost of hiding `<private>` spans first, as admission does."""

from __future__ import annotations

import json
import random
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from common import ROOT, report

TARGET_MB_S = 5.0
SIZE = 5_000_000
WORDS = ("the a we it is was to of and in that for on with as you this be at by from or an "
         "deploy cache index query vault memory session user agent build test release fix bug "
         "service latency window token budget review merge branch config retry timeout error "
         "database schema migration backup restore search ranking result snippet model prompt "
         "meeting tomorrow yesterday customer invoice order shipped price total version").split()


# The rule table's own fixtures would read as a transcript full of planted secrets, and
# private.py's documentation as one full of <private> tags.
SKIP = {"redact.py", "_detect_secrets_patterns.py", "private.py"}


def _source_lines(limit: int = 60_000) -> list[str]:
    """Real code: this repository's src/ and some installed packages, in a fixed order."""
    site = Path(sysconfig.get_paths()["purelib"])
    roots = [ROOT / "src"] + [site / name for name in ("rich", "typer", "yaml", "click",
                                                       "hypothesis", "_pytest", "pip")]
    lines: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.name in SKIP:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            # A line that names the private tag would hide the rest of the text from the
            # admission case: transcripts hold none, and the cases must scan the same.
            lines += [line for line in text.splitlines() if "<private" not in line.lower()]
            if len(lines) >= limit:
                return lines
    return lines


def _prose(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(12, 60))]
    extras = [f"{rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/2025",
              f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
              f"{rng.randint(0, 59):02d}:00Z",
              f"v{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}",
              f"${rng.randint(1, 9999)}.{rng.randint(0, 99):02d}",
              f"order {rng.randint(100000, 999999)}",
              f"10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}",
              f"{rng.getrandbits(160):040x}", f"{rng.randint(0, 10**7)} ms"]
    for _ in range(rng.randint(0, 3)):
        words.insert(rng.randrange(len(words)), rng.choice(extras))
    return " ".join(words).capitalize() + "."


def build_text(size: int = SIZE, seed: int = 7) -> str:
    """Deterministic transcript-like text of about `size` characters."""
    rng = random.Random(seed)
    code = _source_lines()
    parts: list[str] = []
    total = 0
    turn = 0
    while total < size:
        turn += 1
        kind = rng.random()
        if kind < 0.4:
            chunk = " ".join(_prose(rng) for _ in range(rng.randint(1, 5)))
        elif kind < 0.7:
            start = rng.randrange(max(1, len(code) - 40))
            chunk = "```python\n" + "\n".join(code[start:start + rng.randint(5, 40)]) + "\n```"
        else:
            start = rng.randrange(max(1, len(code) - 30))
            chunk = json.dumps({"type": "tool_result", "tool_use_id": f"toolu_{turn:08d}",
                                "content": "\n".join(code[start:start + rng.randint(3, 30)]),
                                "is_error": False, "ts": 1700000000 + turn})
        if turn % 400 == 0:
            chunk += f" Contact ana.{turn}@example.com or +1 415-555-{rng.randint(1000, 9999)}."
        line = json.dumps({"role": rng.choice(["user", "assistant"]), "text": chunk})[:20000]
        parts.append(chunk if kind < 0.7 else line)
        total += len(parts[-1]) + 1
    return "\n".join(parts)


# The same run's baseline: the table without the assignment rules (what scan() cost before
# them), so their cost reads as a ratio that does not drift with the machine's load.
NEW_RULES = frozenset({"credential-assignment", "random-assignment"})


def _timings(text: str, runs: int) -> dict[str, tuple[float, dict[str, int]]]:
    """Median seconds (and the findings) of: the baseline, the full table, and the full
    table after hiding private spans (what admission does), runs interleaved."""
    from memvault.text.private import hide
    from memvault.text.redact import RedactionConfig, lowered, scan

    baseline = RedactionConfig(disabled=NEW_RULES)

    def admission() -> object:  # as AdmissionPolicy._scan does it
        lower = lowered(text)
        hidden = hide(text, lower=lower)
        return scan(hidden.text, None, None if hidden.count else lower)

    cases = {"baseline": lambda: scan(text, baseline), "scan": lambda: scan(text),
             "admission": admission}
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    counts: dict[str, dict[str, int]] = {}
    for _ in range(runs):
        for name, run in cases.items():
            start = time.perf_counter()
            result = run()
            seconds[name].append(time.perf_counter() - start)
            counts[name] = result.counts
    return {name: (statistics.median(seconds[name]), counts[name]) for name in cases}


def main(runs: int = 5) -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "src"))
    plain = build_text()
    escaped = json.dumps(plain)[1:-1]
    rows = []
    print(f"{'input':<14}{'MB':>6}{'case':>11}{'median s':>10}{'MB/s':>7}{'ratio':>7}   findings")
    for name, text in (("transcript", plain), ("JSON-escaped", escaped)):
        mb = len(text.encode("utf-8")) / 1e6
        timings = _timings(text, runs)
        base = timings["baseline"][0]
        for case, (median, counts) in timings.items():
            rate = mb / median
            verdict = "ok" if rate >= TARGET_MB_S else "UNDER"
            found = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
            print(f"{name:<14}{mb:>6.2f}{case:>11}{median:>10.3f}{rate:>7.1f}"
                  f"{median / base:>7.2f}   {verdict}  {found}")
            rows.append({"input": name, "case": case, "mb": round(mb, 2),
                         "median_s": round(median, 3), "mb_per_s": round(rate, 1),
                         "ratio_to_baseline": round(median / base, 3), "findings": counts})
    doc = {"runs": runs, "target_mb_per_s": TARGET_MB_S, "baseline": "the table without "
           + " and ".join(sorted(NEW_RULES)), "results": rows}
    report("redact", doc)
    return doc


if __name__ == "__main__":
    main()
