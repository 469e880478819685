"""Search by meaning: `mem search --mode`, each leg's rank and score, the same filters on
both legs, and the fall back to words when meaning cannot be had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.embed.base import EmbeddingsError
from memvault.embed.builtin import load
from memvault.index.fusion import MEANING_FLOOR
from memvault.index.vectors import SAMPLE_MIN
from memvault.model.records import Filters
from memvault.ops import embed, recall, remember
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line
from tests.test_embed_providers import (  # noqa: F401 (the fixtures of the test server)
    Server,
    endpoint_config,
    server,
    server_process,
)

HERBS = "I grow basil and mint on the balcony, and cherry tomatoes in the garden"


def fill(vault: Vault, embedded: bool = True) -> dict[str, str]:
    ids = {}
    for text, kind, tags in ((HERBS, "fact", ["home"]),
                             ("The deploy script lives in ops/deploy.sh", "fact", []),
                             ("Always answer in British English", "preference", []),
                             ("Herbs: I prefer them fresh, never dried", "preference",
                              ["home"])):
        ids[text] = remember.add(vault, text, kind, tags=tags).record.memory_id
    if embedded:
        embed.embed_pending(vault, load())
    return ids


def found(script_runner: ScriptRunner, *args: str) -> dict[str, Any]:
    result = mem(script_runner, "search", *args, "--json")
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_hybrid_by_default_finds_what_shares_no_word(vault: Vault,
                                                      script_runner: ScriptRunner) -> None:
    ids = fill(vault)
    doc = found(script_runner, "what vegetables do I cultivate")
    assert doc["mode"] == "hybrid" and doc["notice"] is None
    top = doc["results"][0]
    assert top["memory_id"] == ids[HERBS]
    assert top["lexical_rank"] is None and top["lexical_score"] is None
    assert top["semantic_rank"] == 1 and top["semantic_score"] > 0
    # By words alone nothing is found: no word of the question is stored.
    lexical = found(script_runner, "what vegetables do I cultivate", "--mode", "lexical")
    assert lexical["mode"] == "lexical" and lexical["results"] == []


def test_each_leg_reports_its_rank_and_score(vault: Vault,
                                             script_runner: ScriptRunner) -> None:
    ids = fill(vault)
    hits = {h["memory_id"]: h for h in found(script_runner, "deploy script")["results"]}
    deploy = hits[ids["The deploy script lives in ops/deploy.sh"]]
    assert deploy["lexical_rank"] == 1 and deploy["lexical_score"] > 0
    assert deploy["semantic_rank"] is not None and deploy["semantic_score"] is not None


def test_filters_reach_the_semantic_leg(vault: Vault, script_runner: ScriptRunner) -> None:
    ids = fill(vault)
    for args in (("--type", "preference"), ("--tag", "home")):
        # --all: the filters decide what is listed, not the relevance floor.
        doc = found(script_runner, "gardening vegetables", "--mode", "semantic", "--all",
                    *args)
        kept = {h["memory_id"] for h in doc["results"]}
        wanted = {i for t, i in ids.items()
                  if (args[0] == "--type" and "prefer" in t or "British" in t)
                  or (args[0] == "--tag" and t in (HERBS, "Herbs: I prefer them fresh, "
                                                   "never dried"))}
        assert kept and kept <= wanted, args


def test_no_vectors_yet_ranks_by_words_and_says_so(vault: Vault,
                                                   script_runner: ScriptRunner) -> None:
    fill(vault, embedded=False)
    assert found(script_runner, "basil")["mode"] == "lexical"
    result = mem(script_runner, "search", "basil", "--mode", "hybrid")
    assert result.returncode == 0
    assert "basil" in result.stdout
    assert result.stderr.strip().startswith("note: no vectors of builtin:")
    assert len(result.stderr.splitlines()) == 1


def test_a_failing_embedder_falls_back_to_words(vault: Vault,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ids = fill(vault)

    class Down:
        model = load().model

        def embed(self, texts: Any) -> Any:
            raise EmbeddingsError("the embeddings endpoint is not reachable")

    monkeypatch.setattr("memvault.embed.open_embedder", lambda cfg: Down())
    result = recall.search(vault, "basil balcony", Filters())
    assert result.mode == "lexical"
    assert result.notice == "the embeddings endpoint is not reachable; ranked by words only"
    assert [h.memory_id for h in result.results] == [ids[HERBS]]


def test_an_unknown_mode_is_a_usage_error(vault: Vault, script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "search", "basil", "--mode", "fuzzy")
    assert result.returncode == 2  # a usage error, as a mistyped flag is
    assert one_error_line(result.stderr).endswith("lexical, semantic, hybrid or words (--mode)")


def test_a_damaged_vector_store_falls_back_to_words(vault: Vault) -> None:
    ids = fill(vault)
    for segment in vault.layout.vectors_dir.glob("*.seg"):
        data = bytearray(segment.read_bytes())
        for i in range(len(data) // 2, len(data)):
            data[i] ^= 0xFF
        segment.write_bytes(bytes(data))
    result = recall.search(Vault(vault.settings), "basil balcony", Filters())
    assert result.mode == "lexical"
    assert result.notice is not None and "vector store is unreadable" in result.notice
    assert [h.memory_id for h in result.results] == [ids[HERBS]]


# What fills a memory beside the test's records: everyday notes about other things.
SUBJECTS = ("The quarterly budget", "Our office move", "The printer on floor two",
            "Tomorrow's flight to Lisbon", "The invoice from the plumber", "Grandma's birthday",
            "The bicycle's back tyre", "The library book on Roman history")
STATES = ("is due on Friday", "was postponed again", "needs a new part",
          "leaves at seven in the morning", "must be paid this month",
          "is planned for the weekend", "came back from the shop", "is overdue by a week")


def test_the_meaning_floor_follows_a_model_of_another_scale(
        request: pytest.FixtureRequest, vault: Vault, config_dir: Path,
        script_runner: ScriptRunner) -> None:
    """A model whose cosines all sit high (unrelated text near 0.8, as many hosted models
    put it), served over HTTP: the built-in model's cosine floor would let every record
    match by meaning; the floor set in the model's own scale, from the query's baseline
    in the memory, refuses what is unrelated and still finds what shares no word."""
    endpoint: Server = request.getfixturevalue("server")
    ids = fill(vault, embedded=False)
    for i in range(SAMPLE_MIN):
        remember.add(vault, f"{SUBJECTS[i % 8]} {STATES[i // 8 % 8]} (note {i})", "fact")
    endpoint_config(config_dir, endpoint.url, model="anisotropic-test", timeout=10.0,
                    max_wait=30.0)
    assert mem(script_runner, "embed").returncode == 0
    weak = found(script_runner, "zebra unicorn", "--mode", "semantic", "--all")["results"]
    assert weak and all(h["weak"] for h in weak)
    assert min(h["semantic_score"] for h in weak) > MEANING_FLOOR  # the other scale
    for mode in ("semantic", "hybrid"):
        assert found(script_runner, "zebra unicorn", "--mode", mode)["results"] == []
    for mode in ("semantic", "hybrid"):
        doc = found(script_runner, "what vegetables do I cultivate", "--mode", mode)
        assert [h["memory_id"] for h in doc["results"]][:1] == [ids[HERBS]], mode
        assert doc["results"][0]["semantic_score"] > MEANING_FLOOR


# A chat between people (generic JSON lines, speakers as `name`) and an agent's session.
CHAT = [("ana", "Did you finally go to the pottery class on Saturday?"),
        ("ben", "Yes, I did!"),
        ("ana", "How was the teacher, and what did you make?")]
AGENT = [("user", "Can you fix the failing build on main?"),
         ("assistant", "Done: the import was missing, the build passes now.")]


def ingest(script_runner: ScriptRunner, tmp_path: Path, session: str,
           rows: list[dict[str, str]]) -> None:
    path = tmp_path / f"{session}-{len(rows)}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = mem(script_runner, "ingest", str(path), "--format", "jsonl", "--session",
                 session, "--quiet")
    assert result.returncode == 0, result.stderr


def chat_rows(turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"id": f"c{i}", "role": "user", "name": who, "content": text,
             "timestamp": f"2026-03-0{i + 1}T10:00:00Z"} for i, (who, text) in enumerate(turns)]


def stored(vault: Vault) -> dict[str, Any]:
    """Each stored vector by its record's text, of unit length (stored as int8)."""
    import numpy as np

    from memvault.index.vectors import stored_vectors

    v = Vault(vault.settings)
    by_id = {r.memory_id: r.content for r in recall.list_records(v, Filters(limit=100)).records}
    return {by_id[m]: vec / np.linalg.norm(vec)
            for m, vec in stored_vectors(v.vector_store(v.state().key_version))}


