"""`mem forget --query` takes records by their words only (issue 31).

A record is taken when its own text holds a word of the query (after the index's analysis:
runs of letters and digits, lower-cased, accents folded, English stemming; common words
dropped from the query unless nothing else is left), or, when the query quotes phrases,
every phrase as written. Never by meaning (the nearest vectors are near at any distance),
by who spoke, by the day a message was said or by the turns around it. The reference
rule here is written independently of the index: a regex tokenizer, Unicode folding and
the Snowball stemmer of another library. `--dry-run` lists that set, `mem search Q --mode
words --include-archive --include-superseded` lists it too, and `--yes` takes it; a query
that would take a large share of the memory is asked again by count.
"""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import snowballstemmer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.index.keyed import STOPWORDS
from memvault.model.records import NewMessage
from memvault.ops import embed, forget, ingest, remember
from memvault.vault.vault import Vault
from tests.conftest import examples, mem, one_error_line, open_as
from tests.test_lifecycle import add_archived, files_of, records_of, user_dir

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench-data"
MEM = str(Path(sys.executable).parent / "mem")
_STEMMER = snowballstemmer.stemmer("english")
_users = itertools.count()


# --- the words rule, written apart from the index ------------------------------------------


def _fold(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text)
                   if not unicodedata.combining(c))


def _tokens(text: str) -> list[str]:
    """Runs of letters and digits, lower-cased and folded; a token of 40 bytes or more is
    not a word (the index drops it)."""
    return [_fold(t.lower()) for t in re.findall(r"[^\W_]+", text) if len(t.encode()) < 40]


def words(text: str) -> list[str]:
    return [_STEMMER.stemWord(t) for t in _tokens(text)]


def _holds(held: list[str], run: list[str]) -> bool:
    return any(held[i:i + len(run)] == run for i in range(len(held) - len(run) + 1))


def taken(contents: dict[str, str], query: str) -> set[str] | None:
    """The ids of the records the query takes; None: it has no word to search for."""
    phrases = [p for p in re.findall(r'"([^"]*)"', query) if p.strip()]
    rest = re.sub(r'"[^"]*"', " ", query).replace('"', " ")
    plain = _tokens(rest)
    wanted = {_STEMMER.stemWord(w) for w in [w for w in plain if w not in STOPWORDS] or plain}
    runs = [run for p in phrases if (run := words(p))]
    if not wanted and not runs:
        return None
    held = {i: words(c) for i, c in contents.items()}
    if runs:  # a quoted phrase must appear; the other words only rank
        return {i for i, ws in held.items() if all(_holds(ws, run) for run in runs)}
    return {i for i, ws in held.items() if wanted & set(ws)}


# --- helpers ----------------------------------------------------------------------------------


def run_json(script_runner: ScriptRunner, *args: str, code: int = 0) -> Any:
    result = mem(script_runner, *args, "--json")
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout) if result.stdout else None


def dry_run(script_runner: ScriptRunner, user: str, query: str) -> set[str]:
    """What `forget --query --dry-run` lists (nothing matching: the empty set)."""
    result = mem(script_runner, "forget", "--query", query, "--dry-run", "--json",
                 "--user", user)
    if result.returncode == 66:
        assert result.stdout == ""
        return set()
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout)["memory_ids"])


def by_words(script_runner: ScriptRunner, user: str, query: str) -> set[str]:
    """What the guide's search lists for the same query."""
    doc = run_json(script_runner, "search", query, "--mode", "words", "--include-archive",
                   "--include-superseded", "--limit", "100000", "--user", user)
    assert doc["mode"] == "words"
    return {h["memory_id"] for h in doc["results"]}


def contents_of(v: Vault) -> dict[str, str]:
    """Every record's text, decrypted from the files (not through the index)."""
    return {r.memory_id: r.content for r in records_of(open_as(v.user), include_archive=True)}


# --- what a word is: never a speaker, a day, a neighbour ------------------------------------


