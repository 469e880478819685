"""`mem ingest` through the command line (SPEC §6, §7): every transcript format, re-ingest
and longer transcripts, --dry-run, redaction and withheld secrets, --strict, bad input, --scan;
and the proof that no secret ever reaches disk, the index, the log or the terminal."""

from __future__ import annotations

import json
import os
import random
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
import tantivy
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.ops.ingest import session_name
from memvault.text.transcripts import parse
from memvault.vault.vault import Vault
from tests.conftest import mem

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
REPORT_FIELDS = {"session_id", "messages_added", "messages_skipped", "withheld", "redactions"}


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def log_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "logs"
    monkeypatch.setenv("MEM_LOG_DIR", str(path))
    return path


def mem_json(script_runner: ScriptRunner, *args: str, stdin: str = "") -> Any:
    result = mem(script_runner, *args, "--json", stdin=stdin)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def files_of(directory: Path) -> dict[str, bytes]:
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def session_records(script_runner: ScriptRunner, session: str,
                    user: str = "alice") -> list[dict[str, Any]]:
    doc = mem_json(script_runner, "list", "--session", session, "--type", "message",
                   "--limit", "10000", "--user", user)
    return list(doc["records"])


def search_hits(script_runner: ScriptRunner, word: str, user: str = "alice",
                ) -> list[dict[str, Any]]:
    doc = mem_json(script_runner, "search", word, "--limit", "50", "--user", user)
    return list(doc["results"])


