"""Search asked as agents and people ask about a user (issue 32).

A memory of real agent transcripts (the Claude Code, Codex and Gemini sessions in the
bench data, ingested as `mem ingest` reads them) plus typed memories planted beside them,
embedded with the built-in model as a user's memory is. Questions name the user ("what
does the user prefer for …", "how does the user like …", "does the user use …"): the
planted memory must be among the first three for at least 90 % of them; questions about
what the memory does not hold must find nothing. Searched as `mem search` searches by
default (hybrid, there being vectors), and by words alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.model.records import Filters
from memvault.ops import recall
from memvault.ops.admin import init
from memvault.vault.vault import Vault
from tests.conftest import AGENT_VARIABLES, NO_KEYRING, home_environment, mem, open_as

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"

# (type, what was stored, a question about it as an agent or a person asks it)
PLANTED = [
    ("preference", "Prefers tabs over spaces", "what does the user prefer for indentation"),
    ("fact", "Uses fish shell", "what shell does the user use"),
    ("preference", "Prefers squash merges", "which merge strategy does the user like"),
    ("preference", "Prefers pytest with fixtures", "how does the user like to test"),
    ("instruction", "Always run ruff and mypy before committing",
     "what does the user want done before a commit"),
    ("preference", "Editor: Neovim with the lazy.nvim plugin manager",
     "which editor does the user use"),
    ("fact", "Works on a MacBook Pro with an M2 chip", "what laptop does the user have"),
    ("preference", "Prefers dark themes in every terminal and editor",
     "does the user like a dark theme or a light theme"),
    ("correction", "The staging database is Postgres 15, not MySQL",
     "which database does staging run"),
    ("instruction", "Never push directly to main; open a pull request",
     "can the agent push to main"),
    ("preference", "Likes commit messages in the imperative mood, under 72 characters",
     "how does the user like commit messages written"),
    ("fact", "Lives in Berlin and works remotely", "where does the user live"),
    ("preference", "Prefers British English spelling in documentation",
     "what spelling does the user prefer"),
    ("fact", "Deploys with GitHub Actions to Fly.io", "how does the user deploy"),
    ("preference", "Uses uv instead of pip for Python packages",
     "does the user use pip to install packages"),
    ("instruction", "Write docstrings in Google style",
     "what docstring style does the user want"),
    ("preference", "Prefers Rust for command-line tools",
     "what language does the user prefer for command-line tools"),
    ("fact", "Main project is a Phoenix app called Ledgerly",
     "what is the user's main project"),
    ("preference", "Wants type hints on every public function",
     "does the user want type hints"),
    ("fact", "Has a dog named Pixel", "what is the name of the user's dog"),
    ("preference", "Prefers SQLite for small tools over a database server",
     "what database does the user prefer for small tools"),
    ("preference", "Drinks coffee black, no sugar", "how does the user take their coffee"),
    ("fact", "Timezone is Europe/Berlin", "what timezone is the user in"),
    ("preference", "Prefers short answers without apologies",
     "how does the user like answers"),
    ("correction", "The API base URL is api.ledgerly.dev, not ledgerly.io",
     "what is the API base URL"),
    ("preference", "Uses Docker Compose for local development",
     "does the user use docker"),
    ("instruction", "Keep pull requests under 400 lines", "how big should pull requests be"),
    ("preference", "Likes Makefiles for project tasks",
     "how does the user like to run project tasks"),
    ("fact", "Uses Firefox for web development", "which browser does the user use"),
    ("preference", "Reviews code in the morning, meetings after lunch",
     "when does the user review code"),
    ("fact", "Team standup at 9:30 Berlin time", "when is the team standup"),
    ("summary", "Session summary: migrated the Ledgerly invoices table to Postgres and "
     "added an index on customer_id", "what happened with the invoices table migration"),
]

# Questions about what this memory does not hold: each must find nothing.
ABSENT = [
    "zebra unicorn",
    "what does the user think about kubernetes",
    "does the user play chess",
    "which football team does the user support",
    "does the user own a sailboat",
    "what is the user's favourite opera",
    "how does the user feel about cryptocurrency",
    "what instrument does the user play",
    "does the user speak japanese",
    "what is the user's blood type",
    "which haskell build tool does the user prefer",
    "does the user knit",
    "what did the user say about volcanoes",
    "how often does the user go skiing",
    "what is the user's favourite pizza topping",
    "does the user use terraform",
    "what car does the user drive",
    "is the user allergic to peanuts",
    "where did the user go on honeymoon",
    "what does the user prefer for embroidery",
]


def fill(vault: Vault) -> dict[str, str]:
    """The transcripts ingested, the planted memories stored, everything embedded:
    {content: id} of the planted ones."""
    from memvault.embed.builtin import load
    from memvault.ops import embed, ingest, remember

    for path in sorted(TRANSCRIPTS.glob("*/*.jsonl")):
        ingest.ingest_file(vault, path)
    ids = {text: remember.add(vault, text, kind).record.memory_id
           for kind, text, _ in PLANTED}
    embed.embed_pending(vault, load())
    return ids


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A memory built once for the module, in an environment sealed as each test's is
    (tests/conftest.py `sealed_env`); each test points at it."""
    if not TRANSCRIPTS.is_dir():
        pytest.skip("the bench data is not beside the project")
    root = tmp_path_factory.mktemp("probes")
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("MEM_") or name in AGENT_VARIABLES:
                mp.delenv(name)
        (root / "home").mkdir()
        for name, value in home_environment(root / "home").items():
            mp.setenv(name, value)
        mp.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING)
        mp.setenv("MEM_EMBEDDINGS_BACKGROUND", "false")
        _point(mp, root)
        init(resolve())
        yield root, fill(open_as("alice"))


