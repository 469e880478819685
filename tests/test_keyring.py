"""The OS keyring as a key source (SPEC §4; docs/security.md): only a backend known to
encrypt at rest ever holds or yields the master key, the backend is named wherever the
key's place is said (init, doctor), and `mem doctor` finds the key where the vault says
it lives.

Three kinds of backend, all real, none mocked:
- keyrings.alt's PlaintextKeyring, a file in the test's home: the one mem must refuse;
- GNOME Keyring on a private D-Bus session (where gnome-keyring-daemon is installed; CI
  installs it): the platform backend, end to end in new processes;
- SealedKeyring below, a backend of this file that seals its entries with AES-256-GCM,
  admitted by adding it to mem's allow-list for the test: where no Secret Service runs,
  it carries mem's own path (init, every command, doctor, backup and restore) through
  keyring's API. It proves that path, not the safety of any platform backend.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyring.backend import KeyringBackend
from pytest_console_scripts import ScriptRunner

from memvault.config import resolve
from memvault.errors import EX_CONFIG
from memvault.vault import keysource
from tests.conftest import home_environment, mem, one_error_line

MEM = str(Path(sys.executable).parent / "mem")
PASSPHRASE = "correct horse battery"
PLAINTEXT = "keyrings.alt.file.PlaintextKeyring"


class SealedKeyring(KeyringBackend):
    """Entries sealed with AES-256-GCM (service and account as associated data) in a
    JSON file, under a key this object holds, as a login keyring's daemon holds its
    own. It takes arguments, so keyring never builds one on its own."""

    priority = 1  # "recommended", in keyring's words

    def __init__(self, path: Path, secret: bytes) -> None:
        super().__init__()
        self.path, self.secret = path, secret

    def _entries(self) -> dict[str, str]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get_password(self, service: str, username: str) -> str | None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        sealed = self._entries().get(f"{service}/{username}")
        if sealed is None:
            return None
        blob = base64.b64decode(sealed)
        return AESGCM(self.secret).decrypt(blob[:12], blob[12:],
                                           f"{service}/{username}".encode()).decode()

    def set_password(self, service: str, username: str, password: str) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(12)
        sealed = AESGCM(self.secret).encrypt(nonce, password.encode(),
                                             f"{service}/{username}".encode())
        entries = self._entries()
        entries[f"{service}/{username}"] = base64.b64encode(nonce + sealed).decode()
        self.path.write_text(json.dumps(entries))

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        entries.pop(f"{service}/{username}", None)
        self.path.write_text(json.dumps(entries))


class MemoryKeyring(KeyringBackend):
    """A backend mem has never heard of (a third-party plugin): recommended by its own
    priority, yet not known to encrypt at rest."""

    priority = 1

    def __init__(self, entries: dict[str, str]) -> None:
        super().__init__()
        self.entries = entries

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[f"{service}/{username}"] = password

    def delete_password(self, service: str, username: str) -> None:
        self.entries.pop(f"{service}/{username}", None)


def class_name(backend: type) -> str:
    return f"{backend.__module__}.{backend.__qualname__}"


@pytest.fixture
def use_backend() -> Iterator[Any]:
    """Make keyring use a backend in this process (mem runs in-process here), and
    keyring's empty one again after the test."""
    import keyring
    from keyring.backends import fail

    yield keyring.set_keyring
    keyring.set_keyring(fail.Keyring())


@pytest.fixture
def plaintext(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_backend: Any) -> Path:
    """keyrings.alt's plaintext file backend (for this process, and by the variable for
    child processes); the file it keeps its entries in."""
    from keyrings.alt.file import PlaintextKeyring

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", PLAINTEXT)
    backend = PlaintextKeyring()
    use_backend(backend)
    return Path(backend.file_path)


@pytest.fixture
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_backend: Any) -> Path:
    """SealedKeyring, on mem's allow-list for the test; the file of its entries."""
    path = tmp_path / "home" / "sealed-keyring.json"
    use_backend(SealedKeyring(path, os.urandom(32)))
    monkeypatch.setitem(keysource.ENCRYPTING_BACKENDS, class_name(SealedKeyring),
                        "sealed test keyring")
    return path


@pytest.fixture
def passphrase_file(tmp_path: Path) -> Path:
    path = tmp_path / "passphrase"
    path.write_text(PASSPHRASE + "\n")
    return path


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def new_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    home = tmp_path / name
    home.mkdir()
    for variable, value in home_environment(home).items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("MEM_CONFIG_DIR", str(home / "config"))
    return home


def doctor(script_runner: ScriptRunner) -> tuple[int, dict[str, Any]]:
    result = mem(script_runner, "doctor", "--json")
    return result.returncode, json.loads(result.stdout)


def finding(doc: dict[str, Any], check: str) -> dict[str, Any]:
    (found,) = [f for f in doc["findings"] if f["check"] == check]
    return found