def jsonl(*rows: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


# --- 1. each format, re-ingest, longer transcripts ------------------------------------------


CLAUDE_SID = "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f00"
CODEX_SID = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def _grow_claude(text: str, new: tuple[str, str]) -> str:
    base = {"isSidechain": False, "userType": "external", "cwd": "/home/alice/proj",
            "sessionId": CLAUDE_SID, "version": "1.0.98", "gitBranch": "main"}
    return text + jsonl(
        {**base, "parentUuid": "a-010", "type": "user", "uuid": "u-100",
         "timestamp": "2025-06-01T10:40:00.000Z",
         "message": {"role": "user", "content": new[0]}},
        {**base, "parentUuid": "u-100", "type": "assistant", "uuid": "a-100",
         "timestamp": "2025-06-01T10:40:05.000Z",
         "message": {"id": "msg_new100", "type": "message", "role": "assistant",
                     "model": "claude-sonnet-4-20250514",
                     "content": [{"type": "text", "text": new[1]}]}})


def _grow_codex(text: str, new: tuple[str, str]) -> str:
    def item(role: str, kind: str, said: str, minute: int) -> dict[str, Any]:
        return {"timestamp": f"2025-10-29T02:{minute:02d}:00.000Z", "type": "response_item",
                "payload": {"type": "message", "role": role,
                            "content": [{"type": kind, "text": said}]}}
    return text + jsonl(item("user", "input_text", new[0], 1),
                        item("assistant", "output_text", new[1], 2))


def _grow_codex_legacy(text: str, new: tuple[str, str]) -> str:
    return text + jsonl(
        {"type": "message", "id": None, "role": "user",
         "content": [{"type": "input_text", "text": new[0]}]},
        {"type": "message", "id": "msg_9999", "role": "assistant",
         "content": [{"type": "output_text", "text": new[1]}]})


def _grow_gemini_log(text: str, new: tuple[str, str]) -> str:
    return text + jsonl(
        {"id": "m-20", "timestamp": "2026-02-11T00:10:00.000Z", "type": "user",
         "content": [{"text": new[0]}]},
        {"id": "m-21", "timestamp": "2026-02-11T00:10:05.000Z", "type": "gemini",
         "content": new[1], "model": "gemini-2.5-pro"})


def _grow_gemini_legacy(text: str, new: tuple[str, str]) -> str:
    doc = json.loads(text)
    doc["messages"] += [
        {"id": "11111111-0000-4000-8000-000000000001", "timestamp": "2025-12-03T06:40:00.000Z",
         "type": "user", "content": new[0]},
        {"id": "11111111-0000-4000-8000-000000000002", "timestamp": "2025-12-03T06:40:09.000Z",
         "type": "gemini", "content": new[1], "model": "gemini-2.5-pro"}]
    return json.dumps(doc, indent=2)


def _grow_gemini_checkpoint(text: str, new: tuple[str, str]) -> str:
    doc = json.loads(text)
    doc["history"] += [{"role": "user", "parts": [{"text": new[0]}]},
                       {"role": "model", "parts": [{"text": new[1]}]}]
    return json.dumps(doc, indent=2)


def _grow_jsonl(text: str, new: tuple[str, str]) -> str:
    return text + jsonl({"id": "m9", "role": "user", "content": new[0]},
                        {"role": "assistant", "content": new[1]})


# fixture, explicit format, session id, a word only that transcript's messages hold, grow()
FORMATS = [
    ("claude-code.jsonl", "claude-code", CLAUDE_SID, "regression", _grow_claude),
    ("codex-rollout.jsonl", "codex", CODEX_SID, "checkout", _grow_codex),
    ("codex-legacy.jsonl", "codex", "5973b6c0-94b8-487b-a530-2aeb6098ae0e", "python",
     _grow_codex_legacy),
    ("gemini-session.jsonl", "gemini", "9c1e7a52-4d1b-4f0e-8a61-3b2f0c9d7e15", "rollback",
     _grow_gemini_log),
    ("gemini-legacy.json", "gemini", "477739d0-1b78-4aa7-9116-02d08c952344", "engines",
     _grow_gemini_legacy),
    ("gemini-checkpoint.json", "gemini", "gemini-checkpoint", "rename",
     _grow_gemini_checkpoint),
    ("jsonl-good.jsonl", "jsonl", "jsonl-good", "staging", _grow_jsonl),
]
NEW_WORDS = ("quokkazephyr", "marmaladefjord")


@pytest.mark.parametrize(("name", "fmt", "session", "word", "grow"), FORMATS,
                         ids=[f[0] for f in FORMATS])
def test_each_format_ingests_searchably_and_only_once(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path, name: str, fmt: str,
        session: str, word: str, grow: Any) -> None:
    source = FIXTURES / name
    expected = len(parse(source.read_text()).messages)
    assert expected >= 4

    first = mem_json(script_runner, "ingest", str(source), "--format", fmt)
    assert REPORT_FIELDS <= set(first)
    assert first["session_id"] == session
    assert (first["messages_added"], first["messages_skipped"]) == (expected, 0)
    assert first["withheld"] == 0 and first["redactions"] == []
    hits = [h for h in search_hits(script_runner, word) if h["type"] == "message"]
    assert hits and all(h["session_id"] == session for h in hits)
    assert any(word in h["content"].lower() for h in hits)

    # Again, detected rather than named: the same messages, so nothing new.
    again = mem_json(script_runner, "ingest", str(source), "--format", "auto")
    assert again["session_id"] == session
    assert (again["messages_added"], again["messages_skipped"]) == (0, expected)

    # A longer version of the same transcript (same file name: some formats name the
    # session after it) adds only its new messages.
    longer = tmp_path / "longer" / name
    longer.parent.mkdir()
    longer.write_text(grow(source.read_text(), (f"Please look at {NEW_WORDS[0]} next",
                                                f"Done with {NEW_WORDS[1]} now")))
    grown = mem_json(script_runner, "ingest", str(longer))
    assert grown["session_id"] == session
    assert (grown["messages_added"], grown["messages_skipped"]) == (2, expected)
    for new_word in NEW_WORDS:
        hits = search_hits(script_runner, new_word)
        assert {h["session_id"] for h in hits} == {session}
        assert sum(new_word in h["content"] for h in hits) == 1
    stored = session_records(script_runner, session)
    assert len(stored) == expected + 2
    assert len({r["message_id"] for r in stored}) == len(stored)


@pytest.mark.script_launch_mode("subprocess")  # the stdout/stderr split
def test_human_output_and_quiet(script_runner: ScriptRunner, vault: Vault) -> None:
    result = mem(script_runner, "ingest", str(FIXTURES / "jsonl-good.jsonl"))
    assert result.returncode == 0
    assert result.stdout == ""  # the report is a message: stderr
    assert "added 4 messages" in result.stderr
    one = mem(script_runner, "ingest", "-", "--session", "single",
              stdin=json.dumps({"role": "user", "content": "one message alone"}) + "\n")
    assert "added 1 message," in one.stderr
    quiet = mem(script_runner, "ingest", str(FIXTURES / "codex-legacy.jsonl"), "--quiet")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")


# --- secrets and personal data ------------------------------------------------------------


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def fake_secrets(seed: int = 7) -> dict[str, str]:
    """Fake, random, never real: one of each critical kind."""
    rng = random.Random(seed)
    alnum = string.ascii_letters + string.digits
    b64 = alnum + "+/"
    pem_lines = [_pick(rng, b64, 64) for _ in range(5)] + [_pick(rng, b64, 20) + "=="]
    return {
        "pem": "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(pem_lines)
               + "\n-----END RSA PRIVATE KEY-----",
        "aws": "AKIA" + _pick(rng, string.ascii_uppercase + "234567", 16),
        "auth": "Authorization: Bearer " + _pick(rng, alnum, 40),
        "github": "ghp_" + _pick(rng, alnum, 36),
        "anthropic": "sk-ant-api03-" + _pick(rng, alnum + "-_", 93) + "AA",
    }


def secret_needles(secrets: dict[str, str]) -> list[str]:
    """Each secret, its JSON-escaped form, and its distinctive parts (a partial leak counts)."""
    needles = []
    for value in secrets.values():
        needles += [value, json.dumps(value)[1:-1]]
        needles += [part for part in value.replace(":", " ").split() if len(part) >= 16]
    return sorted(set(needles))


def secret_tokens(vault: Vault, secrets: dict[str, str]) -> list[str]:
    """The index tokens of the secrets' random parts (not words such as 'private')."""
    analyzer = vault.search_index(vault.state().key_version).analyzer
    return sorted({t for v in secrets.values() for t in analyzer.tokens(v) if len(t) >= 8})


def leaks(directories: list[Path], needles: list[str]) -> list[str]:
    found = []
    for directory in directories:
        for rel, data in files_of(directory).items():
            for needle in needles:
                if needle.encode() in data:
                    found.append(f"{directory.name}/{rel} holds {needle[:12]}…")
    return found


BENIGN = "Mail ana.silva@example.org or call +1 415 555 0132 about the zebrafish tank"
CONTROL_WORD = "Zr8kQwPm3vTxLq"  # random-looking but no secret: must be indexed (as a hash)


def secret_transcript(secrets: dict[str, str]) -> str:
    rows = [{"id": f"s-{kind}", "role": "user", "content": f"here you go:\n{value}\nthanks"}
            for kind, value in secrets.items()]
    return jsonl(
        {"id": "b1", "role": "user", "content": BENIGN},
        *rows,
        {"id": "b2", "role": "assistant", "content": f"Noted the {CONTROL_WORD} marker."},
    )


def claude_secret_transcript(secrets: dict[str, str]) -> str:
    """The same secrets where an agent's file holds them: tool input, tool output, prose."""
    base = {"isSidechain": False, "sessionId": "c1a0de00-0000-4000-8000-00000000beef",
            "timestamp": "2025-06-01T10:00:00Z"}
    lines = [{**base, "parentUuid": None, "type": "user", "uuid": "u1",
              "message": {"role": "user", "content": "Deploy with the usual credentials"}}]
    parent = "u1"
    for i, (kind, value) in enumerate(secrets.items()):
        lines.append({**base, "parentUuid": parent, "type": "assistant", "uuid": f"a{i}",
                      "message": {"id": f"msg_{i}", "role": "assistant", "content": [
                          {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                           "input": {"command": f"echo '{value}' > creds-{kind}"}}]}})
        lines.append({**base, "parentUuid": f"a{i}", "type": "user", "uuid": f"r{i}",
                      "message": {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": f"toolu_{i}",
                           "content": f"wrote {value}"}]}})
        parent = f"r{i}"
    lines.append({**base, "parentUuid": parent, "type": "user", "uuid": "u2",
                  "message": {"role": "user", "content": BENIGN}})
    return jsonl(*lines)


