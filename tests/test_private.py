"""`<private>...</private>`: what a user marks private is never stored, by any way in (add,
ingest of each agent's transcript, a hook's background ingest, the MCP server's store, a
summariser's input), and is found nowhere afterwards: not by search, not in an export,
not in the vault's bytes as the independent reader (tests/crash_oracle.py) decrypts them,
not in the index's terms, not in the audit log."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_console_scripts import ScriptRunner

from memvault.config import CompactionConfig, resolve
from memvault.ops import admin, compact, ingest
from memvault.text.private import PLACEHOLDER, hide
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line
from tests.crash_oracle import read_user, term_counts

MEM = str(Path(sys.executable).parent / "mem")
MASTER = bytes(range(7, 39))
ROOT = Path("default") / "alice"
SID = "7d2e4b1a-9c3f-4e8d-b6a5-1f0e2d3c4b5a"


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, vault_dir: Path) -> Vault:
    """A vault under a master key the test knows, so the oracle can decrypt it."""
    monkeypatch.setenv("MEM_MASTER_KEY", base64.b64encode(MASTER).decode())
    admin.init(resolve())
    return Vault(resolve())


def assert_nowhere(script_runner: ScriptRunner, vault_dir: Path, *words: str,
                   stored: bool = True) -> None:
    """Not found by search, not in an export, not in any file's bytes nor in any
    plaintext the oracle decrypts, not among the index's terms (`stored`: the test stored
    something, which the oracle must read, or it proves nothing)."""
    exported = mem(script_runner, "export", "--format", "json")
    if not stored and exported.returncode == 66:  # nothing reached the vault: no user
        assert "has no memory yet" in exported.stderr
        assert not (vault_dir / ROOT).exists()
        return
    assert exported.returncode == 0, exported.stderr
    found = read_user(vault_dir / ROOT, MASTER, "default", "alice")
    assert bool(found.texts) == stored, "what the oracle decrypted"
    for word in words:
        hits = mem(script_runner, "search", word, "--json", "--include-archive")
        assert hits.returncode == 0, hits.stderr
        assert word not in hits.stdout
        assert word not in exported.stdout
        assert not found.anywhere(word), word
        assert all(n == 0 for n in term_counts(vault_dir / ROOT, word, found.deks).values())


def stored(script_runner: ScriptRunner) -> list[str]:
    exported = mem(script_runner, "export", "--format", "json")
    if exported.returncode == 66 and "has no memory yet" in exported.stderr:
        return []  # no write ever reached the vault
    doc = json.loads(exported.stdout)
    return [r["content"] for c in doc["categories"].values() for r in c["records"]]


# --- the scanner ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("keep <private>hidden</private> keep", f"keep {PLACEHOLDER} keep"),
    ("a <PRIVATE>x</Private> b", f"a {PLACEHOLDER} b"),
    ("a < private class='x' >two\nlines\n</ private > b", f"a {PLACEHOLDER} b"),
    ("a <private>x <private>y</private> still</private> b", f"a {PLACEHOLDER} b"),
    ("a <private>open to the end\nand on", f"a {PLACEHOLDER}"),
    ("a <private>x</private> b <private>y", f"a {PLACEHOLDER} b {PLACEHOLDER}"),
    ("a &lt;private&gt;x&lt;/private&gt; b", f"a {PLACEHOLDER} b"),
    ("a &amp;lt;private&amp;gt;x&amp;lt;/private&amp;gt; b", f"a {PLACEHOLDER} b"),
    ("a &#60;private&#62;x&#x3c;/private&#x3E; b", f"a {PLACEHOLDER} b"),
    ("a \\u003cprivate\\u003ex\\u003c/private\\u003e b", f"a {PLACEHOLDER} b"),
    ("a \\\\u003cprivate\\\\u003ex\\\\u003c\\\\/private\\\\u003e b", f"a {PLACEHOLDER} b"),
    ("a %3Cprivate%3Ex%3C%2Fprivate%3E b", f"a {PLACEHOLDER} b"),
    ("a &lt;private&gt;x</private> b", f"a {PLACEHOLDER} b"),  # forms mix
    ("a <private/> b", "a <private/> b"),
    ("a </private> b", "a </private> b"),
    ("the <privateer> sailed", "the <privateer> sailed"),
    ("private matters", "private matters"),
])
def test_private_spans(text: str, expected: str) -> None:
    assert hide(text).text == expected


def test_only_private_is_blank_and_configured_tags_count_too() -> None:
    assert hide(" <private>all of it</private>\n").blank
    assert not hide("<private>x</private> and more").blank
    assert hide("<secret-note>x</secret-note> y", ("private", "secret-note")).text == \
        f"{PLACEHOLDER} y"
    assert hide("<secret-note>x</secret-note>").text == "<secret-note>x</secret-note>"


# --- every way in -----------------------------------------------------------------------------


def test_add_stores_the_rest_and_never_the_private_words(
        script_runner: ScriptRunner, keyed: Vault, vault_dir: Path) -> None:
    result = mem(script_runner, "add", "Deploys on Fridays. <private>Pin is quokka7731"
                 "\nand the safe is behind the painting</private> Ask first.", "--type", "fact")
    assert result.returncode == 0, result.stderr
    assert stored(script_runner) == [f"Deploys on Fridays. {PLACEHOLDER} Ask first."]
    assert_nowhere(script_runner, vault_dir, "quokka7731", "painting")
    # A secret inside the private span is never stored, so it refuses nothing.
    aws = "AKIA" + "QX7RM2ZTB5WN3KLP"
    result = mem(script_runner, "add", f"Uses eu-west-1 <private>{aws}</private>",
                 "--type", "fact")
    assert result.returncode == 0, result.stderr
    assert_nowhere(script_runner, vault_dir, aws)


def test_add_of_nothing_but_private_stores_nothing(script_runner: ScriptRunner,
                                                    keyed: Vault, vault_dir: Path) -> None:
    result = mem(script_runner, "add", "<private>numbat secret</private>", "--type", "fact")
    assert result.returncode == 2
    assert "private" in one_error_line(result.stderr)
    assert stored(script_runner) == []
    assert_nowhere(script_runner, vault_dir, "numbat", stored=False)


def claude_line(n: int, text: str) -> dict[str, Any]:
    return {"parentUuid": f"u-{n - 1}" if n else None, "isSidechain": False,
            "sessionId": SID, "type": "user", "uuid": f"u-{n}",
            "timestamp": f"2025-06-01T10:0{n}:00.000Z",
            "message": {"role": "user", "content": text}}


def codex_lines(texts: list[str]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [{
        "timestamp": "2025-10-29T00:59:38.317Z", "type": "session_meta",
        "payload": {"id": "0199a213-81c0-7800-8aa1-bbab2a035a99",
                    "timestamp": "2025-10-29T00:59:38.308Z", "cwd": "/home/alice/proj",
                    "originator": "codex_cli_rs", "cli_version": "0.46.0"}}]
    for n, text in enumerate(texts):
        lines.append({"timestamp": f"2025-10-29T01:0{n}:00.000Z", "type": "response_item",
                      "payload": {"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": text}]}})
    return lines


def gemini_lines(texts: list[str]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = [{
        "sessionId": "9c1e7a52-4d1b-4f0e-8a61-3b2f0c9d7e99", "projectHash": "c21e" * 16,
        "startTime": "2026-02-10T23:57:05.120Z", "lastUpdated": "2026-02-10T23:57:05.120Z",
        "kind": "main"}]
    for n, text in enumerate(texts):
        lines.append({"id": f"m-{n}", "timestamp": f"2026-02-10T23:5{n}:09.000Z",
                      "type": "user", "content": [{"text": text}]})
    return lines


def write(path: Path, lines: list[dict[str, Any]], escape: bool = False) -> Path:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if escape:  # as a writer that escapes markup in JSON does: <private> as \u003cprivate\u003e
        text = text.replace("<", "\\u003c").replace(">", "\\u003e")
    path.write_text(text)
    return path


TEXTS = [  # public words: wombat, dingo; private words: bilby, quoll, echidna
    "The wombat build is green. <private>My bank pin is bilby4417</private> Thanks!",
    "Deploy the dingo service.\n<PRIVATE>\nquoll notes: the landlord's number\n</PRIVATE>",
    "Nothing but <private>echidna",  # never closed: hidden to the end
]


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini", "json-escaped"])
def test_ingest_of_each_agents_transcript(script_runner: ScriptRunner, keyed: Vault,
                                          vault_dir: Path, tmp_path: Path, agent: str) -> None:
    texts = list(TEXTS)
    if agent == "gemini":  # Gemini CLI writes markup HTML-escaped
        texts = [t.replace("<", "&lt;").replace(">", "&gt;") for t in texts]
    if agent == "codex":
        path = write(tmp_path / "rollout.jsonl", codex_lines(texts))
    elif agent == "gemini":
        path = write(tmp_path / "session.jsonl", gemini_lines(texts))
    else:
        path = write(tmp_path / "session.jsonl",
                     [claude_line(n, t) for n, t in enumerate(texts)],
                     escape=agent == "json-escaped")
    result = mem(script_runner, "ingest", str(path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"rule": "private", "count": 3} in [
        {"rule": r["rule"], "count": r["count"]} for r in report["redactions"]]
    contents = stored(script_runner)
    assert any("wombat" in c for c in contents) and any("dingo" in c for c in contents)
    assert all("private" not in c.replace(PLACEHOLDER, "").lower() for c in contents)
    assert_nowhere(script_runner, vault_dir, "bilby4417", "quoll", "landlord", "echidna")
    again = mem(script_runner, "ingest", str(path), "--json")  # stored once, as admitted
    assert json.loads(again.stdout)["messages_added"] == 0


def test_a_hooks_background_ingest(script_runner: ScriptRunner, keyed: Vault,
                                   vault_dir: Path, tmp_path: Path) -> None:
    from tests.test_hooks import background_ingests, wait_background

    path = write(tmp_path / f"{SID}.jsonl", [claude_line(n, t) for n, t in enumerate(TEXTS)])
    payload = {"hook_event_name": "SessionEnd", "session_id": SID,
               "transcript_path": str(path), "reason": "exit", "cwd": str(tmp_path)}
    try:
        done = subprocess.run([MEM, "hook", "claude-code"], input=json.dumps(payload).encode(),
                              capture_output=True, timeout=30, check=False)
        assert done.returncode == 0 and not done.stdout
        wait_background(tmp_path)
    finally:
        assert not background_ingests(tmp_path)
    contents = stored(script_runner)
    assert any("wombat" in c for c in contents)
    assert_nowhere(script_runner, vault_dir, "bilby4417", "quoll", "landlord", "echidna")


def test_the_mcp_servers_store(script_runner: ScriptRunner, keyed: Vault,
                               vault_dir: Path) -> None:
    pytest.importorskip("mcp", reason="the optional extra memvault[mcp] is not installed")
    from tests.test_mcp import drive, error, ok

    async def script(call: Any) -> None:
        out = ok(await call("memory_store", {
            "type": "preference", "content": "Prefers tea <private>from the kiosk on "
            "Bandicoot Lane</private> in the morning"}))
        assert out["content"] == f"Prefers tea {PLACEHOLDER} in the morning" and out["masked"]
        text = error(await call("memory_store", {"type": "fact",
                                                 "content": "<private>potoroo</private>"}))
        assert "private" in text

    drive(keyed, script)
    assert_nowhere(script_runner, vault_dir, "Bandicoot", "kiosk", "potoroo")


def test_a_summariser_never_reads_private_words(keyed: Vault, tmp_path: Path,
                                                script_runner: ScriptRunner,
                                                vault_dir: Path) -> None:
    """A record stored before its tags were hidden (no admission: as an older mem did)
    is not passed to a summariser with them."""
    from memvault.model.records import NewMessage

    seen = tmp_path / "seen.txt"
    cmd = tmp_path / "summarise"
    cmd.write_text(f"#!{sys.executable}\nimport sys\ntext = sys.stdin.read()\n"
                   f"open({str(seen)!r}, 'w').write(text)\n"
                   "words = [w for w in text.split() if w.isalpha()]\n"
                   "print('Talked about ' + ' '.join(words[-60:]))\n")
    cmd.chmod(0o755)
    start = datetime.now(UTC) - timedelta(days=2)
    old = [NewMessage(f"turn {i} about the platypus <private>taipan {i}</private>", "user",
                      f"m{i}", (start + timedelta(minutes=i)).isoformat())
           for i in range(250)]
    ingest.add_messages(keyed, "legacy", old)  # no admission, as before this version
    out = compact.compact_user(keyed, CompactionConfig(summarizer=str(cmd)))
    assert out.summaries_added == 1
    assert "platypus" in seen.read_text() and "taipan" not in seen.read_text()
    summary = [c for c in stored(script_runner) if c.startswith("Summary of")]
    assert summary and "taipan" not in summary[0]


def test_configured_private_tags(script_runner: ScriptRunner, keyed: Vault,
                                 config_dir: Path, vault_dir: Path) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.yaml").write_text("redaction:\n  private_tags: [secret-note]\n")
    result = mem(script_runner, "add", "Likes <secret-note>kookaburra</secret-note> jazz",
                 "--type", "fact")
    assert result.returncode == 0, result.stderr
    assert stored(script_runner) == [f"Likes {PLACEHOLDER} jazz"]
    assert_nowhere(script_runner, vault_dir, "kookaburra")
    (config_dir / "config.yaml").write_text("redaction:\n  private_tags: private\n")
    result = mem(script_runner, "add", "x", "--type", "fact")
    assert result.returncode == 78
    assert "private_tags" in one_error_line(result.stderr)


def test_a_derived_message_id_says_nothing_of_the_private_words(
        script_runner: ScriptRunner, keyed: Vault, tmp_path: Path) -> None:
    """A message of a JSONL transcript without an id gets one derived from a keyed hash
    of its text. Two transcripts that differ only inside a private span give the same
    ids, so the id holds nothing to test a guess against (a PIN is ten thousand guesses)."""
    for pin in ("4417", "9031"):
        path = write(tmp_path / f"chat-{pin}.jsonl", [{
            "role": "user", "timestamp": "2025-06-01T10:00:00Z",
            "content": f"The door code is <private>{pin}</private>, thanks"}])
        result = mem(script_runner, "ingest", str(path), "--format", "jsonl", "--session",
                     "door", "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["messages_added"] == (1 if pin == "4417" else 0)
    doc = json.loads(mem(script_runner, "list", "--session", "door", "--json").stdout)
    assert [r["content"] for r in doc["records"]] == [f"The door code is {PLACEHOLDER}, thanks"]
