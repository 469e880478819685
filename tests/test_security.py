"""Tampering, moved data, path names, plaintext on disk, modes, the audit chain (SPEC §2-4, §6).

Byte-level checks go through the library for speed; a few run the installed `mem` script to
check exit codes and the stdout/stderr split a user or a cron wrapper relies on.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import mem, open_as
from memvault.config import resolve
from memvault.errors import EX_DATAERR, EX_USAGE, DataError, UsageError
from memvault.model.records import Filters
from memvault.ops import prefs, recall, remember, verify
from memvault.ops.admin import init
from memvault.storage.layout import UserLayout
from memvault.storage.userstore import UserStore
from memvault.vault.vault import Vault
from tests.conftest import one_error_line

USER_DIR = Path("default") / "alice"


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def flipped(path: Path) -> Iterator[int]:
    """Flip each byte of `path` in turn (XOR 0x01), yielding its position; restore after."""
    original = path.read_bytes()
    try:
        for position in range(len(original)):
            data = bytearray(original)
            data[position] ^= 0x01
            path.write_bytes(bytes(data))
            yield position
    finally:
        path.write_bytes(original)


def snapshot(root: Path) -> dict[str, bytes | None]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in root.rglob("*")}


@pytest.fixture
def populated(vault: Vault) -> Vault:
    """alice with facts in CLAUDE.md, preferences and settings, and a two-message session."""
    remember.add(vault, "Works on the billing service", "fact", tags=["work"])
    remember.add(vault, "Deploys on Thursdays", "pattern")
    remember.add(vault, "Prefers tea over coffee", "preference")
    remember.add(vault, "Always answer in British English", "instruction")
    prefs.set_(vault, "editor", "helix")
    remember.add(vault, "How do I rotate the key?", "message", session="s1")
    remember.add(vault, "Run mem rotate-key.", "message", session="s1", role="assistant")
    return vault


def fresh(v: Vault, user: str = "alice", org: str = "default") -> UserStore:
    """A store with no cached data keys, so every read goes back to the files."""
    return UserStore(UserLayout(v.root, org, user), v.master)


def no_read_audit(v: Vault, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify() audits itself; keep the log from growing over thousands of verify calls."""
    monkeypatch.setattr(v, "audit_read", lambda *a, **k: None)


# --- a flipped byte anywhere -------------------------------------------------------------------


@pytest.mark.parametrize("rel", ["CLAUDE.md", "preferences.json"])
def test_flipped_byte_in_whole_file_envelope_is_a_data_error(populated, vault_dir, rel):
    path = vault_dir / USER_DIR / rel
    name = f"default/alice/{rel}"
    assert fresh(populated).doc_records(rel)  # readable before
    missed = []
    for position in flipped(path):
        try:
            fresh(populated).doc_records(rel)
            missed.append(position)
        except DataError as exc:
            if name not in exc.message or exc.exit_code != EX_DATAERR:
                missed.append((position, exc.message))
    assert missed == []
    assert len(fresh(populated).doc_records(rel)) >= 2  # restored and readable again


def test_flipped_byte_in_wrapped_data_key_is_a_data_error(populated, vault_dir):
    path = vault_dir / USER_DIR / "keys" / "1.dek"
    missed = []
    for position in flipped(path):
        try:
            fresh(populated).dek(1)
            missed.append(position)
        except DataError as exc:
            if "default/alice/keys/1.dek" not in exc.message:
                missed.append((position, exc.message))
        with pytest.raises(DataError):  # and no record under it can be read
            fresh(populated).doc_records("CLAUDE.md")
    assert missed == []
    assert fresh(populated).doc_records("CLAUDE.md")


def test_flipped_byte_in_state_is_a_data_error(populated, vault_dir):
    path = vault_dir / USER_DIR / "state.json"
    missed = []
    for position in flipped(path):
        try:
            fresh(populated).load_state()
            missed.append(position)
        except DataError as exc:
            if "default/alice/state.json" not in exc.message:
                missed.append((position, exc.message))
    assert missed == []
    # A writer refuses to go on from a tampered state (the frozen flag lives there).
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b'"frozen": false', b'"frozen": true'))
    with pytest.raises(DataError, match="state.json"):
        remember.add(open_as("alice"), "written despite a forged state", "fact")
    path.write_bytes(raw)


