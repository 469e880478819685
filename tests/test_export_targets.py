"""Where `mem export -o PATH` writes: what the path is decides, never its spelling.

The file stdout already writes to (`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`, a link to
one of them) is written through stdout; a pipe, a device or a FIFO, named directly or
through a link, is written into and stays what it was; a directory is refused; a new
name, or a regular file with --force, gets a complete 0600 file; a link to a regular file
stays a link and the file it names gets the export. The installed script runs with its
stdout redirected to a file, as a shell would (`mem export -o /dev/stdout > file`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest

from memvault.ops import remember
from memvault.vault.vault import Vault

MEM = Path(sys.executable).parent / "mem"
FACT = "the lighthouse keeper retires in May"


@pytest.fixture(autouse=True)
def seeded(vault: Vault) -> None:
    remember.add(vault, FACT, "fact")


def export(target: str, stdout: IO[bytes] | int = subprocess.PIPE, *flags: str,
           **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(MEM), "export", "-o", target, *flags], stdout=stdout,
                          stderr=subprocess.PIPE, timeout=60, check=False, **kwargs)


def holds_export(data: bytes) -> bool:
    return json.loads(data)["record_count"] == 1 and FACT in data.decode()


def link_to_stdout(tmp_path: Path) -> str:
    link = tmp_path / "my-stdout"
    link.symlink_to("/proc/self/fd/1")
    return str(link)


# /dev/stdout itself is left to the fixed code: before the fix, root's export replaced it.
SPELLINGS = {"/dev/stdout": lambda _: "/dev/stdout", "/dev/fd/1": lambda _: "/dev/fd/1",
             "/proc/self/fd/1": lambda _: "/proc/self/fd/1", "a link to it": link_to_stdout}


@pytest.mark.parametrize(("spelling", "redirect"), [
    *((name, "> file") for name in SPELLINGS), ("/dev/stdout", ">> file"),
    ("/dev/stdout", "| pipe")])
def test_export_to_stdout_by_any_name_goes_where_stdout_goes(
        tmp_path: Path, spelling: str, redirect: str) -> None:
    target = SPELLINGS[spelling](tmp_path)
    out = tmp_path / "out.json"
    if redirect == "| pipe":
        result = export(target)
        assert result.returncode == 0, result.stderr
        assert holds_export(result.stdout)
    else:
        out.write_bytes(b"" if redirect == "> file" else b"kept\n")
        with open(out, "ab" if redirect == ">> file" else "wb") as fh:
            result = export(target, stdout=fh)
        assert result.returncode == 0, result.stderr
        data = out.read_bytes()
        if redirect == ">> file":
            assert data.startswith(b"kept\n")
            data = data.removeprefix(b"kept\n")
        assert holds_export(data)
    assert os.path.islink("/dev/stdout") and os.path.islink("/dev/fd")
    if spelling == "a link to it":
        assert Path(target).is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")) == []


@pytest.mark.parametrize("kind", ["link to a fifo", "link to /dev/null"])
def test_a_pipe_or_device_is_written_into_and_stays_what_it_was(
        tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / "export.fifo"
    received: list[bytes] = []
    reader = None
    if "fifo" in kind:
        os.mkfifo(fifo)
        reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
        reader.start()
    target = {"fifo": fifo, "/dev/null": Path("/dev/null")}.get(kind, tmp_path / "link")
    if kind.startswith("link"):
        target.symlink_to(fifo if "fifo" in kind else "/dev/null")
    result = export(str(target))
    assert result.returncode == 0, result.stderr
    if reader is not None:
        reader.join(timeout=30)
        assert holds_export(received[0])
        assert fifo.is_fifo()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if kind.startswith("link"):
        assert target.is_symlink()


def test_a_directory_or_a_link_to_one_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    for target in (folder, tmp_path / "link"):
        result = export(str(target))
        assert result.returncode == 74
        lines = result.stderr.decode().splitlines()
        assert len(lines) == 1 and "is a directory" in lines[0], lines
        assert list(folder.iterdir()) == []
    assert (tmp_path / "link").is_symlink()


def test_a_regular_file_is_replaced_whole_and_private(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_text("an older and much longer export " * 1000)
    out.chmod(0o644)
    result = export(str(out), subprocess.PIPE, "--force")
    assert result.returncode == 0, result.stderr
    assert holds_export(out.read_bytes())
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_link_to_a_regular_file_stays_a_link_and_its_file_gets_the_export(
        tmp_path: Path) -> None:
    real = tmp_path / "exports" / "latest.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "export.json"
    link.symlink_to(real)
    result = export(str(link), subprocess.PIPE, "--force")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert holds_export(real.read_bytes())
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["latest.json"]


def test_a_descriptor_of_another_file_is_written_through(tmp_path: Path) -> None:
    """`-o /dev/fd/3 3>file`: the file the descriptor names gets the export."""
    out = tmp_path / "three.json"
    with open(out, "wb") as fh:
        result = export(f"/dev/fd/{fh.fileno()}", pass_fds=(fh.fileno(),))
    assert result.returncode == 0, result.stderr
    assert holds_export(out.read_bytes())
