"""Terminal escapes never reach the terminal: cleaned on the way in (the admission policy,
text.sanitize.clean), shown as visible text on the way out (for_terminal, the CLI and the
Markdown export), escaped in JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.crypto.envelope import content_hash
from memvault.errors import DataError, NotFound, UsageError
from memvault.model.location import session_file
from memvault.model.records import PREFERENCES, NewMessage
from memvault.ops import ingest, portability, prefs, recall, remember
from memvault.text.sanitize import clean, for_terminal, has_control, json_for_terminal
from memvault.vault.vault import Vault
from tests.conftest import mem

# Anything a terminal could act on: C0 but tab and newline, DEL, C1.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# Retitle (OSC 0), write the clipboard (OSC 52, ST-terminated), clear the screen, colour,
# a C1 CSI, BEL and a few more C0 controls: what the issues reported, all at once.
HOSTILE = ("\x1b]0;PWNED\x07\x1b]52;c;cHduZWQ=\x1b\\\x1b[2J\x1b[31mred\x1b[0m "
           "\x9b1mpanda\x07 walrus\x01\x08\x7f")
CLEANED = "red panda walrus"


def inert(text: str) -> bool:
    return RAW_CONTROL.search(text) is None


# --- the inbound sanitiser ---------------------------------------------------------------


@pytest.mark.parametrize(("raw", "expected"), [
    (HOSTILE, CLEANED),
    ("\x1b]0;title\x07after", "after"),                      # OSC, BEL-terminated
    ("\x1b]52;c;SGVsbG8=\x1b\\after", "after"),              # OSC 52, ST-terminated
    ("\x9d52;c;SGVsbG8=\x9cafter", "after"),                 # the same in C1 form
    ("a\x1b[2Jb\x1b[1;31mc\x1b[?25ld", "abcd"),              # CSI, with private params
    ("a\x9b2Jb", "ab"),                                       # C1 CSI
    ("\x1bP1$r0m\x1b\\x", "x"),                               # DCS
    ("\x1bX sos \x1b\\\x1b^ pm \x1b\\\x1b_Gf=1;AAAA\x1b\\x", "x"),  # SOS, PM, APC
    ("\x90dcs\x9c\x98sos\x9c\x9epm\x9c\x9fapc\x9cx", "x"),   # their C1 forms
    ("a\x1bcb\x1b(Bc\x1b7d\x1b8e\x1bMf", "abcdef"),          # two-character escapes
    ("\x1b]8;;https://e.com\x1b\\link\x1b]8;;\x1b\\ text", "link text"),  # hyperlink
    ("\x1b]0;title\x1b[31mred", "red"),                      # ESC ends a string, starts anew
    ("\x1b]0;cancelled\x18after", "after"),                  # CAN cancels a string
    ("keep\x1b]0;never terminated, all swallowed", "keep"),
    ("cut\x1b[31", "cut"),                                    # CSI cut short by the end
    ("x\x1b[1é", "xé"),                                       # ... or by a character
    ("ends with ESC\x1b", "ends with ESC"),
    ("a\x00b\x07c\x08d\x7fe\x1ff\x80g\x9ch", "abcdefgh"),   # other C0, DEL, C1
    ("l1\r\nl2\rl3\x0bl4\x0cl5\x85l6\tt", "l1\nl2\nl3\nl4\nl5\nl6\tt"),
    ("\r\r\n", "\n\n"),
])
def test_clean_removes_whole_sequences(raw: str, expected: str) -> None:
    assert clean(raw) == expected


@pytest.mark.parametrize("text", [
    "", "plain", "tab\tand\nnewline", "[bold]markup[/] :smile: \\x1b literally",
    "ünïcödé ✓ 漢字 \u2028 \u00a0 \U0001f600",
])
def test_clean_is_the_identity_without_controls(text: str) -> None:
    assert clean(text) == text


def test_has_control() -> None:
    assert has_control("\x1b") and has_control("\x9b") and has_control("\x7f")
    assert not has_control("tab\tnewline\n ✓")


# Text a terminal prints: no control character at all.
PLAIN = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=20)
FINAL = st.sampled_from("@ABCDHJKLmhlsu~")
PARAMS = st.text(st.sampled_from("0123456789;:?<=> !\"#$%&'()*+,-./"), max_size=8)
PAYLOAD = st.text(st.characters(blacklist_characters="\x07\x18\x1a\x1b\x9c",
                                blacklist_categories=("Cs",)), max_size=12)
SEQUENCE = st.one_of(
    st.builds(lambda i, p, f: i + p + f, st.sampled_from(["\x1b[", "\x9b"]), PARAMS, FINAL),
    st.builds(lambda i, p, t: i + p + t,
              st.sampled_from(["\x1b]", "\x1bP", "\x1bX", "\x1b^", "\x1b_", "\x9d", "\x90",
                               "\x98", "\x9e", "\x9f"]),
              PAYLOAD, st.sampled_from(["\x07", "\x1b\\", "\x9c", "\x18", "\x1a"])),
    st.builds(lambda i, f: "\x1b" + i + f, st.text(st.sampled_from(" !\"#()*+-./"),
                                                    max_size=2),
              st.sampled_from("0789=>BcDEHMNOZ\\")),
    st.sampled_from(["\x00", "\x01", "\x07", "\x08", "\x7f", "\x80", "\x9c", "\x1f"]),
)


@given(st.lists(st.tuples(SEQUENCE, PLAIN), max_size=8), PLAIN)
def test_clean_removes_sequences_and_keeps_the_text_between(
        parts: list[tuple[str, str]], head: str) -> None:
    """Plain text around whole sequences comes out exactly, the sequences not at all."""
    raw = head + "".join(seq + text for seq, text in parts)
    assert clean(raw) == head + "".join(text for _, text in parts)


@given(st.text(max_size=200)
       | st.lists(st.one_of(SEQUENCE, PLAIN, st.sampled_from(
           ["\x1b", "\x1b[", "\x1b]", "\r", "\r\n", "\n", "\t", "\x85", "\x9b"])),
           max_size=20).map("".join))
def test_clean_is_idempotent_and_leaves_no_control(text: str) -> None:
    once = clean(text)
    assert clean(once) == once
    assert inert(once)  # no control character but newline and tab
    assert "\r" not in once
    # Nothing left for the outbound side to show.
    assert for_terminal(once) == once


@given(st.text(max_size=200))
def test_for_terminal_leaves_no_control_but_newline_and_tab(text: str) -> None:
    shown = for_terminal(text)
    assert inert(shown)
    assert shown.count("\n") == text.count("\n") and shown.count("\t") == text.count("\t")


def test_for_terminal_shows_what_it_neutralises() -> None:
    assert for_terminal("\x1b]0;PWNED\x07\x1b[2Jred") == "\\x1b]0;PWNED\\x07\\x1b[2Jred"
    assert for_terminal("a\x9b1mb\x00c\x7f") == "a\\x9b1mb\\x00c\\x7f"
    assert for_terminal("l1\r\nl2\rl3\tt\n") == "l1\nl2\\x0dl3\tt\n"
    assert for_terminal("plain ✓") == "plain ✓"


def test_json_for_terminal_escapes_c1_and_del_and_keeps_the_value() -> None:
    doc = {"content": "a\x1bb\x9bc\x7fd\x85é", "k\x9d": ["\x90"]}
    raw = json.dumps(doc, ensure_ascii=False)
    assert "\x9b" in raw  # json.dumps leaves C1 raw: the reason for json_for_terminal
    safe = json_for_terminal(raw)
    assert inert(safe) and json.loads(safe) == doc and "é" in safe


@pytest.mark.parametrize("hostile", [
    "\x1b[" + "1;" * 500_000,                # one endless CSI
    "\x1b]" * 500_000,                       # string starts, never terminated
    "\x1b]0;" + "a" * 1_000_000,             # one endless OSC
    "\x1b" * 1_000_000,                      # lone escapes
    ("\x1b[1" + "a" * 8) * 100_000,          # CSIs cut short, text between
    "\x9b\x1b\x90\x07\r" * 200_000,         # every kind of start, back to back
], ids=["csi", "osc-starts", "osc", "esc", "cut-csi", "mixed"])
def test_clean_leaves_nothing_live_in_a_megabyte_of_hostile_input(hostile: str) -> None:
    """Nothing survives as a control, whatever the shape. That the pass is linear in the
    size is measured by bench/bench_sanitize.py (1 MB against 10 MB), not timed here."""
    assert inert(clean(hostile)) and inert(for_terminal(hostile))


# --- the admission policy: every way in -----------------------------------------------------


def test_add_cleans_content_and_refuses_control_in_tags(vault: Vault) -> None:
    added = remember.add(vault, HOSTILE, "fact", tags=["zoo"])
    assert added.record.content == CLEANED
    assert recall.show(vault, added.record.memory_id).record.content == CLEANED
    # Identical once cleaned: stored once.
    assert remember.add(vault, CLEANED, "fact").deduplicated
    with pytest.raises(UsageError, match="control character"):
        remember.add(vault, "tagged", "fact", tags=["\x1b[31mred"])
    with pytest.raises(UsageError, match="only terminal control"):
        remember.add(vault, "\x1b]0;nothing else\x07\x1b[2J", "fact")


def test_pref_set_cleans_value_and_refuses_control_in_key(vault: Vault) -> None:
    assert prefs.set_(vault, "editor", "\x1b[31mvim\x1b[0m\x07").value == "vim"
    assert prefs.get(vault, "editor").value == "vim"
    with pytest.raises(UsageError, match="control character"):
        prefs.set_(vault, "ed\x1b[31mitor", "vim")
    assert "ed\x1b[31mitor" not in prefs.read(vault)


def test_ingest_cleans_messages_without_counting_a_redaction(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        json.dumps({"id": "m1", "role": "user", "content": HOSTILE}) + "\n" +
        json.dumps({"id": "m2", "role": "assistant", "content": "\x1b]0;only\x07\x1b[2J"})
        + "\n" + json.dumps({"id": "m3", "role": "user", "content": "fine"}) + "\n")
    result = mem(script_runner, "ingest", str(transcript), "--format", "jsonl",
                 "--session", "s1", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    # m2 was nothing but escapes: dropped, like an empty message; nothing is "redacted".
    assert doc["messages_added"] == 2 and doc["redactions"] == [] and doc["withheld"] == 0
    contents = {r.message_id: r.content for r in vault.store.read_lines(session_file("s1"))}
    assert contents == {"m1": CLEANED, "m3": "fine"}


def test_ingest_refuses_a_tag_with_a_control_character(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"role": "user", "content": "hi",
                                      "tags": ["\x1b[31mred"]}) + "\n")
    result = mem(script_runner, "ingest", str(transcript), "--format", "jsonl",
                 "--session", "s1")
    assert result.returncode == DataError.exit_code, result.stderr
    assert "control character" in result.stderr and inert(result.stderr)


CLAUDE_BASE = {"isSidechain": False, "userType": "external", "cwd": "/home/alice/proj",
               "sessionId": "5f0c2a8e-3b1d-4c6f-9a7e-2d8b1c4e6f01", "version": "1.0.98",
               "gitBranch": "main"}


def test_ingested_claude_code_command_output_is_cleaned(
        script_runner: ScriptRunner, vault: Vault, tmp_path: Path) -> None:
    """What the issue saw: `<local-command-stdout>` holding a command's ANSI colours."""
    stdout = ("<local-command-stdout>\x1b[1mTotal cost:\x1b[22m $0.12\n"
              "\x1b[32m✓ vorpal tests passed\x1b[39m\x1b]0;PWNED\x07</local-command-stdout>")
    transcript = tmp_path / "claude.jsonl"
    transcript.write_text("".join(json.dumps(r) + "\n" for r in [
        {**CLAUDE_BASE, "parentUuid": None, "type": "user", "uuid": "u-1",
         "timestamp": "2025-06-01T10:00:00.000Z",
         "message": {"role": "user", "content": "run the tests please"}},
        {**CLAUDE_BASE, "parentUuid": "u-1", "type": "user", "uuid": "u-2",
         "timestamp": "2025-06-01T10:00:05.000Z",
         "message": {"role": "user", "content": stdout}},
    ]))
    result = mem(script_runner, "ingest", str(transcript), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["messages_added"] == 2
    listed = mem(script_runner, "list", "--type", "message")
    assert listed.returncode == 0, listed.stderr
    assert inert(listed.stdout) and "vorpal tests passed" in listed.stdout
    assert "Total cost" in listed.stdout and "PWNED" not in listed.stdout
    found = json.loads(mem(script_runner, "search", "vorpal", "--json").stdout)["results"]
    # (the turn before is found too, by its neighbour's words: its context)
    assert "u-2" in [f["message_id"] for f in found]
    assert all(inert(f["snippet"]) and inert(f["content"]) for f in found)


def test_import_cleans_content_and_refuses_control_in_names(vault: Vault) -> None:
    stamp = "2026-01-01T00:00:00.000000Z"
    record = {"memory_id": "0190a0a0-0000-7000-8000-000000000001", "org_id": "default",
              "user_id": "alice", "type": "fact", "category": "learned_context",
              "content": HOSTILE, "content_hash": content_hash(HOSTILE), "tags": ["zoo"],
              "created_at": stamp, "updated_at": stamp, "key_version": 1}

    def export(rec: dict[str, object], prefs_doc: dict[str, str]) -> str:
        return json.dumps({
            "export_version": portability.EXPORT_VERSION, "org_id": "default",
            "user_id": "alice", "exported_at": stamp,
            "categories": {"learned_context": {"records": [rec], "count": 1}},
            "preferences": prefs_doc, "record_count": 1})

    with pytest.raises(DataError, match="control character"):
        portability.import_text(vault, export({**record, "tags": ["\x1b[31m"]}, {}))
    with pytest.raises(DataError, match="control character"):
        portability.import_text(vault, export(record, {"k\x1b[1m": "v"}))
    result = portability.import_text(vault, export(record, {"editor": "\x1b[31mvim"}))
    assert result.imported == 1
    stored = recall.show(vault, str(record["memory_id"])).record
    assert stored.content == CLEANED
    assert prefs.get(vault, "editor").value == "vim"


# --- the CLI: nothing it prints acts on the terminal ----------------------------------------


@pytest.fixture
def initialised(script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "init", "--json")
    assert result.returncode == 0, result.stderr


def add(script_runner: ScriptRunner, *args: str, stdin: str = "") -> str:
    result = mem(script_runner, "add", *args, "--json", stdin=stdin)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["memory_id"])


