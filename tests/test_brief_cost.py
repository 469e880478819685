"""The brief's cost (SPEC §8): at most `brief.max_tokens` estimated tokens (1,500 by
default) reach an agent at session start, frame included; what the user stated is kept
before what summarisers inferred and before summaries; the bound is set in config.yaml,
MEM_BRIEF_MAX_TOKENS or `mem brief --max-tokens`, and a smaller one keeps a prefix of
the same order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.crypto.envelope import content_hash
from memvault.integrations import claude_code
from memvault.integrations.hookbase import frame_tokens
from memvault.model.records import COMPACTION_CHANNEL, uuid7
from memvault.ops import portability, prefs, remember
from memvault.ops.brief import CUT_MARK, MAX_ENTRY_CHARS, build
from memvault.text.tokens import estimate
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

MEM = Path(sys.executable).parent / "mem"
TOPICS = ["harbour", "lighthouse", "ferry", "tide", "beacon", "pier", "keel", "anchor"]


def stated_text(n: int) -> str:
    return (f"Stated {n}: the user keeps the {TOPICS[n % 8]} notes in order, reviews them "
            "weekly and asks for them before each release of the project.")


def large_vault(vault: Vault, stated: int = 12, inferred: int = 10,
                summaries: int = 60) -> dict[str, set[str]]:
    """A user with `stated` entries of their own (preferences, instructions, facts,
    settings), `inferred` facts a summariser proposed, and `summaries` session summaries
    of about 500 characters: far more than 1,500 tokens. Written in one import."""
    def record(kind: str, category: str, text: str, day: int, **extra: Any) -> dict[str, Any]:
        return {"memory_id": uuid7(), "org_id": "default", "user_id": "alice", "type": kind,
                "category": category, "content": text, "content_hash": content_hash(text),
                "created_at": f"2026-01-{day:02d}T10:00:00Z", **extra}

    kinds = [("preference", "preference"), ("instruction", "preference"),
             ("fact", "learned_context"), ("context", "learned_context")]
    own = [record(*kinds[n % 4], stated_text(n), 1 + n % 28) for n in range(stated - 2)]
    # Shorter than the user's own: one fits where theirs does not.
    guessed = [record("fact", "learned_context", f"Inferred {n}: {TOPICS[n % 8]}.",
                      1 + n % 28, channel=COMPACTION_CHANNEL,
                      compacted_from=[uuid7()]) for n in range(inferred)]
    sums = [record("summary", "learned_context", f"Summary {n}: " + " ".join(
        f"the session about the {TOPICS[(n + i) % 8]} decided step {i}." for i in range(11)),
        1 + n % 28, compacted_from=[uuid7()]) for n in range(summaries)]
    records = own + guessed + sums
    by_category: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_category.setdefault(r["category"], []).append(r)
    portability.import_text(vault, json.dumps({
        "export_version": "1.0", "record_count": len(records), "preferences": {},
        "categories": {c: {"count": len(rs), "records": rs} for c, rs in by_category.items()}}))
    prefs.set_(vault, "editor", "vim")
    prefs.set_(vault, "language", "English")
    return {"stated": {r["content"] for r in own} | {"editor: vim", "language: English"},
            "inferred": {r["content"] for r in guessed}, "summaries": {r["content"] for r in sums}}


def session_start() -> str:
    """The context Claude Code's SessionStart hook hands the agent (in this process)."""
    out = claude_code.handle(resolve, json.dumps({"hook_event_name": "SessionStart"}))
    assert out
    return str(json.loads(out)["hookSpecificOutput"]["additionalContext"])


def test_the_estimate_over_counts_real_tokenizers_and_adds_up_at_line_breaks() -> None:
    # Brief lines with the largest count of cl100k_base, o200k_base and Claude's earlier
    # tokenizer (measured with bench/bench_brief.py's references): the estimate is not
    # below any of them, whatever the script.
    measured = {
        "- [preference, 2m] Answer briefly; show the command first, then one sentence "
        "of why.": 23,
        "- [fact, 1m] Caroline passed the adoption agency interviews last Friday and is "
        "excited about building her own family through adoption.": 27,
        "- [summary, 1y] Summary of session 01996135-afde-7911-97f0-d863511eca56, "
        "2025-09-19 (48 messages).": 42,
        "- [message, 3d] [tool Grep] 3\\.1[0-9]|python.*3\\.|Python.*3\\.": 31,
        "- [summary, 7mo] 幫我檢查一下 go.mod 裡面 為何 go版本是 1.23, toolchain 卻是 1.24?": 45,
        "- [fact, 2d] Пользователь предпочитает короткие ответы.": 24,
        "- [context, 5h] Deploy done 🚀🎉 tests green ✅": 21,
        "- [setting, 2m] editor: neovim": 13,
    }
    for line, tokens in measured.items():
        assert estimate(line) >= tokens, line
    lines = list(measured)
    assert estimate("\n".join(lines)) == sum(map(estimate, lines)) + len(lines) - 1
    assert estimate("") == estimate("   ") == 0
    assert estimate("\ud800") == 2  # a lone surrogate counts, never raises