def _point(mp: pytest.MonkeyPatch, root: Path) -> None:
    mp.setenv("MEM_VAULT", str(root / "vault"))
    mp.setenv("MEM_CONFIG_DIR", str(root / "config"))
    mp.setenv("MEM_USER", "alice")


@pytest.fixture
def memory(probes: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
           ) -> tuple[Vault, dict[str, str]]:
    _point(monkeypatch, probes[0])
    return open_as("alice"), probes[1]


def ranks(vault: Vault, ids: dict[str, str], mode: str | None) -> dict[str, int | None]:
    """Each question's planted memory's place (1-based; None: not in the first 10)."""
    out = {}
    for _, text, question in PLANTED:
        found = recall.search(vault, question, Filters(limit=10), audit=False, mode=mode)
        got = [h.memory_id for h in found.results]
        out[question] = got.index(ids[text]) + 1 if ids[text] in got else None
    return out


@pytest.mark.parametrize("mode", [None, "lexical"])
def test_the_planted_memory_is_in_the_first_three(memory: tuple[Vault, dict[str, str]],
                                                  mode: str | None) -> None:
    """At least 90 % by default (29 of 32). By words alone one fewer (28): "which
    browser does the user use" shares only its frame ("use") with "Uses Firefox for web
    development", and a frame is no match by words; by default the meaning vouches for
    it (test_the_meaning_vouches_for_what_the_words_refuse). Lost in both modes: "what
    does the user prefer for indentation" (test_role_words_are_not_evidence), "how does
    the user like to test" and "what laptop does the user have" (neither planted memory
    holds a word of its question's topic, and the built-in model puts neither near it)."""
    vault, ids = memory
    placed = ranks(vault, ids, mode)
    top3 = [q for q, r in placed.items() if r is not None and r <= 3]
    assert len(PLANTED) >= 30
    assert len(top3) >= (29 if mode is None else 28), {q: r for q, r in placed.items()
                                                       if q not in top3}


@pytest.mark.parametrize("mode", [None, "lexical", "semantic"])
def test_what_the_memory_does_not_hold_finds_nothing(memory: tuple[Vault, dict[str, str]],
                                                     mode: str | None) -> None:
    """All 20 find nothing, whatever the mode. A question's frame ("prefer", "use",
    "go", "support") is no evidence, nor are the words next to a topic word no record
    holds ("type" of "blood type", "build tool" of "haskell build tool"): index/fusion.py
    `asked`. Before that rule 12 of the 20 found nothing by words; before the floor,
    none."""
    vault, _ = memory
    found = {q: [h.content[:60] for h in recall.search(
        vault, q, Filters(limit=10), audit=False, mode=mode).results] for q in ABSENT}
    assert len(ABSENT) >= 20
    empty = [q for q, hits in found.items() if not hits]
    assert len(empty) == len(ABSENT), \
        {q: hits[:2] for q, hits in found.items() if hits}
    # A question none of whose words the memory holds, whatever the mode.
    assert not found["zebra unicorn"]


# The issue's own question, by default, is lost with the built-in model: it shares only
# its frame ("prefer") with "Prefers tabs over spaces" (no record holds "indent"), and the
# model puts the two at a cosine of 0.18 where the meaning's floor is 0.44 (a lifted
# 0.15 of the 0.42 needed); no lower floor for what the words refuse tells it from the
# questions the memory cannot answer (bench/RANKING.md, "What a match is, at last"). A
# model that puts them near finds it through the same rule.
INDENTATION = pytest.param(
    "what does the user prefer for indentation", "Prefers tabs over spaces", (None,),
    marks=pytest.mark.xfail(strict=True, reason="the built-in model's meaning does not "
                            "put tabs near indentation"))


