"""A vault that takes no writes: every read answers, every write is one line, exit 74,
and nothing changes.

Read-only is made real, never faked with chmod (root writes through any mode):
- "erofs": the vault is a read-only bind mount in a private mount namespace (`unshare -m`,
  or `unshare -rm` for a user who is not root), so every write gets EROFS from the kernel;
- "eacces": the vault's files are not writable by the user mem runs as (as root, mem runs
  as the unprivileged `nobody` over a tree it owns without write permission; otherwise
  the tree is made read-only for the test's own user), so every write gets EACCES.
A mode the machine cannot offer (no user namespaces, no `nobody`) is skipped.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memvault.config import resolve
from memvault.ops import prefs, remember
from memvault.ops.ingest import ingest_stream
from memvault.vault.vault import Vault

MEM = Path(sys.executable).parent / "mem"
NOBODY = 65534
MOUNT_RO = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'


def _unshare() -> list[str]:
    return ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 \
        else ["unshare", "-rm", "--propagation", "private"]


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30,
                              check=False).returncode == 0
    except OSError:
        return False


class Frozen:
    """A copy of a seeded vault that takes no writes, and `mem` run against it."""

    def __init__(self, mode: str, source: Path, config: Path, **extra: str) -> None:
        self.mode = mode
        self.extra = extra
        self.base = Path(tempfile.mkdtemp(prefix="mem-frozen-"))
        self.vault = self.base / "vault"
        self.config = self.base / "config"
        shutil.copytree(source, self.vault, symlinks=True)
        shutil.copytree(config, self.config, symlinks=True)
        for name in ("home", "log"):
            (self.base / name).mkdir(mode=0o700)
        self.prefix: list[str] = []
        if mode == "erofs":
            self.prefix = [*_unshare(), "sh", "-c", MOUNT_RO, str(self.vault)]
        elif os.geteuid() == 0:  # eacces, as root: run as nobody, who owns a read-only tree
            self.prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                           "--clear-groups"]
            for path in [self.base, *self.base.rglob("*")]:
                os.lchown(path, NOBODY, NOBODY)
            self._read_only(self.vault)
        else:
            self._read_only(self.vault)

    @staticmethod
    def _read_only(root: Path) -> None:
        for path in sorted(root.rglob("*"), reverse=True) + [root]:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(path, stat.S_IMODE(mode) & ~0o222)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MEM_", "XDG_"))}
        env.update(MEM_VAULT=str(self.vault), MEM_CONFIG_DIR=str(self.config),
                   MEM_USER="alice", MEM_LOG_DIR=str(self.base / "log"),
                   HOME=str(self.base / "home"), MEM_LOCK_TIMEOUT="2", NO_COLOR="1",
                   **self.extra)
        return env

    def run(self, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*self.prefix, str(MEM), *args], input=stdin,
                              capture_output=True, env=self.env(), timeout=60, check=False)
        return subprocess.CompletedProcess(done.args, done.returncode,
                                           done.stdout.decode(), done.stderr.decode())

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*self.prefix, str(MEM), *args], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=self.env())

    def snapshot(self) -> dict[str, tuple[int, bytes]]:
        """Every path under the vault, with its mode and content."""
        out = {}
        for path in sorted(self.vault.rglob("*")):
            st = path.lstat()
            out[str(path.relative_to(self.vault))] = (
                st.st_mode, path.read_bytes() if stat.S_ISREG(st.st_mode) else b"")
        return out

    def remove(self) -> None:
        for path in [self.base, *self.base.rglob("*")]:
            if not path.is_symlink():
                os.chmod(path, 0o700)
        shutil.rmtree(self.base)


@pytest.fixture(scope="module")
def modes() -> dict[str, str | None]:
    """Each mode, with why it cannot run here (None: it can)."""
    probe = Path(tempfile.mkdtemp(prefix="mem-probe-"))
    try:
        erofs = _works([*_unshare(), "sh", "-c", MOUNT_RO, str(probe), "true"])
        as_nobody = os.geteuid() != 0 or _works(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             str(MEM), "--version"])
    finally:
        shutil.rmtree(probe)
    return {"erofs": None if erofs else "no private mount namespace (unshare -m) here",
            "eacces": None if as_nobody else "cannot run as nobody (setpriv) here"}


# Both refusals take the same paths in mem; `make test` holds it to the commoner one (a
# vault it may not write), CI to both.
@pytest.fixture(params=[pytest.param("erofs", marks=pytest.mark.long), "eacces"])
def frozen(request: pytest.FixtureRequest, modes: dict[str, str | None], vault: Vault,
           vault_dir: Path, config_dir: Path) -> Iterator[Frozen]:
    why = modes[request.param]
    if why:
        pytest.skip(why)
    remember.add(vault, "Prefers green tea in the afternoon", "fact")
    remember.add(vault, "Always answer in British English", "instruction")
    prefs.set_(vault, "editor", "helix")
    ingest_stream(vault, io.BytesIO(b'{"role": "user", "content": "the teapot is cracked"}\n'),
                  fmt="jsonl", session="s1")
    copy = Frozen(request.param, vault_dir, config_dir)
    yield copy
    copy.remove()


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_read_answers_on_a_vault_that_takes_no_writes(frozen: Frozen) -> None:
    before = frozen.snapshot()
    listed = ok_json(frozen.run("list", "--json"))["records"]
    assert {r["content"] for r in listed} >= {"Prefers green tea in the afternoon",
                                             "the teapot is cracked"}
    found = ok_json(frozen.run("search", "tea", "--json"))["results"]
    assert found and found[0]["content"] == "Prefers green tea in the afternoon"
    shown = ok_json(frozen.run("show", found[0]["memory_id"], "--json"))
    assert shown["content"] == found[0]["content"]
    entries = ok_json(frozen.run("brief", "--json"))["entries"]
    assert "Always answer in British English" in {e["content"] for e in entries}
    assert ok_json(frozen.run("stats", "--json"))["user"] == "alice"
    out = frozen.base / "log" / "export.json"  # outside the vault: written
    assert frozen.run("export", "-o", str(out)).returncode == 0
    assert json.loads(out.read_text())["record_count"] == 3
    checked = ok_json(frozen.run("verify", "--json"))
    assert checked["ok"] and checked["records_checked"] == 3
    assert ok_json(frozen.run("audit", "--json"))["chain_ok"]
    assert frozen.snapshot() == before


def test_a_stale_index_on_a_vault_that_takes_no_writes_is_built_outside_it(
        frozen: Frozen) -> None:
    # The stamp says the index matches the vault; without it a reader rebuilds, here in
    # a private temporary directory, since the vault's own cannot be written.
    os.chmod(frozen.vault / "default" / "alice" / "index", 0o700)
    (frozen.vault / "default" / "alice" / "index" / "stamp").unlink()
    frozen._read_only(frozen.vault)
    before = frozen.snapshot()
    found = ok_json(frozen.run("search", "teapot", "--json"))["results"]
    assert [r["content"] for r in found] == ["the teapot is cracked"]
    assert ok_json(frozen.run("show", found[0]["memory_id"], "--json"))["session_id"] == "s1"
    assert frozen.snapshot() == before


def test_the_session_start_hook_and_the_mcp_read_tools_answer(frozen: Frozen) -> None:
    before = frozen.snapshot()
    hook = frozen.run("hook", "claude-code", stdin=json.dumps(
        {"hook_event_name": "SessionStart", "session_id": "s2", "cwd": "/"}).encode())
    assert hook.returncode == 0 and hook.stderr == ""
    context = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "British English" in context

    server = frozen.popen("mcp")
    assert server.stdin is not None and server.stdout is not None

    def ask(ident: int, method: str, params: dict[str, Any]) -> Any:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                        "params": params}) + "\n").encode())
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        assert answer["id"] == ident, answer
        return answer["result"]

    try:
        ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "test", "version": "1"}})
        server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        searched = ask(2, "tools/call", {"name": "memory_search",
                                         "arguments": {"query": "teapot"}})
        assert not searched["isError"], searched
        hits = searched["structuredContent"]["results"]
        assert [h["content"] for h in hits] == ["the teapot is cracked"]
        got = ask(3, "tools/call", {"name": "memory_get",
                                    "arguments": {"memory_id": hits[0]["memory_id"]}})
        assert not got["isError"], got
        brief = ask(4, "tools/call", {"name": "memory_brief", "arguments": {}})
        assert "British English" in brief["structuredContent"]["brief"]
        stored = ask(5, "tools/call", {"name": "memory_store", "arguments": {
            "type": "fact", "content": "Owns a blue kettle"}})
        assert stored["isError"] and "nothing was changed" in stored["content"][0]["text"]
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    assert frozen.snapshot() == before


def test_a_vault_of_the_previous_release_reads_as_it_is(
        modes: dict[str, str | None], tmp_path: Path) -> None:
    """Its users' states are of an older format: counted in memory, never saved."""
    if modes["erofs"]:
        pytest.skip(modes["erofs"])
    previous = Path(__file__).resolve().parent / "fixtures" / "previous-release" / "vault"
    (tmp_path / "no-config").mkdir()
    copy = Frozen("erofs", previous, tmp_path / "no-config",
                  MEM_MASTER_KEY="AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
    try:
        before = copy.snapshot()
        stats = ok_json(copy.run("stats", "--json"))
        assert (stats["records"], stats["active"], stats["superseded"]) == (7, 6, 1)
        brief = ok_json(copy.run("brief", "--json"))["entries"]
        assert not any("billing team" in e["content"] for e in brief)  # superseded
        found = ok_json(copy.run("search", "staging database password", "--json"))
        assert found["results"][0]["session_id"] == "s-2026-03-01"
        assert copy.snapshot() == before
    finally:
        copy.remove()


@pytest.mark.parametrize("args", [
    ("add", "Owns a blue kettle"),
    ("pref", "set", "theme", "dark"),
    ("ingest", "--format", "jsonl", "--session", "s3", "-"),
    ("verify", "--repair"),
], ids=["add", "pref-set", "ingest", "verify-repair"])
def test_a_write_is_one_line_exit_74_and_changes_nothing(
        frozen: Frozen, args: tuple[str, ...]) -> None:
    if frozen.mode == "erofs" and args[0] != "add":
        pytest.skip("the refusal comes from the same place in either mode: one suffices")
    before = frozen.snapshot()
    result = frozen.run(*args, stdin=b'{"role": "user", "content": "a new turn"}\n')
    assert result.returncode == 74, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mem: error: cannot write "), lines
    assert "nothing was changed" in lines[0]
    assert frozen.snapshot() == before


def test_a_storage_refusal_keeps_its_errno(tmp_path: Path) -> None:
    """Whether the filesystem refused a write outright decides that a reader can work
    from a copy elsewhere: the reason travels with the error."""
    import errno

    from memvault.errors import EX_IOERR, StorageError
    from memvault.storage import fsio

    target = tmp_path / "f"
    target.write_text("x")
    with pytest.raises(StorageError) as err:
        fsio.atomic_write(tmp_path / "missing-dir" / "f", b"y")
    assert err.value.exit_code == EX_IOERR and not err.value.refused
    assert StorageError("x", errno=errno.EROFS).refused
    assert StorageError("x", errno=errno.EACCES).refused
    assert not StorageError("x", errno=errno.ENOSPC).refused
    assert resolve().vault  # the sealed environment is intact