@pytest.mark.slow
def test_flipped_byte_in_session_file_is_reported_by_verify(populated, vault_dir, monkeypatch):
    rel = "sessions/s1.jsonl"
    name = f"default/alice/{rel}"
    path = vault_dir / USER_DIR / rel
    original = path.read_bytes()
    assert original.count(b"\n") == 2 and original.endswith(b"\n")
    v = open_as("alice")
    no_read_audit(v, monkeypatch)
    assert verify.verify(v).to_dict()["ok"]
    missed = []
    for position in flipped(path):
        line = original[:position].count(b"\n") + 1
        report = verify.verify(v).to_dict()
        mine = [p for p in report["problems"] if p["file"] == name]
        if position == len(original) - 1:
            # The final newline turned into another byte: indistinguishable from a crash in
            # the middle of an append, so the last line is a torn tail: a warning, skipped.
            ok = (report["ok"] and len(mine) == 1 and mine[0]["severity"] == "warning"
                  and mine[0]["line"] == 2 and "torn" in mine[0]["problem"]
                  and len(v.store.read_lines(rel)) == 1)
        else:
            ok = (not report["ok"] and any(p["severity"] == "error" and p["line"] == line
                                           for p in mine))
            try:
                v.store.read_lines(rel)
                ok = False
            except DataError as exc:
                ok = ok and f"{name} line {line}" in exc.message
        if not ok:
            missed.append((position, chr(original[position]), report["problems"]))
    assert missed == []
    assert verify.verify(v).to_dict()["ok"]


def test_flip_in_the_unused_bits_of_base64_is_reported(populated, vault_dir):
    """"QUJ=" decodes like "QUI=": a flip there leaves the ciphertext intact but is still a
    modified file, and must not pass as clean (it did, for about one line in four)."""
    rel = "sessions/s1.jsonl"
    path = vault_dir / USER_DIR / rel
    store = populated.store
    record = store.read_lines(rel)[0]
    for _ in range(1000):  # a fresh nonce each time: find a ciphertext ending in 0, 4 or 8 + "="
        line = store.seal_record(rel, record)
        ct = json.loads(line)["ct"]
        if ct.endswith("=") and not ct.endswith("==") and ct[-2] in "048":
            break
    else:
        pytest.fail("no ciphertext with spare bits in its last base64 character")
    rest = path.read_bytes().splitlines(keepends=True)[1:]
    path.write_bytes(line + b"".join(rest))
    assert verify.verify(open_as("alice")).to_dict()["problems"] == []
    doc = json.loads(line)
    doc["ct"] = ct[:-2] + chr(ord(ct[-2]) ^ 0x01) + "="
    assert base64.b64decode(doc["ct"]) == base64.b64decode(ct)  # same bytes, other text
    path.write_bytes(json.dumps(doc, separators=(",", ":")).encode() + b"\n" + b"".join(rest))
    report = verify.verify(open_as("alice")).to_dict()
    assert not report["ok"]
    assert [(p["file"], p["line"]) for p in report["problems"]] == [(f"default/alice/{rel}", 1)]
    with pytest.raises(DataError, match=f"default/alice/{rel} line 1"):
        recall.list_records(open_as("alice"), Filters())


@pytest.mark.parametrize("rel", ["CLAUDE.md", "keys/1.dek"])
def test_truncated_envelope_is_a_data_error(populated, vault_dir, rel):
    path = vault_dir / USER_DIR / rel
    original = path.read_bytes()
    try:
        for size in range(len(original)):
            path.write_bytes(original[:size])
            with pytest.raises(DataError, match=rel):
                fresh(populated).doc_records("CLAUDE.md")
    finally:
        path.write_bytes(original)


