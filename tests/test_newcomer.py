"""What a newcomer trips on: an export that overwrites, an import that only says "not
JSON", ids that must be typed whole, `config show`'s dashes and misspellings, "1 records",
`stats` before the first write, and a passphrase file that is /dev/zero."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.errors import EX_CONFIG, EX_DATAERR, EX_NOINPUT, EX_NOPERM, EX_USAGE, Refused
from memvault.ops import remember
from memvault.storage import fsio
from memvault.text.words import counted
from memvault.vault.vault import Vault
from tests.conftest import mem, one_error_line

MEM = str(Path(sys.executable).parent / "mem")
FACT = "the lighthouse keeper retires in May"


def run(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The installed script, as a shell runs it (stdin a pipe)."""
    result = subprocess.run([MEM, *args], input=stdin, capture_output=True,
                            timeout=timeout, check=False)
    return subprocess.CompletedProcess(result.args, result.returncode,
                                       result.stdout.decode(errors="replace"),
                                       result.stderr.decode(errors="replace"))


def user_dirs(vault_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(vault_dir)) for p in vault_dir.rglob("*")
                  if p.name != "vault.json")


# --- a. export -o FILE never replaces a file unasked ----------------------------------------


def test_export_refuses_an_existing_file_without_force(
        script_runner: Any, vault: Vault, tmp_path: Path) -> None:
    remember.add(vault, FACT, "fact")
    folder = tmp_path / "exports"
    folder.mkdir()
    out = folder / "ana.json"
    out.write_text("last week's export, kept on purpose\n")
    link = folder / "latest.json"
    link.symlink_to(out)
    for target in (out, link):
        result = mem(script_runner, "export", "-o", str(target))
        assert result.returncode == EX_NOPERM
        line = one_error_line(result.stderr)
        assert "exists already" in line and "--force" in line and "nothing was written" in line
    assert out.read_text() == "last week's export, kept on purpose\n"
    assert sorted(p.name for p in folder.iterdir()) == ["ana.json", "latest.json"]
    result = mem(script_runner, "export", "-o", str(out), "--force")
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["record_count"] == 1
    new = folder / "new.json"  # a new name needs no --force
    assert mem(script_runner, "export", "-o", str(new)).returncode == 0
    assert FACT in new.read_text()


def test_a_file_made_while_the_export_is_written_is_not_replaced(tmp_path: Path) -> None:
    """The check before the export is not all: the export is linked into place, never
    renamed over a file someone made meanwhile."""
    folder = tmp_path / "exports"
    folder.mkdir()
    out = folder / "export.json"
    with pytest.raises(Refused), fsio.output_writer(out, replace=False) as fh:
        fh.write(b'{"export": "new"}\n')
        out.write_text("made meanwhile\n")
    assert out.read_text() == "made meanwhile\n"
    assert [p.name for p in folder.iterdir()] == ["export.json"]


