"""The installed `mem` script: exit codes, the stdout/stderr split, --json documents."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pytest_console_scripts import ScriptRunner

from tests.conftest import mem


@pytest.fixture
def initialised(script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "init", "--json")
    assert result.returncode == 0, result.stderr


def test_help_lists_commands(script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "--help")
    assert result.returncode == 0
    for command in ("init", "add", "show", "list", "pref", "config", "stats", "verify"):
        assert command in result.stdout


def test_help_gives_each_command_its_first_paragraph_on_one_line(
        script_runner: ScriptRunner) -> None:
    """A docstring's first paragraph spans several source lines; the list of commands
    shows it as one sentence, not broken where the source line was."""
    import inspect

    from memvault.cli import app

    groups = [([], app)] + [([g.name], g.typer_instance) for g in app.registered_groups]
    for args, group in groups:
        result = mem(script_runner, *args, "--help", COLUMNS="400")
        rows = [line.strip("│ ").split(None, 1) for line in result.stdout.splitlines()
                if line.startswith("│ ")]
        shown = {row[0]: row[1].rstrip("│ ") for row in rows if len(row) == 2}
        for info in group.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            first = inspect.cleandoc(info.callback.__doc__).split("\n\n")[0]
            want = " ".join(first.split()).replace("\\[", "[")  # rich's markup escape
            assert shown[name] == want, (args, name)


def test_init_json(script_runner: ScriptRunner, vault_dir: Path) -> None:
    result = mem(script_runner, "init", "--json")
    assert result.returncode == 0
    doc = json.loads(result.stdout)
    assert doc["vault"] == str(vault_dir) and doc["user"] == "alice" and doc["org"] == "default"
    assert "master.key" in doc["key_source"]


def test_add_show_list_round_trip(script_runner: ScriptRunner, initialised: None) -> None:
    added = mem(script_runner, "add", "Prefers dark roast", "--type", "preference",
                "--tag", "coffee", "--json")
    assert added.returncode == 0, added.stderr
    doc = json.loads(added.stdout)
    assert set(doc) == {"memory_id", "content_hash", "created_at", "deduplicated",
                        "restated", "supersedes"}
    assert doc["deduplicated"] is False and doc["restated"] is None

    plain = mem(script_runner, "add", "Prefers dark roast", "--type", "preference")
    assert plain.stdout.strip() == doc["memory_id"]  # the id alone on stdout
    assert "already stored" in plain.stderr

    shown = json.loads(mem(script_runner, "show", doc["memory_id"], "--json").stdout)
    assert shown["content"] == "Prefers dark roast" and shown["behavioral"] is True
    assert shown["category"] == "preference" and shown["tags"] == ["coffee"]

    listed = mem(script_runner, "list", "--json", "--tag", "coffee")
    records = json.loads(listed.stdout)["records"]
    assert [r["memory_id"] for r in records] == [doc["memory_id"]]
    table = mem(script_runner, "list")
    assert "Prefers dark roast" in table.stdout and table.returncode == 0


def test_add_reads_stdin(script_runner: ScriptRunner, initialised: None) -> None:
    result = mem(script_runner, "add", "-", "--json", stdin="Born in Porto\n")
    memory_id = json.loads(result.stdout)["memory_id"]
    shown = json.loads(mem(script_runner, "show", memory_id, "--json").stdout)
    assert shown["content"] == "Born in Porto"  # the pipe's newline is not content


def test_pref_commands(script_runner: ScriptRunner, initialised: None) -> None:
    assert mem(script_runner, "pref", "set", "editor", "vim").returncode == 0
    got = mem(script_runner, "pref", "get", "editor")
    assert got.stdout == "vim\n"
    listed = json.loads(mem(script_runner, "pref", "list", "--json").stdout)
    assert listed == {"preferences": {"editor": "vim"}}
    assert mem(script_runner, "pref", "unset", "editor").returncode == 0
    missing = mem(script_runner, "pref", "get", "editor")
    assert missing.returncode == 66 and missing.stdout == ""


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["show", str(uuid.uuid4())], 66),
        (["add", "x", "--type", "opinion"], 2),
        (["add", "   "], 2),
        (["add", "x", "--importance", "3"], 2),
        (["add", "x", "--user", "../../etc"], 2),
        (["list", "--after", "yesterday-ish"], 2),
        (["list", "--no-such-flag"], 2),
    ],
)
def test_exit_codes(script_runner: ScriptRunner, initialised: None, args: list[str],
                    code: int) -> None:
    result = mem(script_runner, *args)
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr


def test_no_vault_is_not_found(script_runner: ScriptRunner) -> None:
    result = mem(script_runner, "list")
    assert result.returncode in (66, 78)  # no vault (66) is checked before the key (78)
    assert result.stderr.count("\n") == 1 and "mem init" in result.stderr


def test_json_is_one_document_and_messages_go_to_stderr(
    script_runner: ScriptRunner, initialised: None
) -> None:
    mem(script_runner, "add", "Same thing")
    dup = mem(script_runner, "add", "Same thing", "--json")
    json.loads(dup.stdout)  # exactly one document, nothing else
    assert "already stored" not in dup.stdout
    stats = json.loads(mem(script_runner, "stats", "--json").stdout)
    assert stats["records"] == 1
    verify = mem(script_runner, "verify", "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True


def test_config_show_says_where_values_come_from(
    script_runner: ScriptRunner, config_dir: Path
) -> None:
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text("org: acme\n")
    doc = json.loads(mem(script_runner, "config", "show", "--json", "--user", "bob").stdout)
    settings = doc["settings"]
    assert settings["user"] == {"value": "bob", "source": "flag --user"}
    assert settings["org"]["value"] == "acme" and settings["org"]["source"].startswith("file")
    assert settings["vault"]["source"] == "env MEM_VAULT"
    path = mem(script_runner, "config", "path")
    assert path.stdout.strip() == str(config_dir / "config.yaml")
    (config_dir / "config.yaml").write_text("org: [broken\n")
    assert mem(script_runner, "config", "show").returncode == 78


def test_env_selects_org_and_user(script_runner: ScriptRunner, initialised: None,
                                  vault_dir: Path) -> None:
    assert mem(script_runner, "add", "hello", MEM_ORG="acme", MEM_USER="zoe").returncode == 0
    assert (vault_dir / "acme" / "zoe" / "CLAUDE.md").exists()
    assert mem(script_runner, "list", "--json", MEM_ORG="acme", MEM_USER="zoe"
               ).returncode == 0
    elsewhere = mem(script_runner, "list", "--json")  # default/alice: no such org
    assert elsewhere.returncode == 66 and "its only org is acme" in elsewhere.stderr


def test_saying_a_replaced_memory_again_makes_it_current_again(
        script_runner: ScriptRunner, initialised: None) -> None:
    def add(*args: str) -> dict[str, str]:
        result = mem(script_runner, "add", *args, "--type", "preference", "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    def current() -> tuple[list[str], str]:
        found = json.loads(mem(script_runner, "search", "prefers", "--json").stdout)
        brief = mem(script_runner, "brief").stdout
        return sorted(r["content"] for r in found["results"]), brief

    tea = add("Prefers tea")
    coffee = add("Prefers coffee", "--supersedes", tea["memory_id"])
    assert current()[0] == ["Prefers coffee"]

    again = add("Prefers tea")
    assert again["deduplicated"] is False and again["restated"] == tea["memory_id"]
    assert again["supersedes"] == coffee["memory_id"]
    assert again["memory_id"] not in (tea["memory_id"], coffee["memory_id"])
    found, brief = current()
    assert found == ["Prefers tea"]
    assert "Prefers tea" in brief and "Prefers coffee" not in brief
    # Said a third time, it is current: stored once.
    assert add("Prefers tea")["deduplicated"] is True
    plain = mem(script_runner, "add", "Prefers coffee", "--type", "preference")
    assert plain.returncode == 0 and "current again" in plain.stderr
    assert current()[0] == ["Prefers coffee"]
    assert mem(script_runner, "verify").returncode == 0


def test_a_repeat_that_names_what_it_replaces_replaces_it(
        script_runner: ScriptRunner, initialised: None) -> None:
    def add(*args: str) -> dict[str, str]:
        result = mem(script_runner, "add", *args, "--json")
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    add("Works at Acme")
    old = add("Lives in Porto")
    new = add("Works at Acme", "--supersedes", old["memory_id"])
    assert new["deduplicated"] is False and new["supersedes"] == old["memory_id"]
    found = json.loads(mem(script_runner, "search", "Porto", "--json").stdout)
    assert found["results"] == []


def test_a_forgotten_memory_said_again_is_a_new_memory(
        script_runner: ScriptRunner, initialised: None) -> None:
    tea = json.loads(mem(script_runner, "add", "Prefers tea", "--json").stdout)
    mem(script_runner, "add", "Prefers coffee", "--supersedes", tea["memory_id"])
    assert mem(script_runner, "forget", tea["memory_id"]).returncode == 0
    again = json.loads(mem(script_runner, "add", "Prefers tea", "--json").stdout)
    assert again["memory_id"] != tea["memory_id"] and again["restated"] is None
    assert mem(script_runner, "show", tea["memory_id"]).returncode == 66


# --- a mistyped user or org -----------------------------------------------------------------

READS = [["search", "tea"], ["list"], ["show", "0190aaaa-0000-7000-8000-000000000000"],
         ["export"], ["stats"], ["audit"], ["verify"], ["brief"], ["pref", "list"],
         ["pref", "get", "editor"], ["pref", "unset", "editor"], ["forget", "--tag", "x"],
         ["freeze"], ["rotate-key"], ["reindex"], ["destroy", "--confirm", "alcie"],
         ["compact"]]


def test_a_mistyped_user_or_org_is_not_found_and_the_names_there_are_are_listed(
        script_runner: ScriptRunner, initialised: None, vault_dir: Path) -> None:
    for user in ("alice", "bob"):
        assert mem(script_runner, "add", "Prefers tea", "--user", user).returncode == 0
    before = sorted(p.relative_to(vault_dir) for p in vault_dir.rglob("*"))
    for args in READS:
        result = mem(script_runner, *args, "--user", "alcie")
        assert result.returncode == 66, (args, result.stderr)
        assert result.stdout == ""
        assert result.stderr == "mem: error: no user alcie in org default; its users: " \
                                "alice, bob (--user)\n", args
    typo = mem(script_runner, "list", "--org", "acem")
    assert typo.returncode == 66 and "no org acem in the vault" in typo.stderr
    assert "its only org is default" in typo.stderr
    assert mem(script_runner, "compact", "--all-users", "--org", "acem").returncode == 66
    # From the environment the name was not typed here: the error says where it came from.
    env = mem(script_runner, "search", "tea", MEM_USER="alcie")
    assert env.returncode == 66 and env.stderr.endswith("(user from MEM_USER)\n")
    # Nothing was created to find out: no user directory, no lock file.
    assert sorted(p.relative_to(vault_dir) for p in vault_dir.rglob("*")) == before


def test_many_users_are_counted_not_listed(script_runner: ScriptRunner, initialised: None,
                                           vault_dir: Path) -> None:
    assert mem(script_runner, "add", "Prefers tea").returncode == 0
    for n in range(11):  # what makes a directory a user, as the vault lists them
        (vault_dir / "default" / f"user{n}").mkdir()
        (vault_dir / "default" / f"user{n}" / "state.json").write_text("{}")
    result = mem(script_runner, "list", "--user", "alcie")
    assert result.returncode == 66 and "it has 12 users" in result.stderr
    assert "user3" not in result.stderr


def test_an_empty_vault_says_the_first_write_creates_the_user(
        script_runner: ScriptRunner, initialised: None) -> None:
    result = mem(script_runner, "search", "tea")
    assert result.returncode == 66
    assert "user alice has no memory yet" in result.stderr
    assert "`mem add`" in result.stderr


def test_the_first_write_to_a_user_says_it_created_them(
        script_runner: ScriptRunner, initialised: None) -> None:
    first = mem(script_runner, "add", "Prefers tea", "--user", "newbie", "--json")
    assert first.returncode == 0
    json.loads(first.stdout)  # the note is on stderr, never in the JSON document
    assert first.stderr == "created user newbie in org default\n"
    again = mem(script_runner, "add", "Prefers coffee", "--user", "newbie")
    assert again.returncode == 0 and again.stderr == ""
    pref = mem(script_runner, "pref", "set", "editor", "vim", "--org", "acme")
    assert pref.returncode == 0 and "created user alice in org acme" in pref.stderr
    quiet = mem(script_runner, "ingest", "-", "--format", "jsonl", "--session", "s",
                "--quiet", "--user", "dora", stdin='{"role": "user", "content": "hi"}\n')
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")  # as promised
    # A dry run writes nothing, and creates no one.
    dry = mem(script_runner, "ingest", "-", "--format", "jsonl", "--session", "s",
              "--dry-run", "--user", "carol", stdin='{"role": "user", "content": "hi"}\n')
    assert dry.returncode == 0 and "created" not in dry.stderr
    assert mem(script_runner, "list", "--user", "carol").returncode == 66