def test_a_message_is_taken_by_its_own_words_not_its_speaker_day_or_neighbours(
        vault: Vault) -> None:
    ingest.add_messages(vault, "chat", [
        NewMessage("Where did you leave the kayak?", "user", "m1", "2024-05-06T10:00:00Z",
                   name="Ana"),
        NewMessage("By the boathouse, next to the oars", "assistant", "m2",
                   "2024-05-06T10:01:00Z"),
        NewMessage("Thanks, Ana will fetch it on Monday", "user", "m3",
                   "2024-05-06T10:02:00Z", name="Bo"),
        NewMessage("The user asked about tides", "user", "m4", "2024-05-06T10:03:00Z")])
    ids = {r.message_id: r.memory_id for r in records_of(vault)}

    def chosen(query: str) -> set[str]:
        return {r.memory_id for r in forget.select(vault, [], query=query).targets}

    assert chosen("ana") == {ids["m3"]}  # not what Ana said: what mentions her
    assert chosen("user") == {ids["m4"]}  # not every user turn
    assert chosen("assistant") == set()
    assert chosen("monday") == {ids["m3"]}  # not every message of that Monday
    assert chosen("may 2024") == set()
    assert chosen("kayak") == {ids["m1"]}  # not the reply next to it
    assert chosen('"ana will"') == {ids["m3"]}
    assert chosen('"bo thanks"') == set()  # a phrase never runs over who spoke


def test_meaning_never_takes_a_record(vault: Vault, script_runner: ScriptRunner,
                                      vault_dir: Path) -> None:
    """With vectors, a hybrid search finds records that share no word with the query (the
    nearest neighbours are near at any distance): forget takes none of them."""
    from memvault.embed.builtin import load

    for text in ("I grow basil and mint on the balcony", "Prefers tabs over spaces",
                 "The deploy script lives in ops/deploy.sh"):
        remember.add(vault, text, "fact")
    embed.embed_pending(vault, load())
    found = run_json(script_runner, "search", "zebra unicorn", "--include-archive",
                     "--include-superseded", "--limit", "100", "--all")
    # Meaning finds something, none of it a match (under the relevance floor).
    assert found["mode"] == "hybrid" and found["results"]
    assert all(h["weak"] for h in found["results"])
    files = files_of(user_dir(vault_dir), skip_audit=True)
    for args in (("--dry-run",), ("--yes",), ("--yes", "--all-matches")):
        result = mem(script_runner, "forget", "--query", "zebra unicorn", *args)
        assert result.returncode == 66, result.stderr
        assert "nothing matches" in one_error_line(result.stderr)
    assert files_of(user_dir(vault_dir), skip_audit=True) == files


# --- the property: --dry-run lists exactly the words rule, --yes takes it ------------------

VOCABULARY = ["prefer", "prefers", "Preferred", "preferring", "tab", "TABS", "tabbed",
              "garden", "gardening", "zebra", "Zebras", "unicorn", "café", "CAFES",
              "running", "runs", "the", "about", "she", "user", "assistant", "ana", "Monday",
              "May", "2024", "naïve", "x" * 41]
WORD = st.one_of(st.sampled_from(VOCABULARY), st.from_regex(r"\A[a-z]{1,4}x\Z"))
TEXT = st.tuples(st.lists(WORD, min_size=1, max_size=6),
                 st.lists(st.sampled_from([" ", ", ", "-", "'", ".\n", "_", "/"]),
                          min_size=6, max_size=6)
                 ).map(lambda p: "".join(w + s for w, s in zip(p[0], p[1], strict=False))
                       .strip(" ,-'./_\n") or p[0][0])
VAULTS = st.fixed_dictionaries({
    "facts": st.lists(TEXT, max_size=4),
    "preferences": st.lists(TEXT, max_size=2),
    "messages": st.lists(st.tuples(st.sampled_from(["s1", "s2"]),
                                   st.sampled_from(["user", "assistant"]),
                                   st.sampled_from([None, "Ana", "Bo"]), TEXT), max_size=6),
    "archived": st.lists(TEXT, max_size=2),
    "supersede": st.booleans(),
})
QUERY_WORDS = st.lists(st.sampled_from([*VOCABULARY, "unicorns", "Tabs", "bo", "monday"]),
                       min_size=1, max_size=3).map(" ".join)


@st.composite
def queries(draw: st.DrawFn, texts: list[str]) -> str:
    """Words, or a phrase: two words in a row of a stored text (or any two words)."""
    if texts and draw(st.booleans()):
        tokens = re.findall(r"[^\W_]+", draw(st.sampled_from(texts)))
        if len(tokens) >= 2:
            i = draw(st.integers(0, len(tokens) - 2))
            extra = draw(st.sampled_from(["", " garden"]))
            return f'"{tokens[i]} {tokens[i + 1]}"{extra}'
    return draw(st.one_of(QUERY_WORDS, QUERY_WORDS.map(lambda q: f'"{q}"')))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.slow
