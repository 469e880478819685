"""Compaction: what the built-in summariser keeps, and what compaction costs.

Quality (LoCoMo dev, ../shared/bench-data/locomo_dev.json): each conversation is
ingested through the CLI (generic JSONL, speakers as `name`), every session but the last
KEEP_RAW is compacted with `mem compact --session ...`, and each question whose evidence
sits in compacted sessions is asked with `mem search --type summary`. Session-level
R@5/R@10 against (a) the same search over the raw turns before compaction (hits mapped
to their sessions) and (b) the LoCoMo paper's figure for retrieving gpt-3.5 session
summaries (R@5 72.1, R@10 84.7, Table 3). ROUGE-1/L (F1, no stemming) of the cards
against the gold session summaries, beside a lead baseline (the session's first words,
as many as the gold summary has).

Cost: one user with SESSIONS sessions of 200 messages (over the token budget) compacted
with the built-in summariser, against ingesting the same messages (same run); an org of
ORG_USERS users with --jobs 2; a quiet night over QUIET_USERS small users with nothing to
compact (target: under 30 s). Peak RSS of each run's largest process.

Sizes: MEM_BENCH_COMPACT_SESSIONS (default 1000), MEM_BENCH_ORG_USERS (200),
MEM_BENCH_QUIET_USERS (2000).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import BENCH_DATA, BIN, environment, report
from locomo import load

KEEP_RAW = 3
PAPER = {"R@5": 72.1, "R@10": 84.7}
SESSIONS = int(os.environ.get("MEM_BENCH_COMPACT_SESSIONS", "1000"))
ORG_USERS = int(os.environ.get("MEM_BENCH_ORG_USERS", "200"))
QUIET_USERS = int(os.environ.get("MEM_BENCH_QUIET_USERS", "2000"))


def env_for(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEM_")}
    env.update({"MEM_VAULT": str(base / "vault"), "MEM_CONFIG_DIR": str(base / "config"),
                "MEM_USER": "bench", "NO_COLOR": "1", **extra})
    return env


def mem(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([str(BIN / "mem"), *args], env=env, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"mem {' '.join(args)}: {proc.stderr[-300:]}")
    return proc.stdout


# --- quality ------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def rouge(candidate: str, reference: str) -> tuple[float, float]:
    """ROUGE-1 and ROUGE-L F1 (no stemming, no stopword removal)."""
    c, r = words(candidate), words(reference)
    if not c or not r:
        return 0.0, 0.0
    from collections import Counter

    overlap = sum((Counter(c) & Counter(r)).values())
    r1 = 2 * overlap / (len(c) + len(r))
    prev = [0] * (len(r) + 1)
    for a in c:
        cur = [0]
        for j, b in enumerate(r, 1):
            cur.append(prev[j - 1] + 1 if a == b else max(prev[j], cur[j - 1]))
        prev = cur
    lcs = prev[-1]
    return r1, 2 * lcs / (len(c) + len(r))


def session_of(dia_id: str) -> str:
    return "session-" + dia_id[1:].split(":")[0]


def quality() -> dict[str, object]:
    data = {item["sample_id"]: item for item in
            json.loads((BENCH_DATA / "locomo_dev.json").read_text())}
    base = Path(tempfile.mkdtemp(prefix="mem-compact-q-"))
    env = env_for(base)
    (base / "config").mkdir(parents=True)
    # Dates are from 2023: only the sessions named are compacted.
    (base / "config" / "config.yaml").write_text("compaction:\n  archive_after_days: 0\n")
    mem(env, "init")
    ranks: dict[str, list[float]] = {"raw R@5": [], "raw R@10": [], "summary R@5": [],
                                     "summary R@10": []}
    r1s, rls, lead1, leadl = [], [], [], []
    per_conv = []
    for conv in load():
        user = conv.sample_id
        sessions = sorted({t.session for t in conv.turns}, key=lambda s: int(s.split("-")[1]))
        for s in sessions:
            path = base / f"{user}-{s}.jsonl"
            path.write_text("".join(json.dumps({
                "id": t.dia_id, "role": "user", "name": t.speaker, "content": t.text,
                "timestamp": t.created_at}) + "\n" for t in conv.turns if t.session == s))
            mem(env, "ingest", str(path), "--format", "jsonl", "--session", s,
                "--user", user)
        compacted = set(sessions[:-KEEP_RAW])
        asked = [q for q in conv.questions if {session_of(e) for e in q.evidence} <= compacted]
        raw = {id(q): _session_ranking(env, user, q.text, summaries=False) for q in asked}
        args = [a for s in sorted(compacted) for a in ("--session", s)]
        mem(env, "compact", "--user", user, "--json", *args)
        for q in asked:
            gold = {session_of(e) for e in q.evidence}
            by_summary = _session_ranking(env, user, q.text, summaries=True)
            for k in (5, 10):
                ranks[f"raw R@{k}"].append(len(gold & set(raw[id(q)][:k])) / len(gold))
                ranks[f"summary R@{k}"].append(len(gold & set(by_summary[:k])) / len(gold))
        cards = json.loads(mem(env, "list", "--user", user, "--type", "summary", "--limit",
                               "1000", "--json"))["records"]
        gold_summaries = data[user]["session_summary"]
        for card in cards:
            n = card["session_id"].split("-")[1]
            reference = gold_summaries.get(f"session_{n}_summary", "")
            r1, rl = rouge(card["content"], reference)
            r1s.append(r1)
            rls.append(rl)
            text = " ".join(t.text for t in conv.turns if t.session == card["session_id"])
            lead = " ".join(text.split()[:len(reference.split())])
            l1, ll = rouge(lead, reference)
            lead1.append(l1)
            leadl.append(ll)
        per_conv.append({"conversation": user, "questions": len(asked),
                         "sessions_compacted": len(compacted)})
    doc: dict[str, object] = {k: round(100 * statistics.fmean(v), 1) for k, v in ranks.items()}
    doc.update({"questions": len(ranks["raw R@5"]), "paper gpt-3.5 summaries": PAPER,
                "card ROUGE-1": round(100 * statistics.fmean(r1s), 1),
                "card ROUGE-L": round(100 * statistics.fmean(rls), 1),
                "lead ROUGE-1": round(100 * statistics.fmean(lead1), 1),
                "lead ROUGE-L": round(100 * statistics.fmean(leadl), 1),
                "cards": len(r1s), "conversations": per_conv})
    print(f"LoCoMo dev: {doc['questions']} questions with evidence in compacted sessions")
    print(f"{'':<28}{'R@5':>8}{'R@10':>8}")
    print(f"{'raw turns, before':<28}{doc['raw R@5']:>8}{doc['raw R@10']:>8}")
    print(f"{'summaries (built-in cards)':<28}{doc['summary R@5']:>8}{doc['summary R@10']:>8}")
    print(f"{'paper, gpt-3.5 summaries':<28}{PAPER['R@5']:>8}{PAPER['R@10']:>8}")
    print(f"ROUGE-1/L F1 vs gold: cards {doc['card ROUGE-1']}/{doc['card ROUGE-L']}, "
          f"lead {doc['lead ROUGE-1']}/{doc['lead ROUGE-L']} ({len(r1s)} sessions)")
    return doc


def _session_ranking(env: dict[str, str], user: str, question: str, summaries: bool
                     ) -> list[str]:
    """Sessions in the order `mem search` finds them (each once), through the search
    operation the CLI runs, in this process (a process per question would time the
    interpreter's start, not the search)."""
    from memvault.config import resolve
    from memvault.model.records import Filters
    from memvault.ops.recall import search
    from memvault.vault.vault import Vault

    with environment({"MEM_VAULT": env["MEM_VAULT"], "MEM_CONFIG_DIR": env["MEM_CONFIG_DIR"]}):
        vault = Vault(resolve(user=user))
        kind = "summary" if summaries else "message"
        hits = search(vault, question, Filters(types=[kind], limit=50)).results
    order: list[str] = []
    for hit in hits:
        if hit.session_id and hit.session_id not in order:
            order.append(hit.session_id)
    return order


# --- cost ---------------------------------------------------------------------------------

PEAK = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
        "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)"
        ".ru_maxrss, code)")