def test_secrets_are_withheld_and_personal_data_redacted(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    secrets = fake_secrets()
    path = tmp_path / "chat.jsonl"
    path.write_text(secret_transcript(secrets))
    result = mem(script_runner, "ingest", str(path), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["messages_added"], doc["withheld"]) == (2, len(secrets))
    counts = {r["rule"]: r["count"] for r in doc["redactions"]}
    actions = {r["rule"]: r["action"] for r in doc["redactions"]}
    assert set(doc["redactions"][0]) == {"rule", "count", "action"}
    for rule in ("private-key", "aws-access-key", "authorization-header", "github-token",
                 "anthropic-api-key", "email", "phone"):
        assert counts.get(rule, 0) >= 1, (rule, counts)
    # A secret's message was withheld, not stored with a mask: the report says which.
    assert {actions[r] for r in ("private-key", "aws-access-key", "github-token")} == \
        {"withheld"}
    assert actions["email"] == actions["phone"] == "redacted"
    again = tmp_path / "again.jsonl"
    again.write_text(secret_transcript(secrets))
    human = mem(script_runner, "ingest", str(again), "--dry-run")
    assert "withheld 1 × aws-access-key" in human.stderr
    assert "redacted 1 × email" in human.stderr
    stored = {r["message_id"]: r["content"] for r in session_records(script_runner, "chat")}
    assert set(stored) == {"b1", "b2"}
    assert stored["b1"] == ("Mail <REDACTED:EMAIL> or call <REDACTED:PHONE> about the "
                            "zebrafish tank")
    hits = search_hits(script_runner, "zebrafish")
    assert [h["message_id"] for h in hits if "zebrafish" in h["content"]] == ["b1"]
    assert search_hits(script_runner, "ana.silva@example.org") == []
    for output in (result.stdout, result.stderr):
        assert [n for n in secret_needles(secrets) if n in output] == []


def test_strict_refuses_the_whole_session(script_runner: ScriptRunner, vault: Vault,
                                          vault_dir: Path, tmp_path: Path) -> None:
    mem_json(script_runner, "add", "Prefers tea", "--type", "preference")
    path = tmp_path / "chat.jsonl"
    path.write_text(secret_transcript(fake_secrets()))
    before = files_of(vault_dir)
    for user in ("alice", "carol"):  # an existing user, and one never written
        result = mem(script_runner, "ingest", str(path), "--strict", "--user", user)
        assert result.returncode == 77
        assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
        assert "--strict" in result.stderr
        assert [n for n in secret_needles(fake_secrets()) if n in result.stderr] == []
    assert files_of(vault_dir) == before
    assert not (vault_dir / "default" / "carol").exists()


def test_dry_run_shows_records_and_report_and_writes_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, tmp_path: Path) -> None:
    mem_json(script_runner, "add", "Prefers tea", "--type", "preference")
    secrets = fake_secrets()
    path = tmp_path / "chat.jsonl"
    path.write_text(secret_transcript(secrets))
    before = files_of(vault_dir)
    for user in ("alice", "carol"):
        doc = mem_json(script_runner, "ingest", str(path), "--dry-run", "--user", user)
        assert doc["dry_run"] is True and doc["messages_added"] == 0
        assert doc["withheld"] == len(secrets)
        assert [m["message_id"] for m in doc["messages"]] == ["b1", "b2"]
        assert "<REDACTED:EMAIL>" in doc["messages"][0]["content"]
        assert {"email", "phone", "private-key"} <= {r["rule"] for r in doc["redactions"]}
        human = mem(script_runner, "ingest", str(path), "--dry-run", "--user", user)
        assert human.returncode == 0
        assert "zebrafish" in human.stdout and "<REDACTED:PHONE>" in human.stdout
        assert "would add 2 messages" in human.stderr and "email" in human.stderr
        for output in (json.dumps(doc), human.stdout, human.stderr):
            assert [n for n in secret_needles(secrets) if n in output] == []
    assert files_of(vault_dir) == before
    assert not (vault_dir / "default" / "carol").exists()
    assert search_hits(script_runner, "zebrafish") == []


