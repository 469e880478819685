"""Hostile input, generated: every parser mem has (transcripts in each format, generic
JSONL, import documents, config.yaml values, redaction rules, dates and filters) either
accepts its input or refuses it with one of mem's own errors and its documented exit code
(SPEC §6). Any other exception is a crash a user would see as exit 1 "unexpected".

`make test` runs a few examples of each; `make test-faults` runs many (marker `faults`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_console_scripts import ScriptRunner

from memvault.errors import MemError
from memvault.vault.vault import Vault
from tests.conftest import mem

# Exit codes a refusal may carry (SPEC §6): usage, data, not found, refused, config.
DOCUMENTED = {2, 65, 66, 77, 78}

EXAMPLES = [pytest.param(25, id="quick"),
            pytest.param(1500, id="long", marks=pytest.mark.faults)]


def run_property(examples: int, strategy: st.SearchStrategy[Any], check: Any) -> None:
    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def prop(value: Any) -> None:
        try:
            check(value)
        except MemError as exc:
            assert exc.exit_code in DOCUMENTED, (type(exc).__name__, exc.exit_code)
            assert exc.message and "\n" not in exc.message.strip(), exc.message

    prop()


# --- values shaped like what the parsers look for ----------------------------------------

KEYS = ["type", "role", "content", "message", "uuid", "id", "timestamp", "payload",
        "parentUuid", "sessionId", "session_id", "text", "parts", "messages", "items",
        "tags", "name", "speaker", "summary", "isSidechain", "records", "format",
        "memory_id", "created_at", "updated_at", "supersedes", "compacted_from",
        "categories", "settings", "value", "kind", "history", "output", "call_id"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=30),
                    st.sampled_from(["user", "assistant", "system", "tool", "summary",
                                     "message", "response_item", "session_meta",
                                     "2026-05-01T10:00:00Z", "9999-12-31T23:59:59-23:59",
                                     "0001-01-01T00:00:00+01:00", "\x1b]52;c;aGk=\x07",
                                     "fact", "preference", "a" * 300]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner,
                    max_size=6)), max_leaves=20)
LINES = st.lists(st.one_of(JSON.map(json.dumps), st.text(max_size=40)), min_size=1,
                 max_size=6).map("\n".join)
DOCUMENTS = st.one_of(LINES, JSON.map(json.dumps), st.text(max_size=200))


@pytest.mark.parametrize("examples", EXAMPLES)
@pytest.mark.parametrize("fmt", ["auto", "claude-code", "codex", "gemini", "jsonl"])
def test_transcript_parsers_accept_or_refuse_with_a_documented_code(
        examples: int, fmt: str) -> None:
    from memvault.text.transcripts import parse, parse_stream

    def check(text: str) -> None:
        parse(text, fmt)
        if fmt == "codex":
            for _ in parse_stream(line.encode() + b"\n" for line in text.split("\n")):
                pass

    run_property(examples, DOCUMENTS, check)


def _export_like(draw: Any) -> str:
    record = st.fixed_dictionaries({}, optional={k: JSON for k in (
        "memory_id", "type", "content", "tags", "supersedes", "compacted_from", "session_id",
        "created_at", "updated_at", "importance", "role", "message_id", "archived")})
    category = st.fixed_dictionaries({"records": st.lists(record, max_size=3)})
    doc = st.fixed_dictionaries({"format": st.one_of(st.just(1), SCALARS)}, optional={
        "categories": st.dictionaries(st.sampled_from(
            ["learned_context", "preference", "conversation", "work_pattern", "x"]),
            category, max_size=3),
        "settings": st.dictionaries(st.text(max_size=10), JSON, max_size=3)})
    return json.dumps(draw(doc))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_import_documents_are_admitted_or_refused_with_a_documented_code(
        examples: int) -> None:
    from memvault.ops.portability import _parse_import

    run_property(examples, st.one_of(st.composite(_export_like)(), DOCUMENTS),
                 _parse_import)


SETTINGS = ["vault", "org", "user", "key_file", "lock_timeout", "key_command_timeout",
            "brief_max_entries", "brief_max_chars", "log_dir", "actor", "redaction"]
YAML_VALUES = st.one_of(
    SCALARS, st.lists(SCALARS, max_size=3),
    st.sampled_from([".nan", ".inf", "-.inf", "1e999", "&a [1]", "*a", "!!binary aGk=",
                     "{disable: [email], rules: []}", "{phone_region: XX}",
                     "{rules: [{id: r, pattern: '(a+)+', class: 'redact:R'}]}"]))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_config_values_are_taken_or_refused_with_a_documented_code(
        examples: int, config_dir: Path) -> None:
    from memvault.config import resolve
    from memvault.ops.admission import AdmissionPolicy

    config_dir.mkdir(exist_ok=True)

    def check(items: tuple[dict[str, Any], str]) -> None:
        values, raw = items
        text = yaml.safe_dump(values) if values else raw
        (config_dir / "config.yaml").write_text(text)
        AdmissionPolicy(resolve()).config  # noqa: B018 - the redaction rules load

    strategy = st.tuples(st.dictionaries(st.sampled_from(SETTINGS), YAML_VALUES, max_size=3),
                         st.one_of(st.text(max_size=60), YAML_VALUES.map(
                             lambda v: f"lock_timeout: {v}\nbrief_max_entries: {v}\n")))
    run_property(examples, strategy, check)


PATTERN = st.text(alphabet="ab.()[]{}*+?|\\^$-0123456789,:=!<>", max_size=16)


@pytest.mark.parametrize("examples", EXAMPLES)
def test_redaction_rules_are_taken_or_refused_with_a_documented_code(examples: int) -> None:
    from memvault.text.redact import RedactionConfig, rule_from_config, scan

    def check(doc: dict[str, Any]) -> None:
        rule = rule_from_config(doc)
        # A rule that loads runs on text in bounded time (nested repeats were refused).
        scan("ab" * 12 + "a" * 12 + "!", RedactionConfig(extra=(rule,)))

    rule = st.fixed_dictionaries({"id": st.one_of(st.just("r"), SCALARS),
                                  "pattern": st.one_of(PATTERN, SCALARS),
                                  "class": st.one_of(st.sampled_from(
                                      ["refuse", "redact:R", "redact:", "redact:r"]),
                                      SCALARS)},
                                 optional={"positives": st.lists(st.text(max_size=8),
                                                                 max_size=2),
                                           "negatives": st.lists(st.text(max_size=8),
                                                                 max_size=2)})
    run_property(examples, st.one_of(rule, JSON), check)


TIMES = st.one_of(st.text(max_size=30), st.datetimes().map(str),
                  st.sampled_from(["2026-05-01", "2026-05-01T10:00:00Z", "0001-01-01T00:00+01:00",
                                   "9999-12-31T23:59:59-12:00", "2026-13-01", "now", ""]))


@pytest.mark.parametrize("examples", EXAMPLES)
def test_times_are_normalised_or_refused(examples: int) -> None:
    from memvault.model.records import normalise_time, parse_time

    def check(text: str) -> None:
        stored = normalise_time(text)
        # What is stored sorts as a string in time order and reads back as the same time.
        assert stored.endswith("Z") and len(stored) == 27, stored
        assert parse_time(stored) == parse_time(text)

    run_property(examples, TIMES, check)


@pytest.mark.parametrize("examples", [pytest.param(5, id="quick"),
                                      pytest.param(300, id="long", marks=pytest.mark.faults)])
def test_filters_from_the_command_line_exit_with_a_documented_code(
        examples: int, script_runner: ScriptRunner, vault: Vault) -> None:
    from memvault.ops import remember

    remember.add(vault, "A fact to filter", "fact", tags=["t"])
    option = st.sampled_from(["--before", "--after", "--type", "--category", "--tag",
                              "--session", "--limit"])
    value = st.one_of(TIMES, st.sampled_from(["fact", "message", "0", "-1", "10**9", "t"]),
                      st.integers(-5, 10**12).map(str))

    @settings(max_examples=examples, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(st.sampled_from(["list", "search"]),
           st.lists(st.tuples(option, value), max_size=3))
    def prop(command: str, pairs: list[tuple[str, str]]) -> None:
        args = [command, *(["fact"] if command == "search" else [])]
        for name, text in pairs:
            args += [f"{name}={text}"]
        result = mem(script_runner, *args)
        assert result.returncode in {0, *DOCUMENTED}, (args, result.stderr)
        assert "Traceback" not in result.stderr
        if result.returncode and not result.stderr.startswith("Usage:"):
            # mem's own refusal is one line; the option parser's (exit 2) shows usage.
            assert len(result.stderr.splitlines()) == 1, result.stderr
            assert result.stderr.startswith("mem: error: "), result.stderr

    prop()