def timed(env: dict[str, str], *args: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB, largest process) of `mem args`."""
    proc = subprocess.run([sys.executable, "-c", PEAK, str(BIN / "mem"), *args], env=env,
                          capture_output=True, text=True, check=True)
    seconds, kib, code = proc.stdout.split()
    if int(code) not in (0, 75):
        raise RuntimeError(f"mem {' '.join(args)} exited {code}")
    return float(seconds), int(kib) / 1024


FILL = r"""
import json, sys
from datetime import UTC, datetime, timedelta
from memvault.config import resolve
from memvault.model.records import NewMessage
from memvault.ops.ingest import add_messages
from memvault.vault.vault import Vault
users, sessions, per, days = (int(a) for a in sys.argv[1:5])
start = datetime.now(UTC) - timedelta(days=days)
topics = ["billing", "deploy", "schema", "cache"]
for u in range(users):
    v = Vault(resolve(user=f"u{u:05d}"))
    for s in range(sessions):
        t0 = start + timedelta(hours=s)
        add_messages(v, f"s{s:04d}", [NewMessage(
            f"session {s} turn {i}: we discussed the {topics[i % 4]} "
            f"work item {s * per + i} and agreed on the next step for ticket T{i}",
            "user" if i % 2 == 0 else "assistant", f"m{i}",
            (t0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z")) for i in range(per)])
"""


def fill(env: dict[str, str], users: int, sessions: int, per: int, days: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", FILL, str(users), str(sessions), str(per),
                    str(days)], env=env, check=True)
    return time.perf_counter() - started


def cost() -> dict[str, object]:
    out: dict[str, object] = {}
    # One big user: the whole history over the token budget (recent, so only the budget
    # trigger applies), then compacted.
    base = Path(tempfile.mkdtemp(prefix="mem-compact-big-"))
    env = env_for(base, MEM_USER="u00000")
    mem(env, "init")
    fill_s = fill(env, 1, SESSIONS, 200, 30)
    seconds, rss = timed(env, "compact", "--json")
    stats = json.loads(mem(env, "stats", "--json"))
    out["one user"] = {"sessions": SESSIONS, "messages": SESSIONS * 200,
                       "ingest_seconds": round(fill_s, 1), "compact_seconds": round(seconds, 1),
                       "ratio_to_ingest": round(seconds / fill_s, 2), "peak_rss_mib": round(rss),
                       "archived": stats["archived"], "active": stats["active"]}
    print(f"one user, {SESSIONS} sessions x 200 messages: ingest {fill_s:.1f} s, compact "
          f"{seconds:.1f} s ({seconds / fill_s:.2f}x ingest), peak RSS {rss:.0f} MiB; "
          f"archived {stats['archived']}, active {stats['active']}")
    # An org: every user has old sessions to compact.
    base = Path(tempfile.mkdtemp(prefix="mem-compact-org-"))
    env = env_for(base)
    mem(env, "init")
    fill(env, ORG_USERS, 10, 30, 200)
    seconds, rss = timed(env, "compact", "--all-users", "--jobs", "2", "--json")
    again, rss2 = timed(env, "compact", "--all-users", "--jobs", "2", "--json")
    out["org"] = {"users": ORG_USERS, "sessions_each": 10, "compact_seconds": round(seconds, 1),
                  "peak_rss_mib": round(rss), "second_run_seconds": round(again, 1)}
    print(f"org of {ORG_USERS} users x 10 old sessions, --jobs 2: {seconds:.1f} s, peak RSS "
          f"{rss:.0f} MiB; second run (nothing to do) {again:.1f} s")
    # A quiet night: many small users, nothing to compact.
    base = Path(tempfile.mkdtemp(prefix="mem-compact-quiet-"))
    env = env_for(base)
    mem(env, "init")
    fill(env, QUIET_USERS, 1, 5, 1)
    runs = [timed(env, "compact", "--all-users", "--json") for _ in range(3)]
    quiet = statistics.median(r[0] for r in runs)
    out["quiet night"] = {"users": QUIET_USERS, "median_seconds": round(quiet, 1),
                          "peak_rss_mib": round(max(r[1] for r in runs)),
                          "target_seconds": 30}
    print(f"quiet night, {QUIET_USERS} small users, nothing to compact: median {quiet:.1f} s "
          f"(target < 30 s), peak RSS {max(r[1] for r in runs):.0f} MiB")
    return out


def main() -> dict[str, object]:
    from common import RESULTS

    # A run of one part keeps the other part's last figures.
    try:
        doc: dict[str, object] = json.loads((RESULTS / "compact.json").read_text())
    except (OSError, ValueError):
        doc = {}
    if os.environ.get("MEM_BENCH_COMPACT_PARTS", "quality,cost") != "cost":
        doc["quality"] = quality()
    if os.environ.get("MEM_BENCH_COMPACT_PARTS", "quality,cost") != "quality":
        doc["cost"] = cost()
    report("compact", doc)
    return doc


if __name__ == "__main__":
    main()