@pytest.mark.parametrize(("question", "planted", "modes"), [
    INDENTATION,
    ("which merge strategy does the user like", "Prefers squash merges", ("lexical", None)),
])
def test_role_words_are_not_evidence(memory: tuple[Vault, dict[str, str]], question: str,
                                     planted: str, modes: tuple[str | None, ...]) -> None:
    """"user" names who is asked about: it matches no record by its speaker, so the
    short turns the user typed do not outrank the stored preference; no transcript turn
    ranks above it."""
    vault, ids = memory
    for mode in modes:
        found = recall.search(vault, question, Filters(limit=10), audit=False, mode=mode)
        got = [h.memory_id for h in found.results]
        assert ids[planted] in got[:3], (mode, [h.content[:40] for h in found.results])
        assert all(h.type != "message" for h in found.results[:got.index(ids[planted])]), \
            mode


def test_the_meaning_vouches_for_what_the_words_refuse(
        memory: tuple[Vault, dict[str, str]]) -> None:
    """"which browser does the user use" shares only its frame ("use") with "Uses Firefox
    for web development": by words that is no match (listed weak with --all); by
    default the meaning vouches for it, its cosine above the meaning's own floor (the
    one --mode semantic uses): a match, among the first three."""
    vault, ids = memory
    firefox = ids["Uses Firefox for web development"]
    question = "which browser does the user use"
    words = recall.search(vault, question, Filters(limit=50), audit=False, mode="lexical",
                          weak=True)
    assert firefox in [h.memory_id for h in words.results if h.weak]
    assert firefox not in [h.memory_id for h in words.results if not h.weak]
    for mode in (None, "semantic"):
        found = recall.search(vault, question, Filters(limit=10), audit=False, mode=mode)
        assert firefox in [h.memory_id for h in found.results[:3]], mode


def test_the_frame_of_a_question_is_no_evidence(memory: tuple[Vault, dict[str, str]]
                                                ) -> None:
    """"prefer" frames the question: of the stored preferences, the one about spelling
    matches, not every "Prefers …"; a question whose topic no record holds matches
    nothing, and --all still lists what its frame finds, marked weak."""
    vault, ids = memory
    for mode in ("lexical", None):
        found = recall.search(vault, "what spelling does the user prefer",
                              Filters(limit=10), audit=False, mode=mode)
        prefers = [h.content for h in found.results if h.content.startswith("Prefers")]
        assert prefers == ["Prefers British English spelling in documentation"], mode
        lacking = recall.search(vault, "what does the user prefer for indentation",
                                Filters(limit=10), audit=False, mode=mode, weak=True)
        assert lacking.results and all(h.weak for h in lacking.results), mode
        assert ids["Prefers tabs over spaces"] in [h.memory_id for h in lacking.results]


def test_a_stored_memory_outranks_the_turns_that_match_as_well(
        memory: tuple[Vault, dict[str, str]]) -> None:
    """"Uses fish shell" and the agent's shell commands hold the same words: the stored
    fact comes first; a question only transcripts answer still finds them."""
    vault, ids = memory
    found = recall.search(vault, "what shell does the user use", Filters(limit=10),
                          audit=False, mode="lexical")
    assert found.results[0].memory_id == ids["Uses fish shell"]
    assert any(h.type == "message" for h in found.results[1:])  # still listed after
    turns = recall.search(vault, "mix phx.server", Filters(limit=5), audit=False)
    assert turns.results[0].type == "message" and "phx.server" in turns.results[0].content


def test_no_match_says_so_and_prints_nothing(memory: tuple[Vault, dict[str, str]],
                                             script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "search", "zebra unicorn")
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr.strip() == "no match"
    doc = json.loads(mem(script_runner, "search", "zebra unicorn", "--json").stdout)
    assert doc["results"] == []
    # --all shows the weaker ones, each marked.
    weak = json.loads(mem(script_runner, "search", "zebra unicorn", "--all",
                          "--json").stdout)
    assert weak["results"] and all(h["weak"] for h in weak["results"])
    shown = mem(script_runner, "search", "zebra unicorn", "--all")
    assert shown.returncode == 0 and "weak" in shown.stdout
    assert shown.stderr.strip() == "no match"


def test_mcp_search_finds_the_same_and_says_when_nothing_matches(
        memory: tuple[Vault, dict[str, str]]) -> None:
    """An agent asking over MCP, from no project (so no project boost), gets the planted
    memory first for a question about the user, and for what is not there no results
    with a notice that says so."""
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    from tests.test_mcp import drive, ok

    vault, ids = memory
    got: dict[str, Any] = {}

    async def script(call: Any) -> None:
        got["fish"] = ok(await call("memory_search", {"query": "what shell does the user use"}))
        got["none"] = ok(await call("memory_search", {"query": "zebra unicorn"}))

    drive(vault, script)
    assert got["fish"]["results"][0]["memory_id"] == ids["Uses fish shell"]
    assert got["none"]["results"] == []
    assert got["none"]["notice"].startswith("no match")