def test_add_then_every_view_is_inert_and_searchable(script_runner: ScriptRunner,
                                                      initialised: None) -> None:
    memory_id = add(script_runner, HOSTILE, "--type", "preference", "--tag", "zoo")
    for args in (["list"], ["search", "red"], ["search", "panda"], ["show", memory_id],
                 ["brief"], ["export", "--format", "markdown"], ["list", "--json"],
                 ["export"]):
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert inert(result.stdout), (args, result.stdout)
        assert "PWNED" not in result.stdout and "cHduZWQ" not in result.stdout, args
        assert "red panda walrus" in result.stdout, (args, result.stdout)
    hits = json.loads(mem(script_runner, "search", "red", "--json").stdout)["results"]
    assert [h["memory_id"] for h in hits] == [memory_id]


def test_add_from_stdin_with_nul_and_cr(script_runner: ScriptRunner,
                                        initialised: None) -> None:
    memory_id = add(script_runner, "-", stdin="first\x00line\r\nsecond\rthird\x1b[2K\n")
    shown = json.loads(mem(script_runner, "show", memory_id, "--json").stdout)
    assert shown["content"] == "firstline\nsecond\nthird"


def test_pref_views_are_inert(script_runner: ScriptRunner, initialised: None) -> None:
    result = mem(script_runner, "pref", "set", "editor", "\x1b]52;c;ZXZpbA==\x07\x1b[31mvim")
    assert result.returncode == 0, result.stderr
    got = mem(script_runner, "pref", "get", "editor")
    assert got.stdout == "vim\n"
    listed = mem(script_runner, "pref", "list")
    assert inert(listed.stdout) and "vim" in listed.stdout and "ZXZpbA" not in listed.stdout
    refused = mem(script_runner, "pref", "set", "ed\x1b[31mitor", "vim")
    assert refused.returncode == UsageError.exit_code and inert(refused.stderr)