def test_add_refuses_a_secret_in_one_line_without_echoing_it(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    for kind, value in fake_secrets(seed=3).items():
        result = mem(script_runner, "add", f"remember {value}", "--type", "fact")
        assert result.returncode == 77, kind
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1, kind
        assert [n for n in secret_needles({kind: value}) if n in result.stderr] == []
        via_stdin = mem(script_runner, "add", "-", "--type", "fact", stdin=value)
        assert via_stdin.returncode == 77, kind
    assert not (vault_dir / "default" / "alice").exists()  # nothing stored, not even a user


def test_a_credential_assignment_is_stored_with_its_value_masked(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """A password written as an assignment is masked, not refused (SPEC §7: only the
    critical kinds refuse): `mem add` stores the rest, the key name included, and an
    ingest stores the message masked and reports the rule as redacted."""
    value = "Xk9#mQ2$vL8pZr"
    doc = mem_json(script_runner, "add", f'The staging DB_PASSWORD="{value}" rotates monthly',
                   "--type", "fact")
    assert doc["deduplicated"] is False
    shown = mem_json(script_runner, "show", doc["memory_id"])
    assert shown["content"] == 'The staging DB_PASSWORD="<REDACTED:SECRET>" rotates monthly'
    env = "APP_ENV=prod\nPOSTGRES_PASSWORD=Tr0ub4dor-and-3\nPORT=8080"
    path = tmp_path / "env.jsonl"
    path.write_text(jsonl({"role": "user", "content": f"my .env is:\n{env}"},
                          {"role": "assistant", "content": "the api_key: abcd-1234-efgh-5678 "
                           "works; password=${DB_PASS} stays a variable"}))
    report = mem_json(script_runner, "ingest", str(path), "--session", "env")
    assert (report["messages_added"], report["withheld"]) == (2, 0)
    assert {"rule": "credential-assignment", "count": 2, "action": "redacted"} in \
        report["redactions"]
    contents = sorted(r["content"] for r in session_records(script_runner, "env"))
    assert contents[0] == ("my .env is:\nAPP_ENV=prod\nPOSTGRES_PASSWORD=<REDACTED:SECRET>\n"
                           "PORT=8080")
    assert "password=${DB_PASS}" in contents[1] and "abcd-1234" not in contents[1]
    assert "the api_key: <REDACTED:SECRET> works" in contents[1]
    for word in ("Tr0ub4dor", value):
        assert search_hits(script_runner, word) == []


def test_a_secret_cut_by_a_shortened_tool_line_is_not_stored_in_part(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """Tool input and output are shortened (200 / 500 characters) before redaction sees
    them: a token cut in two no longer matches its rule, so its prefix must not stay."""
    secrets = fake_secrets(seed=5)
    base = {"isSidechain": False, "sessionId": "cut-1", "timestamp": "2025-06-01T10:00:00Z"}
    lines = [{**base, "parentUuid": None, "type": "user", "uuid": "u1",
              "message": {"role": "user", "content": "go"}}]
    parent = "u1"
    for i, pad in enumerate((170, 180, 190)):  # the cut lands inside the token
        lines.append({**base, "parentUuid": parent, "type": "assistant", "uuid": f"a{i}",
                      "message": {"id": f"msg_{i}", "role": "assistant", "content": [
                          {"type": "tool_use", "id": f"t{i}", "name": "Bash",
                           "input": {"command": "x" * pad + " " + secrets["github"]}}]}})
        lines.append({**base, "parentUuid": f"a{i}", "type": "user", "uuid": f"r{i}",
                      "message": {"role": "user", "content": [
                          {"type": "tool_result", "tool_use_id": f"t{i}",
                           "content": "y" * (pad + 310) + " " + secrets["anthropic"]}]}})
        parent = f"r{i}"
    path = tmp_path / "cut.jsonl"
    path.write_text(jsonl(*lines))
    doc = mem_json(script_runner, "ingest", str(path))
    assert doc["messages_added"] >= 1
    stored = " ".join(r["content"] for r in session_records(script_runner, "cut-1"))
    assert "xxxxxxxx" in stored and "yyyyyyyy" in stored  # the tool lines are there...
    for value in (secrets["github"], secrets["anthropic"]):  # ...but no part of a secret
        assert value[:8] not in stored


# --- 2. no secret ever reaches disk ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.script_launch_mode("subprocess")  # what the real process prints
def test_no_secret_reaches_disk_the_index_or_the_terminal(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path, config_dir: Path,
        log_dir: Path, tmp_path: Path) -> None:
    secrets = fake_secrets(seed=11)
    needles = secret_needles(secrets)
    inbox = tmp_path / "in"
    inbox.mkdir()
    plain = inbox / "plain.jsonl"
    plain.write_text(secret_transcript(secrets))
    claude = inbox / "claude.jsonl"
    claude.write_text(claude_secret_transcript(secrets))
    # The transcripts do hold them (JSON-escaped): the check can find them.
    assert len(leaks([inbox], [json.dumps(secrets["pem"])[1:-1]])) == 2
    assert len(leaks([inbox], needles)) > 2 * len(secrets)

    runs = [
        mem(script_runner, "ingest", str(plain), "--json"),
        mem(script_runner, "ingest", str(claude), "--json"),
        mem(script_runner, "ingest", str(claude), "--format", "claude-code"),
        mem(script_runner, "ingest", str(plain), "--dry-run"),
        mem(script_runner, "ingest", str(plain), "--dry-run", "--json"),
        mem(script_runner, "ingest", str(plain), "--strict", "--session", "other"),
        mem(script_runner, "ingest", "-", "--session", "piped", stdin=plain.read_text()),
        mem(script_runner, "add", secrets["auth"], "--type", "instruction"),
        mem(script_runner, "pref", "set", "token", secrets["github"]),
        mem(script_runner, "ingest", "--scan", str(inbox), "--json"),
    ]
    assert [r.returncode for r in runs] == [0, 0, 0, 0, 0, 77, 0, 77, 77, 0]
    claude_doc = json.loads(runs[1].stdout)
    assert claude_doc["withheld"] == 2 * len(secrets) and claude_doc["messages_added"] == 2
    for r in runs:
        assert [n for n in needles if n in r.stdout + r.stderr] == []
    # Something was stored, and it is searchable.
    assert search_hits(script_runner, "zebrafish")
    assert mem_json(script_runner, "search", "tank", "--session", "piped")["results"]

    assert leaks([vault_dir, config_dir, log_dir], needles) == []
    assert leaks([vault_dir, config_dir, log_dir], ["ana.silva@example.org"]) == []

    # The index holds keyed hashes: neither the secrets' tokens nor their hashes are there,
    # while a random-looking benign word's hash is (the lookup works).
    v = Vault(resolve())
    analyzer = v.search_index(v.state().key_version).analyzer
    searcher = tantivy.Index.open(str(v.layout.path("index"))).searcher()
    terms = {field: {t for t, _ in searcher.terms_with_prefix(field, "")}
             for field in ("body", "ctx")}
    tokens = secret_tokens(v, secrets)
    assert len(tokens) >= 8
    for token in tokens:
        for field in ("body", "ctx"):
            assert token not in terms[field]
            assert analyzer.hash(token) not in terms[field], (field, token[:6])
    (control,) = analyzer.tokens(CONTROL_WORD)
    assert analyzer.hash(control) in terms["body"]
    assert analyzer.hash(analyzer.tokens("zebrafish")[0]) in terms["body"]


# --- bad input ------------------------------------------------------------------------------


def test_malformed_jsonl_names_the_line_and_writes_nothing(
        script_runner: ScriptRunner, vault: Vault, vault_dir: Path) -> None:
    mem_json(script_runner, "add", "Prefers tea", "--type", "preference")
    before = files_of(vault_dir)
    for name, line in [("jsonl-bad-json.jsonl", "line 3"), ("jsonl-bad-role.jsonl", "line 2"),
                       ("jsonl-missing-content.jsonl", "line 3")]:
        for fmt in ("jsonl", "auto"):
            result = mem(script_runner, "ingest", str(FIXTURES / name), "--format", fmt)
            assert result.returncode == 65, (name, fmt)
            assert line in result.stderr and result.stdout == ""
            assert len(result.stderr.strip().splitlines()) == 1
    assert files_of(vault_dir) == before


def test_missing_file_and_stdin_without_a_session(script_runner: ScriptRunner, vault: Vault,
                                                  vault_dir: Path, tmp_path: Path) -> None:
    missing = mem(script_runner, "ingest", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 66 and "nope.jsonl" in missing.stderr
    good = (FIXTURES / "jsonl-good.jsonl").read_text()
    nameless = mem(script_runner, "ingest", "-", stdin=good)
    assert nameless.returncode == 2 and "--session" in nameless.stderr
    assert nameless.stdout == ""
    assert not (vault_dir / "default" / "alice").exists()
    # With --session it works, and a transcript that names its session needs none.
    named = mem_json(script_runner, "ingest", "-", "--session", "piped", stdin=good)
    assert (named["session_id"], named["messages_added"]) == ("piped", 4)
    own = mem_json(script_runner, "ingest", "-",
                     stdin=(FIXTURES / "claude-code.jsonl").read_text())
    assert own["session_id"] == CLAUDE_SID and own["messages_added"] == 13


# --- --scan --------------------------------------------------------------------------------


def test_scan_ingests_a_tree_once_then_only_what_grew(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    root = tmp_path / "transcripts"
    layout = {"claude/projects/-home-alice-proj/5f0c.jsonl": "claude-code.jsonl",
              "codex/sessions/2025/10/29/rollout-1.jsonl": "codex-rollout.jsonl",
              "gemini/tmp/abc/chats/session-1.jsonl": "gemini-session.jsonl",
              "gemini/tmp/abc/checkpoint-rename.json": "gemini-checkpoint.json",
              "mine/notes.jsonl": "jsonl-good.jsonl"}
    expected = 0
    for rel, fixture in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, root / rel)
        expected += len(parse((FIXTURES / fixture).read_text()).messages)
    (root / "mine" / "README.md").write_text("not scanned\n")

    # Another program's files beside the transcripts: each reported, none fails the run.
    (root / "mine" / "package.json").write_text('{"name": "not-a-transcript"}\n')
    (root / "gemini" / "tmp" / "abc" / "logs.json").write_text(json.dumps(
        [{"sessionId": "s", "messageId": 0, "type": "user", "message": "hi",
          "timestamp": "2026-01-01T00:00:00Z"}]))
    first = mem(script_runner, "ingest", "--scan", str(root), "--json")
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert (doc["files_scanned"], doc["files_ingested"]) == (7, 5)
    assert doc["messages_added"] == expected
    assert doc["errors"] == []
    assert sorted(Path(e["file"]).name for e in doc["passed"]) == ["logs.json", "package.json"]
    assert "package.json" in first.stderr and "skipped" in first.stderr
    for word in ("regression", "checkout", "rollback", "rename", "staging"):
        assert search_hits(script_runner, word), word

    second = mem_json(script_runner, "ingest", "--scan", str(root))
    assert (second["files_ingested"], second["messages_added"], second["errors"]) == (0, 0, [])
    assert second["files_unchanged"] == 7
    said = mem(script_runner, "ingest", "--scan", str(root))
    assert said.stderr == "nothing new: 7 files unchanged since the last scan\n"

    grown = root / "mine" / "notes.jsonl"
    with grown.open("a") as fh:
        fh.write(json.dumps({"id": "m77", "role": "user", "content": "quokkazephyr again"})
                 + "\n")
    third = mem(script_runner, "ingest", "--scan", str(root))
    assert third.stderr.startswith("1 of 7 transcripts ingested (6 unchanged since the "
                                   "last scan), 1 message added")
    hits = search_hits(script_runner, "quokkazephyr")
    # Named after its path under the scanned folder ("mine/notes" made a valid name).
    assert [h["session_id"] for h in hits if "quokkazephyr" in h["content"]] == \
        [session_name("mine/notes")]
    # Touching a file without new messages re-reads it but adds nothing.
    os.utime(grown, ns=(1, 1))
    fourth = mem_json(script_runner, "ingest", "--scan", str(root))
    assert (fourth["files_ingested"], fourth["messages_added"]) == (1, 0)

    missing = mem(script_runner, "ingest", "--scan", str(tmp_path / "nowhere"))
    assert missing.returncode == 66


def test_scan_fails_for_a_corrupt_transcript_after_storing_the_rest(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    root = tmp_path / "transcripts"
    root.mkdir()
    (root / "good.jsonl").write_text(jsonl({"role": "user", "content": "the heron returned"}))
    (root / "broken.jsonl").write_text(jsonl({"role": "user", "content": "first line"})
                                       + "{not json\n")
    result = mem(script_runner, "ingest", "--scan", str(root), "--json")
    assert result.returncode == 65
    doc = json.loads(result.stdout)
    assert doc["files_ingested"] == 1 and doc["messages_added"] == 1
    assert [Path(e["file"]).name for e in doc["errors"]] == ["broken.jsonl"]
    assert "broken.jsonl" in result.stderr and "line 2" in result.stderr
    assert search_hits(script_runner, "heron")


def test_scan_of_real_agent_folders_stores_subagents_with_their_session(
        script_runner: ScriptRunner, vault: Vault) -> None:
    real = Path(__file__).resolve().parents[2] / "shared" / "bench-data" / "transcripts"
    if not real.is_dir():
        pytest.skip("the shared bench data is not here")
    result = mem(script_runner, "ingest", "--scan", str(real), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    # Every transcript went in; only Claude Code's compaction agent was passed over.
    assert [Path(e["file"]).name for e in doc["passed"]] == ["agent-acompact-fffbd0.jsonl"]
    assert doc["files_ingested"] == doc["files_scanned"] - 1
    parent = "258c7280-ae70-4798-800f-63464d01a85d"
    records = session_records(script_runner, parent)
    channels = {r["channel"] for r in records}
    assert "subagent:a881341" in channels and None in channels


def test_scan_passes_by_a_mem_vault_in_the_folder(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """A folder scanned may hold a mem vault (this one, another user's, a project's own):
    its files are mem's own, sealed, never a transcript, and no warning is said of them.
    A vault.json that describes no mem vault (another tool's) is no reason to pass by."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.jsonl").write_text(jsonl({"id": "m1", "role": "user",
                                                "content": "the heron returned"}))
    other = project / "team-vault"  # another vault, with what it stores
    assert mem(script_runner, "init", MEM_VAULT=str(other)).returncode == 0
    assert mem(script_runner, "add", "the kestrel hovered", MEM_VAULT=str(other)
               ).returncode == 0
    assert mem(script_runner, "add", "the osprey dived").returncode == 0  # this vault's
    tool = tmp_path / "tool"  # another tool's vault.json, beside its transcript
    tool.mkdir()
    (tool / "vault.json").write_text('{"storage": {"file": {"path": "/srv"}}}\n')
    (tool / "log.jsonl").write_text(jsonl({"id": "m2", "role": "user",
                                           "content": "the wren sang"}))
    result = mem(script_runner, "ingest", "--scan", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["files_scanned"], doc["files_ingested"], doc["messages_added"]) == (3, 2, 2)
    # Only the other tool's file is said to be no transcript (as any such file is).
    assert [Path(p["file"]) for p in doc["passed"]] == [tool / "vault.json"]
    assert result.stderr.count("warning") == 1
    assert search_hits(script_runner, "heron") and search_hits(script_runner, "wren")
    # The vault scanned itself: nothing under it.
    inside = mem(script_runner, "ingest", "--scan", str(other), "--json")
    assert inside.returncode == 0, inside.stderr
    assert json.loads(inside.stdout)["files_scanned"] == 0
    assert "warning" not in inside.stderr


def test_scan_keeps_same_named_transcripts_of_different_folders_apart(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    for project, word in (("alpha", "postgres"), ("beta", "mysql")):
        path = tmp_path / "projects" / project / "notes.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text(jsonl({"id": "m1", "role": "user", "content": f"we use {word}"}))
    doc = mem_json(script_runner, "ingest", "--scan", str(tmp_path / "projects"))
    assert doc["messages_added"] == 2
    assert search_hits(script_runner, "mysql")