def test_a_persons_turn_borrows_the_meaning_of_the_people_beside_it(
        vault: Vault, tmp_path: Path, script_runner: ScriptRunner) -> None:
    """"Yes, I did!" means what the turn before it asked: a person's turn is embedded with
    the people's turns beside it; an agent's reply neither borrows nor lends, and a turn
    beside only an agent's keeps its own meaning."""
    import numpy as np

    from memvault.index.vectors import NEIGHBOUR_WEIGHT

    ingest(script_runner, tmp_path, "chat", chat_rows(CHAT))
    ingest(script_runner, tmp_path, "agent", [
        {"id": f"a{i}", "role": role, "content": text, "timestamp": f"2026-03-0{i + 1}T11:00:00Z"}
        for i, (role, text) in enumerate(AGENT)])
    assert mem(script_runner, "embed").returncode == 0
    vectors = stored(vault)
    own = dict(zip([t for _, t in CHAT + AGENT],
                   load().embed([t for _, t in CHAT + AGENT]), strict=True))
    asked, said, then = (t for _, t in CHAT)
    expected = own[said] + NEIGHBOUR_WEIGHT * (own[asked] + own[then])
    expected /= np.linalg.norm(expected)
    assert float(vectors[said] @ expected) > 0.999
    assert float(vectors[said] @ own[said]) < 0.9  # not its own meaning alone
    # The question beside the answer is nearer to it than to the short answer alone.
    assert float(vectors[said] @ own[asked]) > float(own[said] @ own[asked]) + 0.1
    for _, text in AGENT:  # an agent's session: every vector its own text's
        assert float(vectors[text] @ own[text]) > 0.999
    # And by meaning, the short answer is found by the question it answers.
    doc = found(script_runner, "pottery class on Saturday", "--mode", "semantic", "--all")
    assert said in [h["content"] for h in doc["results"]][:3]