@pytest.mark.script_launch_mode("subprocess")
def test_tampered_claude_md_makes_cli_exit_65_with_one_line(vault, vault_dir, script_runner):
    remember.add(vault, "my secret project is zanzibarcanary9", "fact")
    path = vault_dir / USER_DIR / "CLAUDE.md"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    for args in (["list"], ["list", "--json"], ["add", "one more fact"], ["brief"],
                 ["search", "project"]):
        result = mem(script_runner, *args)
        assert result.returncode == EX_DATAERR, (args, result.stderr)
        line = one_error_line(result.stderr)
        assert "default/alice/CLAUDE.md" in line
        assert result.stdout == ""
        assert "zanzibarcanary9" not in result.stdout + result.stderr
    result = mem(script_runner, "verify", "--json")
    assert result.returncode == EX_DATAERR
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [p["file"] for p in report["problems"]] == ["default/alice/CLAUDE.md"]
    assert "zanzibarcanary9" not in result.stdout + result.stderr


# --- moved data ------------------------------------------------------------------------------


@pytest.fixture
def two_users(populated: Vault) -> tuple[Vault, Vault]:
    bob = open_as("bob")
    remember.add(bob, "Bob likes trains", "fact")
    remember.add(bob, "Bob's first message", "message", session="s1")
    remember.add(populated, "Alice's other session", "message", session="s2")
    return populated, bob


def first_line(path: Path) -> bytes:
    return path.read_bytes().splitlines(keepends=True)[0]


def test_session_line_copied_to_another_user_fails(two_users, vault_dir, script_runner):
    alice_line = first_line(vault_dir / USER_DIR / "sessions" / "s1.jsonl")
    bob_file = vault_dir / "default" / "bob" / "sessions" / "s1.jsonl"
    with bob_file.open("ab") as fh:
        fh.write(alice_line)
    bob = open_as("bob")
    report = verify.verify(bob).to_dict()
    assert not report["ok"]
    assert any(p["file"] == "default/bob/sessions/s1.jsonl" and p["line"] == 2
               and p["severity"] == "error" for p in report["problems"])
    # Reads decrypt only what the index names: the planted line is never returned...
    assert all("rotate" not in r.content for r in recall.list_records(bob, Filters()).records)
    # ...and anything that reads the whole session refuses it, naming the line.
    with pytest.raises(DataError, match="default/bob/sessions/s1.jsonl line 2"):
        remember.add(bob, "Bob's second message", "message", session="s1")
    result = mem(script_runner, "forget", "--session", "s1", "--user", "bob", "--yes")
    assert result.returncode == EX_DATAERR
    assert "default/bob/sessions/s1.jsonl line 2" in one_error_line(result.stderr)
    assert "How do I rotate" not in result.stdout + result.stderr


def test_session_line_copied_to_another_session_of_the_same_user_fails(two_users, vault_dir):
    alice_line = first_line(vault_dir / USER_DIR / "sessions" / "s1.jsonl")
    with (vault_dir / USER_DIR / "sessions" / "s2.jsonl").open("ab") as fh:
        fh.write(alice_line)
    report = verify.verify(open_as("alice")).to_dict()
    assert not report["ok"]
    assert any(p["file"] == "default/alice/sessions/s2.jsonl" and p["line"] == 2
               for p in report["problems"])
    alice = open_as("alice")
    assert len(recall.list_records(alice, Filters(session="s2")).records) == 1
    with pytest.raises(DataError, match="sessions/s2.jsonl line 2"):
        remember.add(alice, "one more", "message", session="s2")


def test_renamed_session_file_fails(two_users, vault_dir):
    sessions = vault_dir / USER_DIR / "sessions"
    (sessions / "s1.jsonl").rename(sessions / "s9.jsonl")
    report = verify.verify(open_as("alice")).to_dict()
    assert not report["ok"]
    assert {p["line"] for p in report["problems"]
            if p["file"] == "default/alice/sessions/s9.jsonl"} == {1, 2}


def test_session_line_replayed_in_the_same_file_is_reported(two_users, vault_dir):
    path = vault_dir / USER_DIR / "sessions" / "s1.jsonl"
    with path.open("ab") as fh:
        fh.write(first_line(path))
    report = verify.verify(open_as("alice")).to_dict()
    assert not report["ok"]
    assert any("stored twice" in p["problem"] and p["file"].endswith("sessions/s1.jsonl")
               for p in report["problems"])