@given(spec=VAULTS, data=st.data())
def test_dry_run_lists_exactly_the_records_holding_a_word_and_yes_takes_them(
        vault: Vault, script_runner: ScriptRunner, spec: dict[str, Any],
        data: st.DataObject) -> None:
    v = open_as(f"p{next(_users)}")
    remember.add(v, "A plain note", "context")  # the user exists, whatever is drawn
    for text in spec["facts"]:
        remember.add(v, text, "fact")
    for text in spec["preferences"]:
        remember.add(v, text, "preference")
    for i, (session, role, name, text) in enumerate(spec["messages"]):
        ingest.add_messages(v, session, [NewMessage(text, role, f"m{i}",
                                                    f"2024-05-06T10:{i:02d}:00Z", name=name)])
    if spec["archived"]:
        add_archived(v, "old", spec["archived"])
    facts = [r for r in records_of(v) if r.type == "fact"]
    if spec["supersede"] and facts:
        remember.add(v, "a newer fact", "fact", supersedes=facts[0].memory_id)
    contents = contents_of(v)
    query = data.draw(queries(list(contents.values())), label="query")
    expected = taken(contents, query)

    if expected is None:  # no word to search for: refused, never "everything"
        result = mem(script_runner, "forget", "--query", query, "--yes", "--user", v.user)
        assert result.returncode == 2, result.stderr
        assert contents_of(v) == contents
        return
    listed = dry_run(script_runner, v.user, query)
    assert listed == expected
    assert by_words(script_runner, v.user, query) == expected
    result = mem(script_runner, "forget", "--query", query, "--yes", "--json",
                 "--user", v.user)
    if not expected:
        assert result.returncode == 66, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert set(json.loads(result.stdout)["memory_ids"]) == expected
    assert set(contents_of(v)) == set(contents) - expected


# --- real data, with vectors ------------------------------------------------------------------


def _locomo_chat(path: Path) -> tuple[Path, set[str]]:
    """The first two sessions of a LoCoMo conversation as a jsonl transcript (its members
    named), and the names of its speakers."""
    conversation = json.loads((BENCH / "locomo_dev.json").read_text())[0]["conversation"]
    lines, minute = [], 0
    for n in (1, 2):
        for turn in conversation[f"session_{n}"]:
            minute += 1
            lines.append(json.dumps({"id": turn["dia_id"], "role": "user",
                                     "name": turn["speaker"], "content": turn["text"],
                                     "timestamp": f"2023-05-0{7 + n}T13:{minute % 60:02d}:00Z"}))
    path.write_text("\n".join(lines) + "\n")
    return path, {conversation["speaker_a"], conversation["speaker_b"]}


def _every(script_runner: ScriptRunner) -> dict[str, str]:
    result = mem(script_runner, "export")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    return {r["memory_id"]: r["content"] for c in doc["categories"].values()
            for r in c["records"]}