def test_the_default_brief_of_a_large_vault_stays_within_1500_tokens(
        vault: Vault, script_runner: ScriptRunner) -> None:
    large_vault(vault)
    unbounded = build(vault, 50, 8000)
    assert unbounded.tokens > 1500  # without the token bound the same brief costs more
    context = session_start()
    assert estimate(context) <= 1500
    doc = json.loads(mem(script_runner, "brief", "--json").stdout)
    assert doc["tokens"] <= 1500 - frame_tokens() and doc["limited_by"] == "tokens"
    assert doc["tokens"] == estimate(doc["brief"])
    # What the agent gets is the same brief inside the frame, and the settings say 1500.
    assert doc["brief"].rstrip("\n") in context
    assert resolve().brief_max_tokens == 1500


def test_what_the_user_stated_comes_first_and_survives_when_summaries_are_cut(
        vault: Vault) -> None:
    made = large_vault(vault)
    sections = ["behavioral", "facts", "summaries"]
    for max_tokens in range(150, 2500, 70):
        brief = build(vault, 50, 8000, max_tokens=max_tokens)
        assert brief.tokens <= max_tokens
        kept = {e.content for e in brief.entries}
        if kept & (made["inferred"] | made["summaries"]):
            assert made["stated"] <= kept, max_tokens  # nothing inferred for a stated one
        if kept & made["summaries"]:
            assert made["inferred"] <= kept, max_tokens
        # Rendered by section; in each, the user's own before a summariser's.
        order = [(sections.index(e.section), e.inferred) for e in brief.entries]
        assert order == sorted(order), max_tokens
    # The default bound: every stated entry, summaries cut.
    context = session_start()
    assert all(text in context for text in made["stated"])
    assert not all(text[:40] in context for text in made["summaries"])


def test_a_smaller_bound_keeps_a_prefix_of_the_same_order(vault: Vault) -> None:
    large_vault(vault)
    everything = build(vault, 10_000, 10**6).entries
    tiers = [("behavioral", False), ("facts", False), ("behavioral", True),
             ("facts", True), ("summaries", False)]
    # The order of use: the user's own, then a summariser's, then summaries.
    ranked = sorted(range(len(everything)), key=lambda i: (
        tiers.index((everything[i].section, everything[i].inferred)), i))
    keys = [everything[i].memory_id or everything[i].content for i in ranked]
    previous = 0
    for max_tokens in range(100, 4000, 150):
        brief = build(vault, 50, 8000, max_tokens=max_tokens)
        chosen = {e.memory_id or e.content for e in brief.entries}
        assert chosen == set(keys[:len(chosen)]), max_tokens  # a prefix, whole entries
        assert len(chosen) >= previous
        previous = len(chosen)
    assert build(vault, 50, 8000, max_tokens=1000).brief == \
        build(vault, 50, 8000, max_tokens=1000).brief