@pytest.mark.parametrize("rel", ["CLAUDE.md", "preferences.json", "keys/1.dek", "state.json"])
def test_file_copied_over_another_users_file_fails(two_users, vault_dir, rel, script_runner):
    bob_dir = vault_dir / "default" / "bob"
    shutil.copyfile(vault_dir / USER_DIR / rel, bob_dir / rel)
    report = verify.verify(open_as("bob")).to_dict()
    assert not report["ok"]
    assert any(p["file"] == f"default/bob/{rel}" for p in report["problems"])
    if rel == "state.json":
        with pytest.raises(DataError, match="default/bob/state.json"):
            remember.add(open_as("bob"), "a new fact", "fact")
        return
    # Every read of that file refuses it (the brief reads both documents).
    commands = [["brief"]] + ([["list"]] if rel != "preferences.json" else [["pref", "list"]])
    for args in commands:
        result = mem(script_runner, *args, "--user", "bob")
        assert result.returncode == EX_DATAERR, args
        assert f"default/bob/{rel}" in one_error_line(result.stderr)
        assert "Works on the billing" not in result.stdout + result.stderr


def test_claude_md_copied_into_another_org_fails(populated, vault_dir):
    other = open_as("alice", org="acme")
    remember.add(other, "Acme fact", "fact")
    shutil.copyfile(vault_dir / USER_DIR / "CLAUDE.md", vault_dir / "acme" / "alice" / "CLAUDE.md")
    with pytest.raises(DataError, match="acme/alice/CLAUDE.md"):
        recall.list_records(open_as("alice", org="acme"), Filters())


def test_preferences_copied_over_claude_md_of_the_same_user_fails(populated, vault_dir):
    shutil.copyfile(vault_dir / USER_DIR / "preferences.json", vault_dir / USER_DIR / "CLAUDE.md")
    with pytest.raises(DataError, match="default/alice/CLAUDE.md"):
        recall.list_records(open_as("alice"), Filters())


# --- names that would be paths ----------------------------------------------------------------

