"""memvault.text.redact: the rule table, refusals, placeholders, JSON-escaped input, user rules.

Every secret here is a fake: fixed fixtures come from the rule table, random ones from the
per-rule generators below (the right alphabet and length, random content).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import random
import re
import string
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memvault.errors import ConfigError
from memvault.text import redact
from memvault.text._detect_secrets_patterns import DETECT_SECRETS_VERSION, PATTERNS
from memvault.text.redact import RedactionConfig, Rule, rule_from_config, rules, scan
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[1]
TABLE = redact.builtin_rules()
REFUSE = [r for r in TABLE if r.action == "refuse"]
REDACT = [r for r in TABLE if r.action == "redact"]
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"
HEX = "0123456789abcdef"


# ---------------------------------------------------------------------------------------------
# The table and its sources


def test_table_rows_are_complete() -> None:
    ids = [r.id for r in TABLE]
    assert len(ids) == len(set(ids))
    for rule in TABLE:
        assert redact.RULE_ID_RE.fullmatch(rule.id), rule.id
        assert redact.TYPE_RE.fullmatch(rule.type), rule.id
        assert rule.action in ("refuse", "redact")
        assert rule.positives and rule.negatives and rule.source, rule.id


@pytest.mark.parametrize("rule", TABLE, ids=lambda r: r.id)
def test_rule_catches_its_positives_and_not_its_negatives(rule: Rule) -> None:
    for i, text in enumerate(rule.positives):
        assert rule.spans(text), f"{rule.id}: positive #{i} not matched"
        assert scan(text).counts.get(rule.id, 0) >= 1, f"{rule.id}: scan missed positive #{i}"
    for i, text in enumerate(rule.negatives):
        assert not rule.spans(text), f"{rule.id}: negative #{i} matched"
        assert rule.id not in scan(text).counts, f"{rule.id}: scan matched negative #{i}"


def test_every_detect_secrets_regex_plugin_is_used_or_excluded_with_a_reason() -> None:
    plugins = {name for name, _, _, _ in PATTERNS}
    used = {name for name in plugins for r in TABLE if f" {name}" in r.source}
    assert used | set(redact.DETECT_SECRETS_EXCLUDED) == plugins
    assert not used & set(redact.DETECT_SECRETS_EXCLUDED)
    assert all(f"detect-secrets {DETECT_SECRETS_VERSION}" in r.source
               for r in TABLE if any(f" {name}" in r.source for name in used))


def test_private_key_rule_covers_every_detect_secrets_header() -> None:
    """detect-secrets flags these headers alone; private-key needs key material after them."""
    rule = next(r for r in TABLE if r.id == "private-key")
    putty = next(r for r in TABLE if r.id == "putty-private-key")
    body = "\n".join("".join(random.Random(i).choices(B64, k=64)) for i in range(4))
    headers = [p for name, _, p, _ in PATTERNS if name == "PrivateKeyDetector"]
    assert headers
    for header in headers:
        if header.startswith("PuTTY"):
            assert putty.spans(f"{header}: ssh-rsa\nEncryption: none\n{body}"), header
            continue
        kind = header.removeprefix("BEGIN ")
        block = f"-----{header}-----\n{body}\n-----END {kind}-----"
        assert rule.spans(block), header
        assert scan(block).refused
        assert not rule.spans(f'HEADER = "-----{header}-----"'), header


def _generator_module() -> object:
    spec = importlib.util.spec_from_file_location("_generate", ROOT / "scripts" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_detect_secrets_patterns_are_fresh() -> None:
    """src/memvault/text/_detect_secrets_patterns.py matches the installed detect-secrets."""
    pytest.importorskip("detect_secrets")
    expected = _generator_module().render_detect_secrets_patterns()  # type: ignore[attr-defined]
    current = (ROOT / "src" / "memvault" / "text" / "_detect_secrets_patterns.py").read_text(
        encoding="utf-8")
    assert current == expected, (
        "src/memvault/text/_detect_secrets_patterns.py is stale relative to the installed "
        "detect-secrets; run `make completions` (scripts/generate.py)")


def test_importing_redact_pulls_in_neither_detect_secrets_nor_phonenumbers() -> None:
    code = ("import sys, memvault.text.redact as r\n"
            "r.scan('no digits here, mail ana@example.com')\n"
            "print('detect_secrets' in sys.modules, 'phonenumbers' in sys.modules)\n"
            "r.scan('call +1 415-555-2671')\n"
            "print('phonenumbers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False", "True"]


# ---------------------------------------------------------------------------------------------
# Refusals: random fakes for every refuse rule, bare and embedded


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _pem(rng: random.Random) -> str:
    kind = rng.choice(["RSA ", "EC ", "DSA ", "OPENSSH ", "", "ENCRYPTED "])
    lines = [_pick(rng, B64, 64) for _ in range(rng.randint(3, 20))]
    lines.append(_pick(rng, B64, rng.randint(8, 60)) + "=" * rng.randint(0, 2))
    if rng.random() < 0.3:  # PGP armour with headers
        return ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
                + "\n".join(lines) + "\n=" + _pick(rng, B64, 4)
                + "\n-----END PGP PRIVATE KEY BLOCK-----")
    return (f"-----BEGIN {kind}PRIVATE KEY-----\n" + "\n".join(lines)
            + f"\n-----END {kind}PRIVATE KEY-----")


def _putty(rng: random.Random) -> str:
    pub = [_pick(rng, B64, 64) for _ in range(rng.randint(2, 6))]
    priv = [_pick(rng, B64, 64) for _ in range(rng.randint(4, 14))]
    return (f"PuTTY-User-Key-File-{rng.choice('23')}: {rng.choice(['ssh-rsa', 'ssh-ed25519'])}\n"
            f"Encryption: none\nComment: key-{rng.randint(1, 9999)}\n"
            f"Public-Lines: {len(pub)}\n" + "\n".join(pub)
            + f"\nPrivate-Lines: {len(priv)}\n" + "\n".join(priv)
            + f"\nPrivate-MAC: {_pick(rng, HEX, 40)}")


def _authorization(rng: random.Random) -> str:
    token = _pick(rng, ALNUM + "-._~+/", rng.randint(20, 80))
    basic = base64.b64encode(f"user{rng.randint(1, 99)}:{_pick(rng, ALNUM, 12)}".encode())
    name = rng.choice(["Authorization", "authorization", "AUTHORIZATION", "Proxy-Authorization"])
    value = rng.choice([f"Bearer {token}", f"token {_pick(rng, ALNUM, 40)}",
                        f"Basic {basic.decode()}", _pick(rng, ALNUM, 40)])
    return f"{name}: {value}"


def _jwt(rng: random.Random) -> str:
    def part(doc: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")

    return ".".join([part({"alg": "HS256", "typ": "JWT"}),
                     part({"sub": str(rng.randint(1, 10**9)), "iat": rng.randint(1, 2**31)}),
                     _pick(rng, URLSAFE, 43)])


def _bearer(rng: random.Random) -> str:
    token = rng.choice([_pick(rng, ALNUM + "-._~+/", rng.randint(20, 200)), _jwt(rng)])
    return f"{rng.choice(['Bearer', 'bearer', 'BEARER'])} {token}"


def _aws_access(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return "A3T" + _pick(rng, string.ascii_uppercase + string.digits, 1) + _pick(
            rng, string.ascii_uppercase + "234567", 16)
    return rng.choice(["AKIA", "ASIA", "ABIA", "ACCA"]) + _pick(
        rng, string.ascii_uppercase + "234567", 16)


def _aws_secret(rng: random.Random) -> str:
    name = rng.choice(["aws_secret_key", "AWS_SECRET_ACCESS_KEY", "aws_token", "awsPassword"])
    quote = rng.choice("'\"")
    return f"{name} = {quote}{_pick(rng, ALNUM + '/+', 40)}{quote}"


def _aws_secret_assignment(rng: random.Random) -> str:
    name = rng.choice(["aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "AwsSecretKey"])
    return f"{name}{rng.choice(['=', ' = ', ': '])}{_pick(rng, ALNUM + '/+', 40)}"


def _azure(rng: random.Random) -> str:
    return (f"DefaultEndpointsProtocol=https;AccountName=acct{rng.randint(1, 999)};"
            f"AccountKey={_pick(rng, B64, 86)}==;EndpointSuffix=core.windows.net")


def _ibm_iam(rng: random.Random) -> str:
    name = rng.choice(["ibm_cloud_iam_api_key", "IBM_API_KEY", "iam_apikey", "cloud_iam_key"])
    return f'{name} = "{_pick(rng, URLSAFE, 44)}"'


def _ibm_hmac(rng: random.Random) -> str:
    name = rng.choice(["cos_hmac_secret_access_key", "secret_access_key", "ibm_cos_secret_key"])
    return f'{name}: "{_pick(rng, HEX, 48)}"'


def _github(rng: random.Random) -> str:
    return rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + _pick(rng, ALNUM, 36)


def _github_fine(rng: random.Random) -> str:
    return f"github_pat_{_pick(rng, ALNUM, 22)}_{_pick(rng, ALNUM, 59)}"


def _gitlab(rng: random.Random) -> str:
    return rng.choice([f"glpat-{_pick(rng, URLSAFE, rng.randint(20, 50))}",
                       f"gldt-{_pick(rng, URLSAFE, 20)}", f"glrt-{_pick(rng, URLSAFE, 20)}",
                       f"GR1348941{_pick(rng, URLSAFE, 20)}", f"glptt-{_pick(rng, HEX, 40)}",
                       f"glimt-{_pick(rng, URLSAFE, 25)}", f"gloas-{_pick(rng, URLSAFE, 64)}"])


def _openai(rng: random.Random) -> str:
    return f"sk-{_pick(rng, ALNUM, 20)}T3BlbkFJ{_pick(rng, ALNUM, 20)}"


def _openai_project(rng: random.Random) -> str:
    kind = rng.choice(["proj", "svcacct", "admin"])
    if rng.random() < 0.5:
        return f"sk-{kind}-{_pick(rng, URLSAFE, 74)}T3BlbkFJ{_pick(rng, URLSAFE, 74)}"
    return f"sk-{kind}-{_pick(rng, URLSAFE, rng.randint(48, 160))}"


def _anthropic(rng: random.Random) -> str:
    kind = rng.choice(["api03", "admin01", "oat01"])
    return f"sk-ant-{kind}-{_pick(rng, URLSAFE, 93)}AA"


def _huggingface(rng: random.Random) -> str:
    return rng.choice(["hf_", "api_org_"]) + _pick(rng, string.ascii_letters, 34)


FAKES: dict[str, Callable[[random.Random], str]] = {
    "private-key": _pem, "putty-private-key": _putty, "authorization-header": _authorization,
    "bearer-token": _bearer, "aws-access-key": _aws_access, "aws-secret-key": _aws_secret,
    "aws-secret-key-assignment": _aws_secret_assignment, "azure-storage-key": _azure,
    "gcp-api-key": lambda rng: "AIza" + _pick(rng, URLSAFE, 35),
    "ibm-cloud-iam-key": _ibm_iam, "ibm-cos-hmac-key": _ibm_hmac, "github-token": _github,
    "github-fine-grained-pat": _github_fine, "gitlab-token": _gitlab,
    "openai-api-key": _openai, "openai-project-key": _openai_project,
    "anthropic-api-key": _anthropic, "huggingface-token": _huggingface,
}
CONTEXTS: dict[str, Callable[[str], str]] = {
    "bare": lambda s: s,
    "prose": lambda s: f"Sure, here is what you asked for:\n{s}\nLet me know if it works.",
    "code": lambda s: f'def connect():\n    secret = """{s}"""\n    return Client(secret)\n',
    "json-line": lambda s: json.dumps({"role": "user", "content": f"use this: {s} thanks"}),
    "json-body": lambda s: json.dumps(f"tool said:\n{s}\n")[1:-1],
    "json-in-json": lambda s: json.dumps(
        {"type": "tool_result", "content": json.dumps({"stdout": f"{s}\n", "code": 0})}),
}


def test_every_refuse_rule_has_a_fake_generator() -> None:
    assert set(FAKES) == {r.id for r in REFUSE}


@pytest.mark.parametrize("rule_id", sorted(FAKES))
@pytest.mark.parametrize("context", sorted(CONTEXTS))
def test_random_fakes_are_refused_everywhere(rule_id: str, context: str) -> None:
    rng = random.Random(f"{rule_id}/{context}")
    for i in range(5):
        fake = FAKES[rule_id](rng)
        result = scan(CONTEXTS[context](fake))
        assert rule_id in result.refused, f"{rule_id} fake #{i} not refused in {context}"
        for line in fake.splitlines():  # the report shows no part of the secret
            if len(line) >= 24:
                assert line not in result.text, f"{rule_id} fake #{i} leaks in {context}"


# ---------------------------------------------------------------------------------------------
# False refusals and false redactions on benign text


def _code_lines(limit: int) -> list[str]:
    site = Path(sysconfig.get_paths()["purelib"])
    roots = [ROOT / "src" / "memvault"] + [
        site / n for n in ("rich", "click", "yaml", "typer", "_pytest", "platformdirs", "pip")]
    skip = {"redact.py", "_detect_secrets_patterns.py"}
    lines: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.name in skip:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            lines += [line for line in text.splitlines() if len(line.strip()) > 8]
    rng = random.Random(11)
    return rng.sample(lines, min(limit, len(lines)))


def _structured(rng: random.Random) -> dict[str, list[str]]:
    def date() -> str:
        y, m, d = rng.randint(1990, 2035), rng.randint(1, 12), rng.randint(1, 28)
        return rng.choice([f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{m}/{d}/{y}",
                           f"{y}.{m:02d}.{d:02d}", f"{d}.{m}.{y}",
                           f"{y}-{m:02d}-{d:02d}T{rng.randint(0, 23):02d}:00:00Z"])

    def version() -> str:
        parts = [str(rng.randint(0, 40)) for _ in range(rng.randint(2, 4))]
        return rng.choice(["v", "", "version "]) + ".".join(parts)

    def ip() -> str:
        return ".".join(str(rng.randint(0, 255)) for _ in range(4))

    return {
        "git-sha": [f"{rng.getrandbits(160):040x}" for _ in range(600)],
        "uuid": [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(500)],
        "base64": [base64.b64encode(rng.randbytes(rng.choice([8, 16, 24, 32, 33, 48, 64, 100,
                                                               256, 512]))).decode()
                   for _ in range(600)],
        "base64url": [base64.urlsafe_b64encode(rng.randbytes(rng.randint(8, 300))).decode()
                      for _ in range(300)],
        "date": [date() for _ in range(300)],
        "time": [f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
                 + rng.choice(["", f".{rng.randint(0, 999999):06d}"]) for _ in range(200)],
        "version": [version() for _ in range(300)],
        "ip": [ip() + rng.choice(["", f":{rng.randint(1, 65535)}"]) for _ in range(300)],
        "price": [f"{rng.choice(['$', '€', '£', ''])}{rng.randint(0, 10**6):,}."
                  f"{rng.randint(0, 99):02d}" for _ in range(300)],
        "order": [rng.choice([f"order #{rng.randint(10**5, 10**8)}",
                              f"ORD-{rng.randint(2015, 2030)}-{rng.randint(0, 999999):06d}",
                              f"invoice {rng.randint(1000, 99999)}/{rng.randint(2015, 2030)}"])
                  for _ in range(300)],
        "number": [str(rng.choice([rng.randint(0, 10**7), rng.random() * 10**rng.randint(0, 8),
                                   1_600_000_000 + rng.randint(0, 10**8)]))
                   for _ in range(300)],
    }


WORDS = ("we shipped the fix on build after the review and the latency dropped to about "
         "ms for most users while the cache hit rate rose from percent the meeting moved "
         "to next week the invoice total is due by order number version was released on "
         "with checksum at the office the server at responded").split()


def _prose(rng: random.Random, structured: dict[str, list[str]]) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 30))]
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(sorted(structured))
        words.insert(rng.randrange(len(words)), rng.choice(structured[kind]))
    return " ".join(words).capitalize() + "."


def benign_corpus() -> dict[str, list[str]]:
    rng = random.Random(2024)
    corpus = {"code": _code_lines(2500)}
    structured = _structured(rng)
    corpus.update(structured)
    corpus["prose"] = [_prose(rng, structured) for _ in range(800)]
    return corpus


def test_false_refusals_and_redactions_on_a_benign_corpus(
        capsys: pytest.CaptureFixture[str]) -> None:
    corpus = benign_corpus()
    total = sum(len(v) for v in corpus.values())
    assert total >= 5000
    refused: list[tuple[str, list[str]]] = []
    phones: dict[str, int] = {}
    emails: dict[str, int] = {}
    for kind, samples in corpus.items():
        for sample in samples:
            result = scan(sample)
            if result.refused:
                refused.append((kind, result.refused))
            if "phone" in result.counts:
                phones[kind] = phones.get(kind, 0) + 1
            if "email" in result.counts:
                emails[kind] = emails.get(kind, 0) + 1
    rate = len(refused) / total
    with capsys.disabled():
        print(f"\nbenign corpus: {total} samples; false refusals {len(refused)} "
              f"({rate:.3%}) {refused[:5]}; phone redactions {sum(phones.values())} "
              f"{phones}; email redactions {sum(emails.values())} {emails}")
    assert rate <= 0.001, refused
    # Dates, times, versions, SHAs, UUIDs, blobs, addresses, prices and order numbers are
    # never phone numbers or emails; prose mixes them with words.
    structured = set(corpus) - {"code"}
    assert not structured & set(phones), phones
    assert not structured & set(emails), emails
    # Code lines may hold real addresses (authors) but few phone-shaped runs.
    assert phones.get("code", 0) / len(corpus["code"]) < 0.002


# ---------------------------------------------------------------------------------------------
# Placeholders, counts, configuration


def test_email_placeholder() -> None:
    result = scan("mail me at ana@example.com")
    assert result.text == "mail me at <REDACTED:EMAIL>"
    assert result.counts == {"email": 1} and result.clean and result.refused == []


def test_phone_placeholder() -> None:
    assert scan("+1 415-555-2671").text == "<REDACTED:PHONE>"
    assert scan("call (415) 555-2671 today").text == "call <REDACTED:PHONE> today"
    assert scan("415-555-2671 415.555.2672").text == "<REDACTED:PHONE> <REDACTED:PHONE>"
    assert scan("MAX = 2147483647").text == "MAX = 2147483647"


def test_counts_per_rule() -> None:
    jwt = next(r for r in TABLE if r.id == "jwt").positives[0]
    text = (f"ana@example.com and bo@example.org called +1 415-555-2671 with {jwt}, "
            "then ana@example.com again")
    result = scan(text)
    assert result.counts == {"email": 3, "phone": 1, "jwt": 1}
    assert result.text == ("<REDACTED:EMAIL> and <REDACTED:EMAIL> called <REDACTED:PHONE> "
                           "with <REDACTED:JWT>, then <REDACTED:EMAIL> again")
    assert [f.rule for f in result.findings] == ["email", "email", "phone", "jwt", "email"]


def test_refused_text_keeps_no_secret_and_names_the_rules() -> None:
    key = _github(random.Random(1))
    result = scan(f"token {key} for ana@example.com")
    assert result.refused == ["github-token"] and not result.clean
    assert key not in result.text and key not in repr(result)
    assert result.text == "token <REDACTED:GITHUB_TOKEN> for <REDACTED:EMAIL>"


def test_disabled_rules_do_not_fire() -> None:
    config = RedactionConfig(disabled=frozenset({"email"}))
    assert "email" not in {r.id for r in rules(config)}
    result = scan("ana@example.com +1 415-555-2671", config)
    assert result.text == "ana@example.com <REDACTED:PHONE>"


def test_refuse_rules_cannot_be_disabled_and_unknown_ids_are_errors() -> None:
    with pytest.raises(ConfigError, match="cannot be disabled"):
        scan("x", RedactionConfig(disabled=frozenset({"private-key"})))
    with pytest.raises(ConfigError, match="unknown redaction rule"):
        rules(RedactionConfig(disabled=frozenset({"emial"})))


def test_extra_user_rules() -> None:
    ticket = rule_from_config({"id": "ticket", "pattern": r"\bTKT-\d{4,}\b",
                               "class": "redact:TICKET", "positives": ["see TKT-12345"],
                               "negatives": ["TKT-1"]})
    vault = rule_from_config({"id": "vault-token", "pattern": r"\bhvs\.[A-Za-z0-9]{24,}",
                              "class": "refuse"})
    config = RedactionConfig(extra=(ticket, vault))
    assert [r.id for r in rules(config)][-2:] == ["ticket", "vault-token"]
    assert scan("see TKT-12345 now", config).text == "see <REDACTED:TICKET> now"
    result = scan("VAULT_TOKEN=hvs." + "a1B2" * 7, config)
    assert result.refused == ["vault-token"] and result.text == "VAULT_TOKEN=<REDACTED:VAULT_TOKEN>"
    with pytest.raises(ConfigError, match="defined twice"):
        rules(RedactionConfig(extra=(ticket, ticket)))


@pytest.mark.parametrize("doc, message", [
    ({"pattern": "x", "class": "refuse"}, "needs an id"),
    ({"id": "Bad Id", "pattern": "x", "class": "refuse"}, "needs an id"),
    ({"id": "email", "pattern": "x", "class": "refuse"}, "built-in"),
    ({"id": "r", "pattern": "x", "class": "block"}, "class must be"),
    ({"id": "r", "pattern": "x", "class": "redact:lower"}, "class must be"),
    ({"id": "r", "pattern": "x", "class": "redact"}, "class must be"),
    ({"id": "r", "class": "refuse"}, "pattern must be"),
    ({"id": "r", "pattern": "(unclosed", "class": "refuse"}, "does not compile"),
    ({"id": "r", "pattern": "a*", "class": "refuse"}, "empty string"),
    ({"id": "r", "pattern": "x", "class": "refuse", "colour": "red"}, "unknown key"),
    ({"id": "r", "pattern": "secret-[0-9]+", "class": "refuse", "positives": ["secret-x"]},
     "positive example 1"),
    ({"id": "r", "pattern": "sec", "class": "refuse", "negatives": ["a secret"]},
     "negative example 1"),
    ({"id": "r", "pattern": "x", "class": "refuse", "positives": "x"}, "list of strings"),
])
def test_bad_user_rules_raise_config_error(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        rule_from_config(doc)  # type: ignore[arg-type]
    pattern = doc.get("pattern")
    if isinstance(pattern, str) and len(pattern) > 3:
        assert pattern not in str(err.value)  # a user pattern may itself be a secret
    assert "secret-x" not in str(err.value)


def test_rule_and_finding_reprs_carry_no_pattern_or_secret() -> None:
    rule = rule_from_config({"id": "my-password", "pattern": "hunter2-[0-9]+",
                             "class": "refuse"})
    assert "hunter2" not in repr(rule)
    result = scan("pw hunter2-42", RedactionConfig(extra=(rule,)))
    assert "hunter2" not in repr(result) and "hunter2" not in repr(result.findings)
    for builtin in TABLE:
        assert all(p not in repr(builtin) for p in builtin.positives)


PHONE_REGIONS = ["US", "GB", "DE", "FR", "IN", "JP", "BR", "AU", "CN", "ES", "NL", "SE", "CH"]


@pytest.mark.parametrize("region", PHONE_REGIONS)
def test_phone_prefilters_drop_nothing_the_matcher_finds(region: str) -> None:
    """find_phones asks phonenumbers only about some runs; it must find what the matcher
    finds on the whole text: example numbers in every format, and random digit runs."""
    import phonenumbers
    from phonenumbers import PhoneNumberFormat as F
    from phonenumbers import PhoneNumberType as T

    rng = random.Random(region)
    texts = []
    for kind in (T.FIXED_LINE, T.MOBILE, T.TOLL_FREE):
        example = phonenumbers.example_number_for_type(region, kind)
        if example is None:
            continue
        for fmt in (F.NATIONAL, F.INTERNATIONAL, F.E164):
            formatted = phonenumbers.format_number(example, fmt)
            texts += [f"call {formatted} now", f"tel: {formatted}.", f"({formatted})",
                      f'{{"phone": "{formatted}"}}', f"{formatted} or {formatted}"]
    texts += [f"id {rng.randint(10 ** (n - 1), 10**n - 1)} ok" for n in range(7, 13)
              for _ in range(40)]
    texts += [" ".join(str(rng.randint(10, 9999)) for _ in range(rng.randint(2, 6)))
              for _ in range(200)]
    assert len(texts) > 300
    for text in texts:
        expected = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(
            text, region, leniency=phonenumbers.Leniency.STRICT_GROUPING)]
        assert redact.find_phones(text, region) == expected, text


def test_phone_region() -> None:
    uk = "ring 020 7946 0958 today"
    assert "phone" not in scan(uk).counts
    assert scan(uk, RedactionConfig(phone_region="GB")).text == "ring <REDACTED:PHONE> today"
    assert scan("ring +44 20 7946 0958").counts == {"phone": 1}  # + parses anywhere
    with pytest.raises(ConfigError, match="phone region"):
        scan("x", RedactionConfig(phone_region="usa"))
    with pytest.raises(ConfigError, match="invalid phone region 'XX'"):
        # Well formed but no region: every number without + would go unredacted.
        scan("x", RedactionConfig(phone_region="XX"))


# ---------------------------------------------------------------------------------------------
# JSON-escaped input


def test_placeholders_land_in_the_escaped_text() -> None:
    line = json.dumps({"role": "user", "content": "hi\n+1 415-555-2671\nana@example.com\t!"})
    result = scan(line)
    assert result.counts == {"phone": 1, "email": 1}
    assert json.loads(result.text)["content"] == "hi\n<REDACTED:PHONE>\n<REDACTED:EMAIL>\t!"


def test_json_body_and_json_in_json() -> None:
    inner = json.dumps({"stdout": "contact: \"ana@example.com\"\n" + _pem(random.Random(3))})
    outer = json.dumps({"type": "tool_result", "content": inner})
    result = scan(outer)
    assert result.refused == ["private-key"]
    assert "ana@example.com" not in result.text
    body = json.dumps("mail ana@example.com\nor bo@example.org")[1:-1]
    assert scan(body).text == "mail <REDACTED:EMAIL>\\nor <REDACTED:EMAIL>"


def test_escape_decoding_and_offsets_agree_with_json() -> None:
    rng = random.Random(5)
    pieces = ["a", "\\\\", '\\"', "\\n", "\\u0041", "\\u00e9", "\\/", "n", "u", "\\t", " "]
    checked = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        decoded = json.loads(f'"{text}"')
        indexed, counted = redact._Decoded(text), redact._Decoded(text, valid=True)
        assert indexed.text == counted.text == decoded
        for pos in range(len(decoded) + 1):
            src = indexed.to_source(pos)
            assert src == counted.to_source(pos)
            assert json.loads(f'"{text[src:]}"') == decoded[pos:]
            checked += 1
    assert checked > 10_000


# ---------------------------------------------------------------------------------------------
# Properties


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400)
       | st.text(alphabet='\\"nu0123456789abcdef+-() .@:/\n', max_size=400))
@pytest.mark.slow
def test_scan_never_raises(text: str) -> None:
    result = scan(text)
    assert isinstance(result.text, str)
    assert result.clean == (not result.refused)


_PIECES = st.one_of(
    st.text(max_size=30),
    st.sampled_from([" ", "\n", "\\n", '\\"', '"', ":", "=", ".", "@", "+1 ", "(", ")"]),
    st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,6})?@[a-z]{2,9}\.(com|org|io|co\.uk)", fullmatch=True),
    st.from_regex(r"\+1 [2-9]\d\d-[2-9]\d\d-\d{4}", fullmatch=True),
    st.from_regex(r"\([2-9]\d\d\) [2-9]\d\d-\d{4}", fullmatch=True),
    st.builds(lambda seed: _jwt(random.Random(seed)), st.integers()),
    st.from_regex(r"sk_live_[A-Za-z0-9]{24}", fullmatch=True),
    st.from_regex(r"https://[a-z]{3,8}:[A-Za-z0-9]{6,12}@[a-z]{3,8}\.com", fullmatch=True),
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=12).map("".join))
# One JSON string body: the raw form's "n@0.AA" (the escape's letter, then "@0.AA") is
# email-shaped, the decoded form (a line break, then "@0.AA") is not; both must be scanned.
@pytest.mark.slow
@example("\\n@0.AA")
def test_redacted_text_never_contains_what_a_redact_rule_matched(text: str) -> None:
    result = scan(text)
    for rule in REDACT:
        for start, end in rule.spans(text):
            secret = text[start:end]
            if len(secret) >= 6 and text.count(secret) == 1 and "<REDACTED:" not in secret:
                assert secret not in result.text, (rule.id, secret)


_SECRETISH = st.one_of(
    _PIECES,
    st.builds(lambda seed, cut: _pem(random.Random(seed))[:cut], st.integers(),
              st.integers(60, 2000)),
    st.builds(lambda seed, rid: FAKES[rid](random.Random(seed)), st.integers(),
              st.sampled_from(sorted(FAKES))),
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_SECRETISH, max_size=6).map("".join), min_size=1, max_size=4),
       st.booleans())
# A key cut after an escaped quote: the key's match must end there, not run on through the
# closing quote into the next JSON string.
@pytest.mark.slow
@example([_pem(random.Random(0))[:60] + '"', ""], False)
def test_redacting_a_json_line_keeps_it_json(values: list[str], nested: bool) -> None:
    doc: object = {f"k{i}": v for i, v in enumerate(values)}
    if nested:
        doc = {"type": "tool_result", "content": json.dumps(doc)}
    line = json.dumps(doc)
    result = scan(line)
    json.loads(result.text)  # placeholders never split an escape or eat a quote


def test_rule_patterns_compile_without_detect_secrets_flags_drift() -> None:
    # The generated flags are plain re flags; a pattern that needs another flag would fail.
    for name, _, pattern, flags in PATTERNS:
        assert re.compile(pattern, flags), name


_ANCHORS = sorted({a for r in redact.rules() for a in r.anchors})


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_ANCHORS), st.text(min_size=0, max_size=12),
                          st.sampled_from([" ", "=", ":", "\n", "_", "-", "A", "0"])),
                max_size=12))
def test_the_anchor_gate_never_hides_a_match(parts: list[str]) -> None:
    """The one-pass anchor gate is only a shortcut: every rule finds exactly what it
    finds when asked directly."""
    text = "".join(parts)
    active = redact._active(redact.RedactionConfig())
    lower = redact.lowered(text)
    direct = sorted((s, e, r.id) for r in active for s, e in r.spans(text, "US", lower))
    gated = sorted((s, e, r.id) for s, e, r in redact._find(text, active, "US"))
    assert gated == direct


# ---------------------------------------------------------------------------------------------
# Credentials written as assignments: the value is masked, the key name stays

CRED_KEYS = ["password", "DB_PASSWORD", "dbPassword", "db-password", "PGPASSWORD",
             "MYSQL_ROOT_PASSWORD", "passwd", "passphrase", "secret", "client_secret",
             "clientSecret", "AWS_SECRET", "api_key", "apiKey", "API-KEY", "x-api-key",
             "access_key", "signing_key", "auth_token", "accessToken", "SLACK_TOKEN",
             "refresh_token", "credentials", "DB_PASS", "SMTP_PW", "Pwd", "app.secret",
             "SECRET_2"]
# Each writes KEY and VALUE as one language or file format does.
FORMS = {
    "shell": 'export {key}="{value}"',
    "shell-bare": "{key}={value} ./run.sh",
    "dotenv": "# db\n{key}={value}\nDEBUG=1",
    "yaml": "db:\n  {key}: {value}\n  port: 5432",
    "yaml-quoted": "{key}: '{value}'",
    "json": '{{"user": "app", "{key}": "{value}", "port": 5432}}',
    "toml": '[db]\n{key} = "{value}"',
    "python": 'connect(host="db", {key}="{value}")',
    "python-environ": 'os.environ["{key}"] = "{value}"',
    "js": "const cfg = {{ {key}: '{value}', retries: 3 }};",
    "go": '{key} := "{value}"',
    "php": "$cfg['{key}'] => '{value}',",
    "arrow": "{key} -> {value}",
    "makefile": "{key} ?= {value}",
    "flag": "mytool --{key}={value} --verbose",
    "ado": "Server=db.internal;Database=app;User Id=sa;{key}={value};Encrypt=true",
    "query": "jdbc:mysql://db/app?user=app&{key}={value}&ssl=true",
    "xml": "<config><{key}>{value}</{key}></config>",
    "nested": 'conn = "Host=db;{key}={value};Port=5432"',
}
PASSWORD_CHARS = ALNUM + "!#%^*_-+=.~@"


def fake_password(rng: random.Random) -> str:
    """A password as people pick them: letters, then digits and symbols somewhere."""
    body = "".join(rng.choice(PASSWORD_CHARS) for _ in range(rng.randint(8, 28)))
    return rng.choice(string.ascii_letters) + body + rng.choice(string.digits)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_credential_assignment_masks_the_value_and_keeps_the_key(form: str) -> None:
    rng = random.Random(form)
    for key in CRED_KEYS:
        for _ in range(3):
            value = fake_password(rng)
            text = FORMS[form].format(key=key, value=value)
            result = scan(text)
            assert value not in result.text, (form, key, result.text)
            assert key in result.text and "<REDACTED:SECRET>" in result.text, (form, key)
            assert not result.refused  # masked, not refused: the rest of the text is kept


@pytest.mark.parametrize("value", [
    "hunter2hunter2", "Xk9#mQ2$vL8pZr", "correct horse battery staple", "Pa55w0rd!",
    "s3cr3t-Passw0rd", "tr0ub4dor&3", "ÉtéSecret42", "ABCD-1234-EFGH-5678"])
def test_a_password_of_any_shape_is_masked_when_quoted(value: str) -> None:
    for text in (f'password = "{value}"', f"DB_PASSWORD='{value}'", f'{{"password": "{value}"}}'):
        result = scan(text)
        assert value not in result.text and "password" in result.text.lower(), text


@pytest.mark.parametrize("text", [
    "password=<your-password>", "PASSWORD=${PASSWORD}", "password=$DB_PASS",
    'password = os.environ["PASSWORD"]', 'password = os.getenv("DB_PASSWORD")',
    "password: str", "password: Optional[str] = None", "password = None", 'password = ""',
    "password = ''", "password: null", "password = true", "secret = false",
    "password_hash = 'pbkdf2'", "token_count = 12", "max_tokens: 4096", "tokens: 1200",
    "the password: is it safe?", "Password: see the vault", "api_key: YOUR_API_KEY",
    "API_KEY=your-api-key-here", "password: '********'", "password: xxxxxxxx",
    "password = password", "token = tokenizer.encode(text)", "secret=match,",
    "password: {{ vault_db_password }}", "password: %(password)s", "PWD=/home/alice/proj",
    "const apiKey = process.env.API_KEY;", 'Password: os.Getenv("DB_PASSWORD"),',
    "def __init__(self, password: bytes):", "private_key: PKCS7PrivateKeyTypes,",
    '"token": "the"', '"auth": "required"', '"token": "hmac-sha256-128-hex"', "access_token_url = 'https://x.example/t'",
    "* 1-day pass: ¥600 (about $5.50)", "password: !vault |", "secret_name: prod-db",
    "--password=-", "password: [REDACTED]", "password: <REDACTED:PASSWORD>",
    '"passphrase": "there is no terminal to ask for it; use a key file"',
    "AttributeOID.CHALLENGE_PASSWORD: \"challengePassword\",",
    "ExtendedKeyUsageOID.SERVER_AUTH: \"serverAuth\","])
def test_placeholders_variables_types_and_prose_are_not_masked(text: str) -> None:
    result = scan(text)
    assert "credential-assignment" not in result.counts, text
    assert "random-assignment" not in result.counts, text
    assert result.text == text


GENERIC_KEYS = ["session", "dsn", "cookie_value", "SIGNED_URL_PART", "webhook", "x-custom"]


def test_a_random_value_assigned_to_any_key_is_masked() -> None:
    rng = random.Random(12)
    masked = total = 0
    for key in GENERIC_KEYS:
        for alphabet, n in ((ALNUM, 24), (ALNUM, 40), (B64, 44), (URLSAFE, 32)):
            for _ in range(40):
                value = "".join(rng.choice(alphabet) for _ in range(n))
                if not (any(c.isdigit() for c in value) and any(c.isupper() for c in value)
                        and any(c.islower() for c in value)):
                    continue  # a token without the three kinds of character is not asked
                total += 1
                masked += value not in scan(f'{key} = "{value}"').text
    assert masked / total >= 0.85, (masked, total)


@pytest.mark.parametrize("text", [
    'commit = "e7e8f9f60a227385459c945c43fc052715850a03"',
    "request_id: 123e4567-e89b-12d3-a456-426614174000", 'model: "Qwen2.5-7B-Instruct-GGUF"',
    "ChaCha20Poly1305 = rust_openssl.aead.ChaCha20Poly1305",
    "public_key: ed25519.Ed25519PublicKey, f_pub: _FragList",
    "_FillConsoleOutputCharacterW = windll.kernel32.FillConsoleOutputCharacterW",
    ":class:`~urllib3.exceptions.MaxRetryError` exception",
    "group_order = 0x8CB91E82A3386D280F5D6F7E50E641DF152F7109ED5456B31F166E6CAC0425A7",
    "Serializer: Phoenix.Socket.V2.JSONSerializer", 'photo: "1923_Smith_Family_Reunion.jpg"',
    'id: "msg_01XkQ7bN2mLp9RtV4wZy8Hc3"', "path = src/memvault/text/Redact2Module.py"])
def test_ids_names_hashes_and_code_are_not_random_secrets(text: str) -> None:
    assert "random-assignment" not in scan(text).counts, text


def test_assignment_rules_rarely_fire_on_the_benign_corpus() -> None:
    corpus = benign_corpus()
    hits = {kind: sum(1 for s in samples if {"credential-assignment", "random-assignment"}
                      & set(scan(s).counts)) for kind, samples in corpus.items()}
    assert hits["code"] <= 3, hits  # code assigns a literal password now and then
    assert not any(n for kind, n in hits.items() if kind != "code"), hits


def _bench_texts() -> list[str]:
    data = ROOT.parent / "shared" / "bench-data"
    if not data.is_dir():
        pytest.skip("no bench data beside the project")
    from memvault.errors import NotTranscript
    from memvault.text.transcripts import parse

    texts = []
    for path in sorted((data / "transcripts").rglob("*.jsonl")):
        try:
            transcript = parse(path.read_text(encoding="utf-8"))
        except NotTranscript:
            continue
        texts += [m.content for m in [*transcript.messages, *transcript.summaries]]
    for conv in json.loads((data / "locomo_dev.json").read_text(encoding="utf-8")):
        for key, session in conv["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                texts += [turn["text"] for turn in session]
    return texts


def test_real_sessions_and_conversations_are_stored_unmasked_by_the_assignment_rules() -> None:
    # Real Claude Code, Codex and Gemini sessions and LoCoMo's conversations hold no
    # credential: nothing in them is masked as one (bench/bench_assignments.py prints
    # these figures, and LongMemEval's, for every corpus).
    texts = _bench_texts()
    assert len(texts) > 3000
    fired = [t[:80] for t in texts if {"credential-assignment", "random-assignment"}
             & set(scan(t).counts)]
    assert fired == []