def test_key_backup_and_export_refuse_in_the_same_words(
        script_runner: Any, vault: Vault, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("x")
    words = []
    for args in (("export", "-o", str(taken)), ("key", "backup", "-o", str(taken))):
        result = mem(script_runner, *args)
        assert result.returncode == EX_NOPERM
        words.append(one_error_line(result.stderr))
    assert words[0] == words[1]


# --- b. import names what a file that is no JSON export is --------------------------------


def _zstd(data: bytes) -> bytes:
    """A zstd frame's first bytes (its magic number) before data: what `zstd` writes."""
    return b"\x28\xb5\x2f\xfd" + b"\x04\x58" + data


@pytest.mark.parametrize(("kind", "said"), [
    ("markdown export", "Markdown export"), ("gzip", "gzip-compressed"),
    ("zstd", "zstd-compressed"), ("empty", "is empty"), ("binary", "binary data"),
    ("jsonl transcript", "JSON lines"), ("notes", "Markdown"), ("latin-1", "not UTF-8"),
    ("key backup", "backup of a master key"), ("form feeds", "is text")])
def test_import_of_another_format_says_what_it_looks_like(
        script_runner: Any, vault: Vault, tmp_path: Path, kind: str, said: str) -> None:
    remember.add(vault, FACT, "fact")
    export = tmp_path / "export.json"
    assert mem(script_runner, "export", "-o", str(export)).returncode == 0
    md = tmp_path / "export.md"
    assert mem(script_runner, "export", "--format", "markdown", "-o", str(md)).returncode == 0
    data = {
        "markdown export": md.read_bytes(), "gzip": gzip.compress(export.read_bytes()),
        "zstd": _zstd(export.read_bytes()), "empty": b"", "binary": b"\0" + os.urandom(64),
        "jsonl transcript": b'{"role": "user", "content": "hi"}\n'
                            b'{"role": "assistant", "content": "hello"}\n',
        "notes": b"# My notes\n\n- likes tea\n", "latin-1": "caf\xe9 cr\xe8me".encode("latin-1"),
        "key backup": json.dumps({"format": "mem-passphrase-key/1", "params": {}}).encode(),
        # Only whitespace that the opening strip keeps (a fuzzer found it: IndexError).
        "form feeds": b"\x0c\x0b\n",
    }[kind]
    given = tmp_path / "given"
    given.write_bytes(data)
    before = {p: p.read_bytes() for p in vault.layout.dir.rglob("*") if p.is_file()}
    result = mem(script_runner, "import", str(given), "--user", "bob")
    assert result.returncode == EX_DATAERR, result.stderr
    line = one_error_line(result.stderr)
    assert said in line
    if kind != "gzip" and kind != "zstd":
        assert "JSON export" in line  # and what import takes
    else:
        assert "decompress it first" in line
    assert {p: p.read_bytes() for p in vault.layout.dir.rglob("*") if p.is_file()} == before
    assert not (vault.root / "default" / "bob").exists()


def test_import_of_a_device_is_refused_at_once(script_runner: Any, vault: Vault) -> None:
    result = run("import", "/dev/zero", timeout=20)
    assert result.returncode == EX_DATAERR
    assert "not a mem export" in one_error_line(result.stderr)


def test_an_export_still_imports(script_runner: Any, vault: Vault, tmp_path: Path) -> None:
    remember.add(vault, FACT, "fact")
    export = tmp_path / "export.json"
    assert mem(script_runner, "export", "-o", str(export)).returncode == 0
    # An editor's BOM is no reason to refuse it.
    export.write_bytes(b"\xef\xbb\xbf" + export.read_bytes())
    result = mem(script_runner, "import", str(export), "--user", "bob", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["imported"] == 1


# --- c. show and forget take a unique id prefix -------------------------------------------

IDS = ("01a20000-1111-7000-8000-a00000000001", "01a20000-1111-7000-8000-b00000000002",
       "01a30000-2222-7000-8000-c00000000003")


@pytest.fixture
def three(script_runner: Any, vault: Vault, tmp_path: Path) -> None:
    """Three records with ids chosen here (an import keeps them): two share 30 characters."""
    from memvault.crypto.envelope import content_hash

    records = [{"memory_id": i, "org_id": "default", "user_id": "alice", "type": "fact",
                "category": "learned_context",
                "content": text, "content_hash": content_hash(text), "tags": [],
                "created_at": "2026-05-01T10:00:00Z", "updated_at": "2026-05-01T10:00:00Z",
                "importance": 0.5, "key_version": 1}
               for i, text in zip(IDS, ("Prefers green tea", "Plays the cello",
                                        "Lives in Porto"), strict=True)]
    doc = {"export_version": "1.0", "org_id": "default", "user_id": "alice",
           "exported_at": "2026-05-02T00:00:00Z", "record_count": 3,
           "categories": {"learned_context": {"count": 3, "records": records}},
           "preferences": {}}
    path = tmp_path / "three.json"
    path.write_text(json.dumps(doc))
    assert mem(script_runner, "import", str(path)).returncode == 0


def test_show_takes_a_unique_prefix(script_runner: Any, three: None) -> None:
    for prefix in ("01a30000", "01A30000-22", IDS[0][:25]):
        result = mem(script_runner, "show", prefix, "--json")
        assert result.returncode == 0, result.stderr
        whole = IDS[2] if prefix.lower().startswith("01a3") else IDS[0]
        assert json.loads(result.stdout)["memory_id"] == whole


@pytest.mark.parametrize("command", ["show", "forget"])
def test_an_ambiguous_short_or_unknown_prefix_is_refused(
        script_runner: Any, three: None, command: str) -> None:
    ambiguous = mem(script_runner, command, "01a20000-1111")
    assert ambiguous.returncode == EX_USAGE
    line = one_error_line(ambiguous.stderr)
    assert "ambiguous" in line and "2 records" in line
    short = mem(script_runner, command, "01a3000")
    assert short.returncode == EX_USAGE
    assert "too short" in one_error_line(short.stderr)
    unknown = mem(script_runner, command, "01a40000")
    assert unknown.returncode == EX_NOINPUT
    assert "01a40000" in one_error_line(unknown.stderr)
    listed = json.loads(mem(script_runner, "list", "--json").stdout)["records"]
    assert sorted(r["memory_id"] for r in listed) == sorted(IDS)  # nothing was forgotten


def test_forget_by_prefix_takes_that_record_only_and_it_stays_gone(
        script_runner: Any, three: None) -> None:
    result = mem(script_runner, "forget", IDS[1][:25], "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["memory_ids"] == [IDS[1]]
    # The prefix two shared now names the one left: the forgotten id is no candidate.
    shown = mem(script_runner, "show", "01a20000-1111", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["memory_id"] == IDS[0]
    gone = mem(script_runner, "show", IDS[1][:25])
    assert gone.returncode == EX_NOINPUT


# --- d. config show: resolved defaults, and "did you mean" --------------------------------


def test_config_show_gives_the_defaults_that_resolve(
        script_runner: Any, vault: Vault, config_dir: Path) -> None:
    result = mem(script_runner, "config", "show", "--json")
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert settings["key_file"] == {"value": str(config_dir / "master.key"),
                                    "source": "default"}
    assert settings["log_dir"]["value"] == str(resolve().log_dir)
    assert settings["log_dir"]["source"] == "default"
    assert settings["actor"]["value"] and settings["actor"]["source"].startswith("default")
    rows = {line.split()[0]: line.split()[1:]
            for line in mem(script_runner, "config", "show").stdout.splitlines()}
    assert rows["key_file"] == [str(config_dir / "master.key"), "default"]
    assert rows["log_dir"][0] == str(resolve().log_dir)
    one = mem(script_runner, "config", "show", "compaction.summarizer", "--json")
    assert json.loads(one.stdout)["settings"] == {
        "compaction.summarizer": {"value": "builtin", "source": "default"}}


def test_config_show_without_a_key_file_says_where_the_key_comes_from(
        script_runner: Any, vault: Vault) -> None:
    result = mem(script_runner, "config", "show", "key_file", "--json",
                 MEM_KEY_COMMAND="cat /nonexistent")
    entry = json.loads(result.stdout)["settings"]["key_file"]
    assert entry["value"] is None and "MEM_KEY_COMMAND" in entry["source"]


@pytest.mark.parametrize(("typed", "meant"), [
    ("log_dri", "log_dir"), ("compaction.sumarizer", "compaction.summarizer"),
    ("summariser", "compaction.summarizer"), ("keyfile", "key_file")])
def test_a_misspelled_setting_gets_did_you_mean(
        script_runner: Any, typed: str, meant: str) -> None:
    result = mem(script_runner, "config", "show", typed)
    assert result.returncode == EX_USAGE
    assert f"did you mean {meant}?" in one_error_line(result.stderr)


@pytest.mark.parametrize(("text", "meant"), [
    ("lock_timout: 5\n", "lock_timeout"), ("compaction:\n  sumarizer: x\n", "summarizer")])
def test_a_misspelled_setting_in_the_config_file_gets_did_you_mean(
        script_runner: Any, config_dir: Path, text: str, meant: str) -> None:
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.yaml").write_text(text)
    result = mem(script_runner, "config", "show")
    assert result.returncode == EX_CONFIG
    assert f"did you mean {meant}?" in one_error_line(result.stderr)


# --- e. counts in words --------------------------------------------------------------------


def test_counted() -> None:
    assert [counted(n, "record") for n in (0, 1, 2)] == ["0 records", "1 record",
                                                          "2 records"]
    assert counted(1, "summary") == "1 summary" and counted(2, "summary") == "2 summaries"
    assert counted(3, "match") == "3 matches" and counted(12_000, "file") == "12000 files"
    assert counted(12_000, "file", grouped=True) == "12,000 files"


def test_one_of_anything_is_said_in_the_singular(
        script_runner: Any, vault: Vault, tmp_path: Path) -> None:
    added = remember.add(vault, FACT, "fact")
    out = tmp_path / "one.json"
    said = [mem(script_runner, "export", "-o", str(out)).stderr,
            mem(script_runner, "reindex").stderr,
            mem(script_runner, "import", str(out), "--user", "bob").stderr,
            mem(script_runner, "export", "--format", "markdown").stdout,
            mem(script_runner, "forget", added.record.memory_id).stderr]
    text = "\n".join(said)
    assert "exported 1 record to" in text and "index rebuilt: 1 record" in text
    assert "imported 1 record," in text and "\n1 record.\n" in text
    assert "1 record in all." in text and "forgot 1 record;" in text
    assert not re.search(r"\b1 (records|files|messages)\b", text), text


# A count rendered for people next to a plural noun, not through counted().
BARE_COUNT = re.compile(r"\{[^{}]+\} (records|files|messages|sessions|users|entries|"
                        r"summaries|transcripts|texts|keys|lines|objects)\b")


def test_no_human_count_is_rendered_without_counted() -> None:
    """The class, not the instances: every f-string of the CLI that puts a number before
    a plural noun goes through counted(), so none can say "1 records"."""
    root = Path(__file__).parent.parent / "src" / "memvault"
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for path in sorted((root / "cli").glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if BARE_COUNT.search(line) and ('f"' in line or "f'" in line)]
    assert found == []


# --- f. stats before the first write -------------------------------------------------------


def test_stats_before_the_first_write_is_zeros(
        script_runner: Any, vault: Vault, vault_dir: Path) -> None:
    result = mem(script_runner, "stats", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["exists"] is False and doc["records"] == 0 and doc["sessions"] == 0
    assert doc["user"] == "alice"
    human = mem(script_runner, "stats")
    assert human.returncode == 0 and "records" in human.stdout
    assert user_dirs(vault_dir) == []  # nothing was created to find out


def test_stats_of_a_name_not_in_a_vault_with_users_is_not_found(
        script_runner: Any, vault: Vault) -> None:
    remember.add(vault, FACT, "fact")
    for args, said in ((("--user", "bob"), "its only user is alice"),
                       (("--org", "acme"), "its only org is default")):
        result = mem(script_runner, "stats", *args)
        assert result.returncode == EX_NOINPUT
        assert said in one_error_line(result.stderr)
    assert json.loads(mem(script_runner, "stats", "--json").stdout)["records"] == 1


def test_stats_without_a_vault_says_to_init(script_runner: Any, vault_dir: Path) -> None:
    result = mem(script_runner, "stats")
    assert result.returncode == EX_NOINPUT
    assert "mem init" in one_error_line(result.stderr)


# --- g. passphrase files ---------------------------------------------------------------------


@pytest.fixture
def initialised(script_runner: Any, vault: Vault) -> None:
    remember.add(vault, FACT, "fact")


@pytest.mark.parametrize("kind", ["/dev/zero", "nul", "escape", "huge", "not utf-8",
                                  "folder", "/dev/urandom"])
def test_a_passphrase_file_that_is_no_line_of_text_is_refused(
        initialised: None, tmp_path: Path, kind: str) -> None:
    source = {"nul": b"correct horse\0battery\n", "escape": b"correct \x1b[2Jhorse\n",
              "huge": b"x" * 100_000, "not utf-8": b"correct horse \xff\xfe\n"}
    if kind in source:
        path = tmp_path / "pass"
        path.write_bytes(source[kind])
    elif kind == "folder":
        path = tmp_path
    else:
        path = Path(kind)
    backup = tmp_path / "backup.key"
    result = run("key", "backup", "-o", str(backup), "--passphrase-file", str(path),
                 timeout=30)
    assert result.returncode == EX_USAGE, result.stderr
    line = one_error_line(result.stderr)
    assert "--passphrase-file" in line and str(path) in line
    assert "\x1b" not in line and "\0" not in line
    assert not backup.exists()


def test_restore_refuses_dev_zero_too(initialised: None, tmp_path: Path) -> None:
    backup = tmp_path / "backup.key"
    ok = tmp_path / "pass"
    ok.write_text("correct horse battery\n")
    assert run("key", "backup", "-o", str(backup), "--passphrase-file", str(ok)).returncode == 0
    result = run("key", "restore", str(backup), "--passphrase-file", "/dev/zero", timeout=30)
    assert result.returncode == EX_USAGE
    assert "/dev/zero" in one_error_line(result.stderr)


def test_a_passphrase_from_a_pipe_or_stdin_still_works(
        initialised: None, tmp_path: Path) -> None:
    fifo = tmp_path / "pass.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as fh:
            fh.write("correct horse battery\n")

    writer = threading.Thread(target=write)
    writer.start()
    result = run("key", "backup", "-o", str(tmp_path / "a.key"), "--passphrase-file",
                 str(fifo))
    writer.join(timeout=30)
    assert result.returncode == 0, result.stderr
    piped = run("key", "backup", "-o", str(tmp_path / "b.key"), "--passphrase-file", "-",
                stdin=b"correct horse battery\r\nnext line\n")
    assert piped.returncode == 0, piped.stderr
    opened = run("key", "restore", str(tmp_path / "b.key"), "--passphrase-file", "-",
                 stdin=b"correct horse battery\n")
    assert opened.returncode == 0, opened.stderr