# --- backends that do not encrypt at rest are refused -------------------------------------


def test_init_refuses_a_plaintext_backend_names_it_and_writes_nothing(
        tmp_path, script_runner, plaintext, vault_dir, config_dir, passphrase_file):
    before = files(tmp_path)
    for args in (["init", "--keyring"], ["init"]):  # the flag, or key_source from the env
        result = mem(script_runner, *args, MEM_KEY_SOURCE="keyring")
        assert result.returncode == EX_CONFIG, result.stdout
        line = one_error_line(result.stderr)
        assert PLAINTEXT in line and "not one known to encrypt at rest" in line
        assert str(plaintext) in line and "nothing was written" in line
        assert "MEM_KEY_FILE" in line and "MEM_KEY_COMMAND" in line  # what to use instead
    assert files(tmp_path) == before  # no vault, no config file, no entry, no key file
    assert not plaintext.exists() and not vault_dir.exists() and not config_dir.exists()

    # A key file is still there to choose, and a backup of it goes to no plaintext entry.
    assert mem(script_runner, "init").returncode == 0
    backup = tmp_path / "backup"
    assert mem(script_runner, "key", "backup", "-o", str(backup), "--passphrase-file",
               str(passphrase_file)).returncode == 0
    result = mem(script_runner, "key", "restore", str(backup), "--keyring",
                 "--passphrase-file", str(passphrase_file))
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert PLAINTEXT in line and "move the key out" not in line  # nothing there to move
    assert not plaintext.exists() and not (config_dir / "config.yaml").exists()


@pytest.mark.script_launch_mode("subprocess")
def test_keyrings_own_choice_of_a_plaintext_backend_is_refused_in_a_new_process(
        script_runner, plaintext, vault_dir):
    """Nothing set but keyrings.alt installed: keyring's own pick (alone, or as the first
    of a chain) is the plaintext file, and mem, in a process of its own, refuses it."""
    # No session bus: on a desktop keyring would pick (and mem use) the user's own.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON_KEYRING_BACKEND", "DBUS_SESSION_BUS_ADDRESS")}
    picked = subprocess.run([sys.executable, "-c", "import keyring.backends.chainer as c; "
                             "print(*map(type, c.ChainerBackend.backends[:1]))"],
                            env=env, capture_output=True, text=True, check=True).stdout
    if PLAINTEXT.rsplit(".", 1)[1] not in picked:  # a platform backend here (macOS)
        pytest.skip(f"keyring's first choice here is {picked.strip()}, not keyrings.alt's")
    for backend in (None, "keyring.backends.chainer.ChainerBackend"):
        if backend is not None:
            env["PYTHON_KEYRING_BACKEND"] = backend
        result = script_runner.run([MEM, "init", "--keyring"], env=env)
        assert result.returncode == EX_CONFIG, result.stdout
        assert PLAINTEXT in one_error_line(result.stderr)
    assert not plaintext.exists() and not vault_dir.exists()


def test_an_unknown_backend_is_refused_however_it_rates_itself(
        tmp_path, monkeypatch, script_runner, use_backend, vault_dir):
    """An allow-list: a backend mem does not know is refused, not one mem knows is bad;
    and one it knows that cannot work here is refused too."""
    entries: dict[str, str] = {}
    use_backend(MemoryKeyring(entries))
    result = mem(script_runner, "init", "--keyring")
    assert result.returncode == EX_CONFIG
    assert class_name(MemoryKeyring) in one_error_line(result.stderr)
    assert entries == {} and not vault_dir.exists()

    from keyring.backends.SecretService import Keyring as SecretService

    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)  # no session bus here
    use_backend(SecretService())
    result = mem(script_runner, "init", "--keyring")
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert "Secret Service" in line and "cannot be used here" in line
    assert not vault_dir.exists()