def test_brief_max_tokens_from_the_config_file_the_environment_and_the_flag(
        vault: Vault, script_runner: ScriptRunner, config_dir: Path) -> None:
    large_vault(vault)

    def brief(*args: str, **env: str) -> dict[str, Any]:
        result = mem(script_runner, "brief", "--json", *args, **env)
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    default = brief()
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("brief:\n  max_tokens: 700\n")
    small = brief()
    assert small["tokens"] <= 700 - frame_tokens() < default["tokens"]
    assert small["brief_count"] < default["brief_count"]
    assert brief(MEM_BRIEF_MAX_TOKENS="900")["tokens"] > small["tokens"]
    large = brief("--max-tokens", "4000", MEM_BRIEF_MAX_TOKENS="900")  # flag > env > file
    assert large["tokens"] > default["tokens"] and large["limited_by"] == "chars"

    shown = json.loads(mem(script_runner, "config", "show", "--json",
                           MEM_BRIEF_MAX_TOKENS="900").stdout)["settings"]["brief"]
    assert shown["value"] == {"max_tokens": 900}
    assert shown["source"].startswith("env MEM_BRIEF_MAX_TOKENS, file ")

    refused = mem(script_runner, "brief", "--max-tokens", "299")
    assert refused.returncode == 2 and "--max-tokens at least 300" in refused.stderr
    (config_dir / "config.yaml").write_text("brief:\n  max_tokens: 12\n")
    bad = mem(script_runner, "brief")
    assert bad.returncode == 78
    assert "brief.max_tokens" in one_error_line(bad.stderr)


@pytest.mark.script_launch_mode("subprocess")
def test_the_hooks_session_start_output_honours_brief_max_tokens(
        vault: Vault, config_dir: Path, tmp_path: Path) -> None:
    made = large_vault(vault)

    def hook(**env: str) -> str:
        result = subprocess.run([str(MEM), "hook", "claude-code"], capture_output=True,
                                input=b'{"hook_event_name": "SessionStart"}', timeout=60,
                                env={**os.environ, **env}, check=False)
        assert result.returncode == 0 and result.stderr == b""
        return str(json.loads(result.stdout)["hookSpecificOutput"]["additionalContext"])

    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text("brief:\n  max_tokens: 600\n")
    from_file = hook()
    assert estimate(from_file) <= 600
    from_env = hook(MEM_BRIEF_MAX_TOKENS="1200")
    assert 600 < estimate(from_env) <= 1200
    assert sum(t in from_env for t in made["stated"]) > sum(t in from_file
                                                             for t in made["stated"])
    log = (tmp_path / "home" / ".local" / "state" / "mem" / "log" / "hooks.log")
    assert "left out by the token limit" in log.read_text()


def test_a_long_entry_is_cut_at_a_word_and_marked(vault: Vault) -> None:
    words = " ".join(f"word{n}" for n in range(200))  # 1,190 characters
    remember.add(vault, words, "fact")
    remember.add(vault, "長" * 700, "context")  # no space to cut at
    lines = {e.type: e.content for e in build(vault, 50, 8000).entries}
    for content in lines.values():
        assert len(content) <= MAX_ENTRY_CHARS and content.endswith(CUT_MARK)
    kept = lines["fact"].removesuffix(CUT_MARK)
    assert words.startswith(kept) and words[len(kept)] == " "  # whole words only
    assert lines["context"] == "長" * (MAX_ENTRY_CHARS - len(CUT_MARK)) + CUT_MARK


def test_an_agents_analysis_before_its_summary_gives_the_brief_its_summary(
        vault: Vault) -> None:
    """Claude Code's compaction summary begins with its model's analysis; the brief has
    room for an entry's start only, so it shows the summary proper. The record keeps
    both (search finds the analysis), and a summary without that shape is shown whole."""
    from memvault.ops.ingest import ingest_text

    analysis = "Let me chronologically analyze the conversation: " + "step by step " * 60
    said = ("This session is being continued from a previous conversation that ran out of "
            f"context. The summary below covers the earlier portion of the conversation.\n\n"
            f"Analysis:\n{analysis}\n\nSummary:\n1. Primary Request and Intent:\n   The user "
            "moved the kestrel deployment to Frankfurt.")
    rows = [{"type": "user", "uuid": "c1", "parentUuid": None, "sessionId": "s1",
             "isCompactSummary": True, "timestamp": "2025-07-14T08:30:00.000Z",
             "message": {"role": "user", "content": said}}]
    ingest_text(vault, "\n".join(json.dumps(r) for r in rows), "s1.jsonl")
    remember.add(vault, "Summary: Analysis of the harbour budget, decided in March.",
                 "summary")
    shown = [e.content for e in build(vault, 50, 8000).entries if e.section == "summaries"]
    assert "1. Primary Request and Intent: The user moved the kestrel deployment to " \
           "Frankfurt." in shown
    assert "Summary: Analysis of the harbour budget, decided in March." in shown
    assert not any("chronologically" in text for text in shown)
    (stored,) = [r for r in vault.store.records() if "kestrel" in r.content]
    assert stored.content.startswith("Analysis:\nLet me chronologically")