@pytest.mark.slow
def test_on_real_transcripts_with_vectors_the_preview_is_what_goes(
        vault: Vault, script_runner: ScriptRunner, tmp_path: Path, vault_dir: Path) -> None:
    if not (BENCH / "transcripts").is_dir():
        pytest.skip("the shared bench data is not here")
    run_json(script_runner, "ingest", "--scan", str(BENCH / "transcripts"))
    chat, speakers = _locomo_chat(tmp_path / "chat.jsonl")
    run_json(script_runner, "ingest", str(chat), "--format", "jsonl", "--session", "chat")
    for text, kind in (("Prefers tabs over spaces in Makefiles", "preference"),
                       ("Always run the test suite before a commit", "instruction"),
                       ("Works on the spotter project in Elixir", "context"),
                       ("Keeps a garden of tomatoes", "fact")):
        run_json(script_runner, "add", text, "--type", kind)
    assert run_json(script_runner, "embed")["pending"] == 0
    everything = _every(script_runner)
    assert len(everything) > 450
    assert run_json(script_runner, "search", "zebra unicorn")["mode"] == "hybrid"

    # What the user checks before forgetting shows exactly what goes: by words only.
    speaker = sorted(speakers)[0]
    for query in ("zebra unicorn", "tabs", "user", "assistant", speaker, "May 2023",
                  '"test suite"', "file", "commit tabs", "the"):
        expected = taken(everything, query)
        assert expected is not None
        assert dry_run(script_runner, "alice", query) == expected, query
        assert by_words(script_runner, "alice", query) == expected, query
    assert taken(everything, "zebra unicorn") == set()
    # A speaker's name takes what mentions them, not everything they said.
    spoke = sum(1 for line in chat.read_text().splitlines()
                if json.loads(line)["name"] == speaker)
    assert len(taken(everything, speaker) or ()) < spoke

    files = files_of(user_dir(vault_dir), skip_audit=True)
    nothing = mem(script_runner, "forget", "--query", "zebra unicorn", "--yes")
    assert nothing.returncode == 66
    assert files_of(user_dir(vault_dir), skip_audit=True) == files

    few = taken(everything, "tabs") or set()
    assert 0 < len(few) <= 20
    receipt = run_json(script_runner, "forget", "--query", "tabs", "--yes")
    assert set(receipt["memory_ids"]) == few
    left = _every(script_runner)
    assert set(left) == set(everything) - few

    # A query that takes more than a tenth: --yes is not enough, --all-matches is.
    broad = taken(left, "file") or set()
    assert len(broad) > max(20, len(left) // 10)
    refused = mem(script_runner, "forget", "--query", "file", "--yes")
    assert refused.returncode == 77
    line = one_error_line(refused.stderr)
    assert f"takes {len(broad)} of the {len(left)} records" in line and "--all-matches" in line
    assert _every(script_runner) == left
    receipt = run_json(script_runner, "forget", "--query", "file", "--yes", "--all-matches")
    assert set(receipt["memory_ids"]) == broad
    assert set(_every(script_runner)) == set(left) - broad
    assert by_words(script_runner, "alice", "file") == set()


# --- the share guard ----------------------------------------------------------------------------


def _garden(v: Vault, n: int = 30, others: int = 10) -> None:
    for i in range(n):
        remember.add(v, f"Garden note number {i}", "fact")
    for i in range(others):
        remember.add(v, f"Kitchen note number {i}", "fact")


def test_a_broad_query_is_refused_with_yes_alone_and_taken_with_all_matches(
        vault: Vault, script_runner: ScriptRunner, vault_dir: Path) -> None:
    _garden(vault)
    files = files_of(user_dir(vault_dir), skip_audit=True)
    refused = mem(script_runner, "forget", "--query", "garden", "--yes")
    assert refused.returncode == 77
    assert one_error_line(refused.stderr) == (
        "mem: error: --query takes 30 of the 40 records, more than a tenth: nothing was "
        "forgotten; pass --all-matches to take them all")
    dry = mem(script_runner, "forget", "--query", "garden", "--dry-run")
    assert dry.returncode == 0 and "asks for their count, or --all-matches" in dry.stderr
    assert files_of(user_dir(vault_dir), skip_audit=True) == files
    # Not broad: a count of 20 or fewer, or a tenth of the memory or less.
    assert not forget.select(vault, [], query="kitchen").broad
    receipt = run_json(script_runner, "forget", "--query", "garden", "--yes",
                       "--all-matches")
    assert receipt["deleted_count"] == 30
    assert {r.content.split()[0] for r in records_of(open_as("alice"))} == {"Kitchen"}


def _typed(args: list[str], answer: str) -> tuple[int, str]:
    """Run `mem ARGS` with stdin and stderr on a terminal; type `answer` when it asks."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([MEM, *args], stdin=slave, stdout=subprocess.PIPE,  # noqa: S603
                            stderr=slave, env={**os.environ, "TERM": "dumb"})
    os.close(slave)
    seen, typed, deadline = b"", False, time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command is gone
                break
            if not chunk:
                break
            seen += chunk
        if not typed and b"Type " in seen and seen.rstrip().endswith(b":"):
            os.write(master, answer.encode() + b"\n")
            typed = True
    code = proc.wait(120)
    assert proc.stdout is not None
    proc.stdout.close()
    os.close(master)
    return code, seen.decode(errors="replace")


@pytest.mark.slow
def test_on_a_terminal_a_broad_query_asks_for_the_count_even_with_yes(
        vault: Vault) -> None:
    _garden(vault)
    code, shown = _typed(["forget", "--query", "garden", "--yes"], "yes")
    assert code == 77 and "Type 30 to forget these 30 records" in shown
    assert len(records_of(open_as("alice"))) == 40
    code, shown = _typed(["forget", "--query", "garden", "--yes"], "30")
    assert code == 0, shown
    assert len(records_of(open_as("alice"))) == 10