def test_a_key_mem_kept_in_a_plaintext_backend_is_not_read_and_a_backup_moves_it_out(
        tmp_path, script_runner, plaintext, vault_dir, config_dir, passphrase_file):
    """A vault from before the refusal: its key in the plaintext file, key_source:
    keyring in the config file. Every command refuses it there, doctor says so, and
    `mem key backup` is the way out that the refusal names."""
    import keyring

    assert mem(script_runner, "init").returncode == 0
    assert mem(script_runner, "add", "Prefers rooibos tea", "--type",
               "preference").returncode == 0
    key_file = config_dir / "master.key"
    check = json.loads((vault_dir / "vault.json").read_text())["key_check"]
    keyring.set_password("memvault", f"master-key-{check}", key_file.read_text().strip())
    key_file.unlink()
    (config_dir / "config.yaml").write_text("key_source: keyring\n")
    vault_before = files(vault_dir)

    result = mem(script_runner, "search", "rooibos")
    assert result.returncode == EX_CONFIG
    line = one_error_line(result.stderr)
    assert PLAINTEXT in line and "reads no master key from it" in line
    assert "mem key backup" in line and "rooibos" not in result.stdout
    code, doc = doctor(script_runner)
    assert code == EX_CONFIG
    key = finding(doc, "key")
    assert key["severity"] == "error" and PLAINTEXT in key["what"]
    assert "mem key backup" in key["fix"]
    assert files(vault_dir) == vault_before  # refused before anything was opened

    backup = tmp_path / "backup"
    result = mem(script_runner, "key", "backup", "-o", str(backup), "--passphrase-file",
                 str(passphrase_file))
    assert result.returncode == 0, result.stderr
    assert "still holds the key" in result.stderr and PLAINTEXT in result.stderr
    (config_dir / "config.yaml").write_text("")
    assert mem(script_runner, "key", "restore", str(backup), "--passphrase-file",
               str(passphrase_file)).returncode == 0
    assert key_file.exists()
    found = mem(script_runner, "search", "rooibos", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["content"] == "Prefers rooibos tea"


# --- an encrypting backend: the working path -----------------------------------------------


def test_keyring_source_end_to_end_and_doctor_finds_the_key_there(
        tmp_path, monkeypatch, script_runner, sealed, vault_dir, config_dir,
        passphrase_file):
    result = mem(script_runner, "init", "--keyring")
    assert result.returncode == 0, result.stderr
    assert "the OS keyring, sealed test keyring (service memvault" in result.stderr
    assert "key_source: keyring" in (config_dir / "config.yaml").read_text()
    assert not keysource.default_key_path().exists()  # no key file anywhere
    assert mem(script_runner, "add", "Prefers rooibos tea", "--type",
               "preference").returncode == 0
    found = mem(script_runner, "search", "rooibos", "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["content"] == "Prefers rooibos tea"

    # Doctor finds the key where the vault says it lives, names the backend, and runs
    # every check that needs the key.
    code, doc = doctor(script_runner)
    assert code == 0, doc
    key = finding(doc, "key")
    assert key["severity"] == "ok" and "sealed test keyring" in key["what"]
    assert {"vault", "user", "key-backup", "index", "compaction", "disk"} <= {
        f["check"] for f in doc["findings"]}
    assert "index: current, 1 document" in finding(doc, "index")["what"]

    backup = tmp_path / "backup"
    assert mem(script_runner, "key", "backup", "-o", str(backup), "--passphrase-file",
               str(passphrase_file)).returncode == 0
    from memvault.ops.keys import read_backup

    key_value = read_backup(backup, PASSPHRASE)
    held = sealed.read_bytes()  # the backend's file: the key sealed, never in clear
    assert base64.b64encode(key_value) not in held and key_value not in held

    # A new machine, its keyring empty: the entry is missing, then restored into it.
    new_machine(tmp_path, monkeypatch, "laptop")
    monkeypatch.setenv("MEM_KEY_SOURCE", "keyring")
    sealed.unlink()
    missing = mem(script_runner, "search", "rooibos")
    assert missing.returncode == EX_CONFIG
    line = one_error_line(missing.stderr)
    assert "keyring holds no master key" in line and "sealed test keyring" in line
    assert "mem key restore" in line and "mem init" not in line
    code, doc = doctor(script_runner)
    assert code == EX_CONFIG and finding(doc, "key")["fix"] == "mem key restore FILE"
    monkeypatch.delenv("MEM_KEY_SOURCE")
    restored = mem(script_runner, "key", "restore", str(backup), "--keyring",
                   "--passphrase-file", str(passphrase_file))
    assert restored.returncode == 0, restored.stderr
    assert not keysource.default_key_path().exists()
    found = mem(script_runner, "search", "rooibos", "--json")  # config selects it
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["content"] == "Prefers rooibos tea"


def test_doctor_without_a_vault_names_the_backend_and_sends_to_init(
        monkeypatch, script_runner, sealed):
    monkeypatch.setenv("MEM_KEY_SOURCE", "keyring")
    code, doc = doctor(script_runner)
    assert code != 0
    key = finding(doc, "key")
    assert key["severity"] == "ok" and "sealed test keyring" in key["what"]
    assert finding(doc, "vault")["fix"] == "mem init"


def test_keyring_entries_of_two_vaults_do_not_collide(tmp_path, monkeypatch, sealed):
    from memvault.ops.admin import init

    made = []
    for name in ("one", "two"):
        monkeypatch.setenv("MEM_VAULT", str(tmp_path / name))
        made.append(init(resolve(key_source="keyring")).key_source)
    assert made[0] != made[1]
    for name in ("one", "two"):
        monkeypatch.setenv("MEM_VAULT", str(tmp_path / name))
        meta = json.loads((tmp_path / name / "vault.json").read_text())
        key = keysource.keyring_key(meta["key_check"])
        assert key is not None
        assert keysource.load_master_key(resolve(key_source="keyring"),
                                         key_check=meta["key_check"]).key == key


def test_no_backend_at_all_is_one_line_exit_78(script_runner, sealed):
    """keyring's stand-ins for no backend (fail) and a disabled keyring (null)."""
    from keyring.backends import fail, null

    assert mem(script_runner, "init", "--keyring").returncode == 0
    import keyring

    for backend in (fail.Keyring(), null.Keyring()):
        keyring.set_keyring(backend)
        result = mem(script_runner, "search", "rooibos")
        assert result.returncode == EX_CONFIG
        assert "no OS keyring" in one_error_line(result.stderr)


def test_hooks_installed_for_a_keyring_key_find_it_there(monkeypatch):
    from memvault.integrations.launch import resolve as launch

    monkeypatch.setenv("MEM_KEY_SOURCE", "keyring")
    assert ("MEM_KEY_SOURCE", "keyring") in launch("user").env
    assert not any(flag.startswith("--key-file") for flag in launch("user").flags)


# --- a real Secret Service ----------------------------------------------------------------


SECRET_SERVICE_SCRIPT = """
eval "$(printf test-login | gnome-keyring-daemon --unlock --components=secrets)"
"$MEM" init --keyring >/dev/null 2>init.err; echo "init=$?"
"$MEM" add "Prefers oolong tea" --type preference >/dev/null; echo "add=$?"
"$MEM" search oolong --json >found.json; echo "search=$?"
"$MEM" doctor --json >doctor.json; echo "doctor=$?"
"$PY" -c "import keyring, json; c = json.load(open('$MEM_VAULT/vault.json'))['key_check'];
print('key=' + keyring.get_password('memvault', 'master-key-' + c))"
PYTHON_KEYRING_BACKEND=keyring.backends.chainer.ChainerBackend MEM_VAULT="$MEM_VAULT-2" \
    "$MEM" init --keyring --json >chained.json 2>chained.err; echo "chained=$?"
"$PY" -c "import secretstorage as s; s.get_default_collection(s.dbus_init()).lock()"
"$MEM" search oolong 2>locked.err; echo "locked=$?"
"""


@pytest.mark.skipif(not (shutil.which("dbus-run-session") and
                         shutil.which("gnome-keyring-daemon")),
                    reason="needs dbus-run-session and gnome-keyring-daemon (.ci/run "
                    "installs them)")
def test_keyring_source_on_a_real_secret_service(tmp_path):
    """GNOME Keyring on a private D-Bus session, as on a Linux desktop: the key goes in
    and comes out in new processes, doctor finds it and names the backend, nothing on
    disk holds it in clear, a chain that also holds keyrings.alt's plaintext file puts
    it in the Secret Service only, and a locked keyring is one line, exit 78."""
    home = tmp_path / "home"
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], **home_environment(home), "XDG_RUNTIME_DIR": str(run),
           "MEM_CONFIG_DIR": str(tmp_path / "config"), "MEM_VAULT": str(tmp_path / "vault"),
           "MEM_USER": "alice", "NO_COLOR": "1", "MEM": MEM, "PY": sys.executable,
           "MEM_EMBEDDINGS_BACKGROUND": "false",
           "PYTHON_KEYRING_BACKEND": "keyring.backends.SecretService.Keyring"}
    (tmp_path / "steps.sh").write_text(SECRET_SERVICE_SCRIPT)
    done = subprocess.run(["dbus-run-session", "--", "bash", "steps.sh"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    steps = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    key = steps.pop("key", "")
    assert steps == {"init": "0", "add": "0", "search": "0", "doctor": "0", "chained": "0",
                     "locked": str(EX_CONFIG)}, \
        (done.stdout, done.stderr, (tmp_path / "init.err").read_text())
    found = json.loads((tmp_path / "found.json").read_text())
    assert found["results"][0]["content"] == "Prefers oolong tea"
    assert "Secret Service" in (tmp_path / "init.err").read_text()
    doc = json.loads((tmp_path / "doctor.json").read_text())
    assert "Secret Service" in finding(doc, "key")["what"]
    assert {"vault", "user", "index", "compaction", "disk"} <= {
        f["check"] for f in doc["findings"]}
    assert "Secret Service" in json.loads((tmp_path / "chained.json").read_text())[
        "key_source"]
    assert not (home / ".local" / "share" / "python_keyring").exists()  # no plaintext
    assert not (tmp_path / "config" / "master.key").exists()
    assert len(base64.b64decode(key)) == 32
    for folder in (home, tmp_path / "config", tmp_path / "vault"):
        for path, data in files(folder).items():
            assert key.encode() not in data and base64.b64decode(key) not in data, path
    assert "keyring is locked" in one_error_line((tmp_path / "locked.err").read_text())