def test_a_control_in_a_tag_is_refused(script_runner: ScriptRunner,
                                       initialised: None) -> None:
    result = mem(script_runner, "add", "tagged", "--tag", "\x1b]0;PWNED\x07")
    assert result.returncode == UsageError.exit_code
    assert "control character" in result.stderr and inert(result.stderr)


def test_error_line_is_inert(script_runner: ScriptRunner, initialised: None) -> None:
    assert mem(script_runner, "add", "Prefers tea").returncode == 0
    result = mem(script_runner, "show", "\x1b]0;PWNED\x07\x1b[2J")
    assert result.returncode == NotFound.exit_code
    assert inert(result.stderr) and "\\x1b]0;PWNED" in result.stderr


# --- records stored before the fix (bypassing admission) are neutralised on the way out ---


RAW = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mlegacy\x1b[0m ocelot \x9b1m lynx\x07\x00 end"


@pytest.fixture
def legacy(vault: Vault) -> str:
    """A message written as an older mem stored it: straight to the session file, with no
    admission (add_messages without `admit`), escapes and all."""
    ingest.add_messages(vault, "old", [NewMessage(RAW, "user", "m1")])
    (record,) = vault.store.read_lines(session_file("old"))
    assert record.content == RAW
    return record.memory_id


def test_legacy_record_is_neutralised_in_human_views(script_runner: ScriptRunner,
                                                     legacy: str) -> None:
    for args in (["list"], ["search", "ocelot"], ["show", legacy],
                 ["export", "--format", "markdown"]):
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert inert(result.stdout), (args, result.stdout)
        # Shown, not acted on: the escapes are visible text and the words are all there.
        assert "\\x1b]0;PWNED\\x07" in result.stdout, (args, result.stdout)
        assert "ocelot" in result.stdout, args


def test_legacy_record_is_escaped_in_json(script_runner: ScriptRunner, legacy: str,
                                          tmp_path: Path) -> None:
    docs = {}
    for args in (["list", "--json"], ["show", legacy, "--json"], ["search", "lynx", "--json"],
                 ["export"]):
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert inert(result.stdout), args  # C1 and DEL too, not only what json escapes
        docs[args[0]] = json.loads(result.stdout)
    # The JSON values themselves are unchanged: only their spelling is escaped.
    assert docs["list"]["records"][0]["content"] == RAW
    assert docs["show"]["content"] == RAW
    assert "\x9b" in docs["search"]["results"][0]["snippet"]
    exported = docs["export"]["categories"]["conversation"]["records"]
    assert [r["content"] for r in exported] == [RAW]
    out = tmp_path / "export.md"
    assert mem(script_runner, "export", "--format", "markdown", "-o", str(out)).returncode == 0
    assert inert(out.read_text()) and "ocelot" in out.read_text()


def test_legacy_preference_is_neutralised(script_runner: ScriptRunner, vault: Vault) -> None:
    with vault.transaction() as tx:
        doc = tx.store.read_doc(PREFERENCES) or {"format": 1, "records": []}
        doc.setdefault("settings", {})["editor"] = {"value": "\x1b[31mvim\x9b2J",
                                                    "updated_at": "2026-01-01T00:00:00Z"}
        tx.write_doc(PREFERENCES, doc)
    for args in (["pref", "get", "editor"], ["pref", "list"],
                 ["export", "--format", "markdown"]):
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert inert(result.stdout) and "\\x1b[31mvim\\x9b2J" in result.stdout, args


def test_legacy_fact_is_neutralised_in_the_brief(script_runner: ScriptRunner,
                                                 vault: Vault) -> None:
    memory_id = remember.add(vault, "placeholder fact", "fact").record.memory_id
    with vault.transaction() as tx:
        doc = tx.store.read_doc("CLAUDE.md")
        assert doc is not None
        for r in doc["records"]:
            if r["memory_id"] == memory_id:
                r["content"] = RAW
        tx.write_doc("CLAUDE.md", doc)
    result = mem(script_runner, "brief")
    assert result.returncode == 0, result.stderr
    assert "ocelot" in result.stdout
    assert inert(result.stdout)
    # And the hook's brief, which the agent shows and reads, holds no escape either.
    hook = mem(script_runner, "hook", "claude-code",
               stdin=json.dumps({"hook_event_name": "SessionStart", "session_id": "x"}))
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "ocelot" in context and not has_control(context.replace("\n", ""))


# --- Rich markup in stored text is text ---------------------------------------------------


MARKUP = "[bold]not bold[/] [/] :thumbs_up: [link=https://evil.example]click[/link]"


def test_stored_rich_markup_is_printed_as_text(script_runner: ScriptRunner,
                                               initialised: None) -> None:
    memory_id = add(script_runner, MARKUP, "--tag", "[red]")
    assert mem(script_runner, "pref", "set", "style", MARKUP).returncode == 0
    for args in (["list"], ["show", memory_id], ["search", "bold"], ["pref", "list"],
                 ["pref", "get", "style"]):
        result = mem(script_runner, *args)
        assert result.returncode == 0, (args, result.stderr)
        flat = " ".join(result.stdout.split())
        assert "[bold]not bold[/] [/] :thumbs_up:" in flat, (args, result.stdout)
        assert "👍" not in result.stdout, args
    assert "  [red]  " in mem(script_runner, "list").stdout  # the tags column, as text