def test_a_turn_said_later_remakes_the_vector_it_changes(
        vault: Vault, tmp_path: Path, script_runner: ScriptRunner) -> None:
    """A turn said after a person's changes what that turn's vector borrows: its vector is
    dropped and made again with the new turn's (the background embedder after an ingest
    or a pull), alike to one made from the whole session at once."""
    ingest(script_runner, tmp_path, "chat", chat_rows(CHAT[:2]))
    assert mem(script_runner, "embed").returncode == 0
    before = stored(vault)
    ingest(script_runner, tmp_path, "chat", chat_rows(CHAT))
    v = Vault(vault.settings)
    said = CHAT[1][1]
    assert said not in stored(v)  # stale: it now has a turn after it
    state = v.state()
    held = v.vector_store(state.key_version).has()
    new = [r.memory_id for r in recall.list_records(v, Filters(limit=100)).records
           if r.memory_id not in held]
    assert embed.embed_new(v, load(), [m for m in new if m])  # what ingest wrote
    after = stored(v)
    assert set(after) == {t for _, t in CHAT}
    assert float(after[said] @ before[said]) < 0.999  # it borrows the new turn too
    embed.embed_pending(Vault(vault.settings), load(), rebuild=True)
    whole = stored(vault)
    for text, vec in after.items():
        assert float(vec @ whole[text]) > 0.99999, text


def test_a_pull_makes_a_persons_turn_the_vector_the_first_machine_made(
        tmp_path: Path) -> None:
    """A second machine embeds what it pulls, in two pulls as the chat grew: each person's
    turn gets the vector the first machine made from the whole session."""
    from memvault.ops import sync
    from memvault.ops.ingest import ingest_text
    from memvault.storage.remote import FolderRemote
    from tests.test_sync import machine

    (tmp_path / "remote").mkdir()

    def remote() -> FolderRemote:
        return FolderRemote(str(tmp_path / "remote"), tmp_path / "remote")

    a = machine(tmp_path, "a")
    for n in (2, 3):
        ingest_text(a, "\n".join(json.dumps(r) for r in chat_rows(CHAT[:n])), None, "jsonl",
                    session="chat")
        sync.sync(a, remote())
        b = machine(tmp_path, "b")
        assert sync.sync(b, remote()).pulled == (2 if n == 2 else 1)
        embed.embed_new(b, load(), b.written)  # as the background embedder after a pull
    embed.embed_pending(machine(tmp_path, "a"), load())
    here, there = stored(machine(tmp_path, "a")), stored(machine(tmp_path, "b"))
    assert set(here) == set(there) == {t for _, t in CHAT}
    for text, vec in here.items():
        assert float(vec @ there[text]) > 0.99999, text
    said = CHAT[1][1]  # made again on the second pull, with the turn said after it
    assert float(there[said] @ load().embed([said])[0]) < 0.9