BAD_NAMES = ["../x", "..", ".", "a/b", "/etc", "", "-x", ".hidden", "a" * 65, "a b", "a\\b",
             "x\n", "alice\n", "é", "a:b", "~", "a\x00b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_by_the_library(vault, vault_dir, tmp_path, name):
    before = snapshot(tmp_path)
    for kind in ("user", "org"):
        with pytest.raises(UsageError) as err:
            resolve(**{kind: name})
        assert err.value.exit_code == EX_USAGE
        assert f"invalid {kind} name" in err.value.message
    with pytest.raises(UsageError, match="invalid session name"):
        remember.add(vault, "hello", "message", session=name)
    assert snapshot(tmp_path) == before


CLI_BAD_NAMES = ["../x", "..", "a/b", "", "-x", "a" * 65, "x\n"]


@pytest.mark.parametrize("name", CLI_BAD_NAMES)
@pytest.mark.script_launch_mode("subprocess")
def test_bad_names_exit_2_from_the_cli_and_create_nothing(vault, tmp_path, script_runner, name):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = snapshot(tmp_path)
    runs = [
        ["add", "hello", f"--user={name}"],
        ["add", "hello", f"--org={name}"],
        ["add", "hello", "--type", "message", f"--session={name}"],
        ["pref", "set", "k", "v", f"--user={name}"],
    ]
    for args in runs:
        result = mem(script_runner, *args, cwd=cwd)
        assert result.returncode == EX_USAGE, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stdout == ""
    result = script_runner.run(["mem", "add", "hello"], cwd=cwd,
                               env=env_with(MEM_USER=name or "x/"))
    assert result.returncode == EX_USAGE
    assert snapshot(tmp_path) == before


def test_longest_and_dotted_names_are_accepted_and_stay_inside_the_vault(vault, vault_dir):
    user, org, session = "u" * 64, "Acme-Corp_1.eu", "2026.05.01_a-b"
    v = open_as(user, org=org)
    remember.add(v, "hi", "message", session=session)
    assert (vault_dir / org / user / "sessions" / f"{session}.jsonl").is_file()


# --- plaintext on disk, file modes ----------------------------------------------------------------


@pytest.fixture
def canary_vault(vault_dir: Path) -> list[str]:
    """A vault written under a permissive umask, every kind of content holding a canary word."""
    old_umask = os.umask(0)  # a permissive umask must not loosen anything mem creates
    try:
        init(resolve())
        v = Vault(resolve())
        canaries = [f"zanzibarcanary{i}" for i in range(1, 12)]
        texts = [
            (f"Works on project {canaries[0]}", "fact"),
            (f"Context: the {canaries[1]} migration", "context"),
            (f"Reviews code on {canaries[2]} mornings", "pattern"),
            (f"Prefers {canaries[3]} tea", "preference"),
            (f"Always sign off as {canaries[4]}", "instruction"),
            (f"Not {canaries[5]}, it is spelt differently", "correction"),
        ]
        for text, kind in texts:
            remember.add(v, text, kind, tags=[f"tag{canaries[6]}"])
        remember.add(v, f"User said {canaries[7]} in a session", "message", session="s1")
        remember.add(v, f"Assistant replied {canaries[7]}x", "message", session="s1",
                     role="assistant")
        prefs.set_(v, f"key{canaries[8]}", f"value {canaries[9]}")
        prefs.set_(v, "theme", canaries[10])
        recall.list_records(v, Filters())
        verify.verify(v).to_dict()
        for name in ("bob", "carol"):
            remember.add(open_as(name), f"{name} knows {canaries[0]}", "fact")
    finally:
        os.umask(old_umask)
    return [*canaries, *(text for text, _ in texts)]


def test_no_plaintext_on_disk(canary_vault, vault_dir, config_dir):
    canaries = [c for c in canary_vault if c.startswith("zanzibar")]
    texts = [t for t in canary_vault if not t.startswith("zanzibar")]
    needles = []
    for canary in canaries:
        needles += [canary, canary.upper(), canary.capitalize()]
        needles.append(canary.encode("utf-16-le").decode("latin-1"))
    plain_hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    files = [p for root in (vault_dir, config_dir) for p in root.rglob("*") if p.is_file()]
    assert len(files) >= 15
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle.encode("latin-1") not in data, (path, needle)
        for digest in plain_hashes:  # no unkeyed hash of content outside an envelope
            assert digest.encode() not in data, path
            assert base64.b64encode(bytes.fromhex(digest)) not in data, path


def wrong_modes(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            out.append(f"{path} {mode:04o}")
    return out


def test_files_0600_and_directories_0700_even_under_umask_0(canary_vault, vault_dir, config_dir):
    paths = [p for root in (vault_dir, config_dir) for p in [root, *root.rglob("*")]]
    names = {p.name for p in paths}
    # The user's lock lives outside the user's directory: <vault>/<org>/.locks/<user>.lock.
    assert {"CLAUDE.md", ".locks", "alice.lock", "master.key", "1.dek", "s1.jsonl"} <= names
    assert any(p.parent.name == "index" and p.is_file() for p in paths)  # Tantivy's files too
    assert wrong_modes(paths) == []


# --- the audit chain ------------------------------------------------------------------------


@pytest.fixture
def audited(vault: Vault) -> Vault:
    for i in range(4):
        remember.add(vault, f"audited fact zanzibaraudit{i}", "fact")
    prefs.set_(vault, "secret-pref", "zanzibarprefvalue")
    assert verify.verify(vault).to_dict()["ok"]
    return vault


def audit_lines(vault_dir: Path) -> list[bytes]:
    return (vault_dir / USER_DIR / "audit.jsonl").read_bytes().splitlines(keepends=True)


def write_audit(vault_dir: Path, lines: list[bytes]) -> None:
    (vault_dir / USER_DIR / "audit.jsonl").write_bytes(b"".join(lines))


def edit_entry(line: bytes, field: str) -> bytes:
    entry = json.loads(line)
    value = entry[field]
    if isinstance(value, str):
        entry[field] = value[:-1] + ("0" if value[-1] != "0" else "1")
    elif isinstance(value, bool):
        entry[field] = not value
    elif isinstance(value, int):
        entry[field] = value + 1
    elif isinstance(value, list):
        entry[field] = [*value, "0" * 32]
    else:
        entry[field] = {**value, "deduplicated": True}
    return json.dumps(entry, separators=(",", ":")).encode() + b"\n"


def assert_chain_broken(vault_dir: Path, script_runner, cli: bool = True) -> None:  # noqa: ANN001
    report = verify.verify(open_as("alice")).to_dict()
    assert report["ok"] is False
    assert report["problems"]
    assert all(p["file"] == "default/alice/audit.jsonl" for p in report["problems"])
    if not cli:
        return
    result = mem(script_runner, "verify")
    assert result.returncode == EX_DATAERR
    assert "audit.jsonl" in result.stdout
    audit = mem(script_runner, "verify", "--json")
    assert audit.returncode == EX_DATAERR
    assert json.loads(audit.stdout)["ok"] is False


@pytest.mark.parametrize("field", ["op", "ts", "ids", "hashes", "detail", "actor", "seq",
                                   "prev", "mac", "audit_id"])
def test_edited_audit_entry_is_detected(audited, vault_dir, script_runner, field):
    lines = audit_lines(vault_dir)
    lines[2] = edit_entry(lines[2], field)
    write_audit(vault_dir, lines)
    assert_chain_broken(vault_dir, script_runner, cli=field in ("op", "mac"))


@pytest.mark.parametrize("index", [0, 2])
def test_deleted_audit_entry_is_detected(audited, vault_dir, script_runner, index):
    lines = audit_lines(vault_dir)
    del lines[index]
    write_audit(vault_dir, lines)
    assert_chain_broken(vault_dir, script_runner)


def test_swapped_audit_entries_are_detected(audited, vault_dir, script_runner):
    lines = audit_lines(vault_dir)
    lines[2], lines[3] = lines[3], lines[2]
    write_audit(vault_dir, lines)
    assert_chain_broken(vault_dir, script_runner)


def test_audit_of_another_user_does_not_verify(audited, vault_dir):
    bob = open_as("bob")
    remember.add(bob, "bob fact", "fact")
    shutil.copyfile(vault_dir / USER_DIR / "audit.jsonl",
                    vault_dir / "default" / "bob" / "audit.jsonl")
    report = verify.verify(open_as("bob")).to_dict()
    assert not report["ok"]
    assert {p["file"] for p in report["problems"]} == {"default/bob/audit.jsonl"}


def test_audit_entries_hold_no_content_or_pref_values(audited, vault_dir):
    prefs.get(audited, "secret-pref")
    remember.add(audited, "audited fact zanzibaraudit0", "fact")  # a dedup is audited too
    raw = (vault_dir / USER_DIR / "audit.jsonl").read_bytes()
    entries = [json.loads(line) for line in raw.splitlines()]
    assert {"add", "pref.set", "pref.get"} <= {e["op"] for e in entries}
    for needle in [b"zanzibaraudit", b"zanzibarprefvalue", b"secret-pref", b"audited fact"]:
        assert needle not in raw
    for i in range(4):
        digest = hashlib.sha256(f"audited fact zanzibaraudit{i}".encode()).hexdigest()
        assert digest.encode() not in raw


# --- errors: one line, or the traceback on request ----------------------------------------------


@pytest.mark.script_launch_mode("subprocess")
def test_known_error_is_one_line_and_mem_debug_shows_the_traceback(vault, script_runner):
    remember.add(vault, "something", "fact")
    plain = mem(script_runner, "show", "0190aaaa-0000-7000-8000-000000000000")
    assert plain.returncode == 66
    assert plain.stderr == "mem: error: no memory with id 0190aaaa-0000-7000-8000-000000000000\n"
    assert plain.stdout == ""
    debug = script_runner.run(["mem", "show", "0190aaaa-0000-7000-8000-000000000000"],
                              env=env_with(MEM_DEBUG="1"))
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr
    assert "NotFound" in debug.stderr
    assert debug.stdout == ""


@pytest.mark.script_launch_mode("subprocess")
def test_data_error_with_mem_debug_shows_the_traceback(vault, vault_dir, script_runner):
    remember.add(vault, "something", "fact")
    (vault_dir / USER_DIR / "CLAUDE.md").write_bytes(b"garbage")
    plain = mem(script_runner, "list")
    assert plain.returncode == EX_DATAERR
    one_error_line(plain.stderr)
    debug = script_runner.run(["mem", "list"], env=env_with(MEM_DEBUG="1"))
    assert "Traceback (most recent call last)" in debug.stderr
    assert "DataError" in debug.stderr
