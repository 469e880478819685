"""`mem sync` against a real S3-compatible server: moto's server mode, started on a free
port of 127.0.0.1 for this module and stopped at its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memvault.ops import forget as forget_ops
from memvault.ops import sync as sync_ops
from memvault.ops.ingest import ingest_text
from memvault.ops.remember import add
from memvault.storage.remote import open_remote
from tests.conftest import mem
from tests.servers.moto_s3 import CREDENTIALS, free_port, moto_server  # noqa: F401
from tests.test_sync import CANARY, contents, machine, transcript

pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3_server: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
           ) -> str:
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    name = "mem-" + request.node.name.lower().replace("_", "-")[:40]
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


def objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    client: Any = boto3.client("s3", endpoint_url=endpoint)
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            out[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return out


def test_two_machines_through_s3(tmp_path: Path, s3_server: str, bucket: str) -> None:
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, f"Prefers green tea {CANARY}", "preference", tags=["secrettag"])
    ingest_text(b, transcript("s1", 5), None, "jsonl", session="projectsession")
    url = f"s3://{bucket}/mem"
    for v in (a, b, a):
        sync_ops.sync(v, open_remote(url, s3_server))
    assert contents(a) == contents(b) and len(contents(a)) == 6
    gone = next(r.memory_id for r in a.store.records() if r.type == "preference")
    forget_ops.forget(a, forget_ops.select(a, [gone]))
    sync_ops.sync(a, open_remote(url, s3_server))
    assert sync_ops.sync(b, open_remote(url, s3_server)).forgotten == 1
    stored = objects(s3_server, bucket)
    assert stored and all(key.startswith("mem/") for key in stored)
    for key, data in stored.items():
        for needle in (CANARY, "secrettag", "projectsession", "alice", "green tea"):
            assert needle.encode() not in key.encode() + data
    # The directory of users lists alice once, in an S3 listing: a machine that never
    # held her finds her there.
    assert len([key for key in stored if key.startswith("mem/u/")]) == 1
    c = machine(tmp_path, "c")
    c_all = sync_ops.run(c, url, s3_server, all_users=True)
    assert c_all.users == ("default/alice",) and contents(c) == contents(a)


def test_the_command_saves_the_remote_and_speaks_json(
        tmp_path: Path, s3_server: str, bucket: str, script_runner: Any) -> None:
    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    env = {"MEM_VAULT": str(tmp_path / "a"), "MEM_MASTER_KEY": os.environ["MEM_MASTER_KEY"]}
    first = mem(script_runner, "sync", "--remote", f"s3://{bucket}/p", "--endpoint-url",
                s3_server, "--json", **env)
    assert first.returncode == 0, first.stderr
    doc = json.loads(first.stdout)
    assert {"pushed", "pulled", "forgotten", "remote"} <= set(doc) and doc["pushed"] == 1
    again = mem(script_runner, "sync", "--json", **env)  # the remote from config.yaml
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["pushed"] == 0


@pytest.mark.long  # the folder variant runs in make test; this one adds the threads' S3
def test_two_machines_syncing_at_the_same_moment_through_s3(
        tmp_path: Path, s3_server: str, bucket: str) -> None:
    from tests.test_sync import concurrent_round

    concurrent_round(tmp_path, lambda: open_remote(f"s3://{bucket}/mem", s3_server))


# `mem sync`, killed (SIGKILL) once the n-th request to the remote has had its answer:
# every request a sync makes is a kill point, as every file call is in the crash
# enumeration. Each request counted is written out, so the clean run tells how many.
KILLED_AFTER = """
import os, signal, sys
import botocore.client
limit, count, seen = int(os.environ["KILL_AFTER"]), [0], os.environ["REQUESTS_SEEN"]
call = botocore.client.BaseClient._make_api_call
def counted(self, op, params):
    out = call(self, op, params)
    count[0] += 1
    with open(seen, "w") as f:
        f.write(str(count[0]))
    if count[0] == limit:
        os.kill(os.getpid(), signal.SIGKILL)
    return out
botocore.client.BaseClient._make_api_call = counted
sys.argv[0] = "mem"
from memvault.cli import main
main()
"""


def killed_sync(tmp: Path, vault: Path, url: str, endpoint: str, after: int) -> int:
    env = {**os.environ, "MEM_VAULT": str(vault), "KILL_AFTER": str(after),
           "REQUESTS_SEEN": str(tmp / "seen")}
    done = subprocess.run([sys.executable, "-c", KILLED_AFTER, "sync", "--remote", url,
                           "--endpoint-url", endpoint], env=env, capture_output=True,
                          timeout=120)
    assert done.returncode in (0, -9), done.stderr
    return int((tmp / "seen").read_text())


def reset(endpoint: str, bucket: str, objects_: dict[str, bytes]) -> None:
    client: Any = boto3.client("s3", endpoint_url=endpoint)
    for key in list(objects(endpoint, bucket)):
        client.delete_object(Bucket=bucket, Key=key)
    for key, data in objects_.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)


@pytest.mark.long  # a mem process per kill point: the folder row of the crash run is quick
def test_a_kill_after_any_request_loses_nothing(
        tmp_path: Path, s3_server: str, bucket: str) -> None:
    import shutil

    from memvault.ops import prefs
    from memvault.vault.vault import Vault
    from tests.conftest import LONG
    from tests.sync_oracle import read_remote

    url = f"s3://{bucket}/mem"
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    add(a, f"Likes {CANARY}", "fact")
    ingest_text(a, transcript("s1", 3), None, "jsonl", session="s1")
    prefs.set_(a, "editor", "vim")
    add(b, "The vicuna note", "fact")
    sync_ops.sync(b, open_remote(url, s3_server))  # another machine pushed first
    template = objects(s3_server, bucket)
    shutil.copytree(tmp_path / "a", tmp_path / "a-template")
    total = killed_sync(tmp_path, tmp_path / "a", url, s3_server, 0)  # never killed
    assert total > 4
    points = range(1, total + 1) if LONG else sorted({1, total // 2})
    for after in points:
        shutil.rmtree(tmp_path / "a")
        shutil.copytree(tmp_path / "a-template", tmp_path / "a")
        reset(s3_server, bucket, template)
        killed_sync(tmp_path, tmp_path / "a", url, s3_server, after)
        here = Vault(a.settings)
        again = sync_ops.sync(here, open_remote(url, s3_server))  # the rerun
        assert again.damaged == 0, after
        held = {r.memory_id for r in here.store.records()}
        assert len(held) == 5 and "The vicuna note" in contents(here).values(), after
        folder = tmp_path / f"remote-{after}"
        for key, data in objects(s3_server, bucket).items():
            (folder / key).parent.mkdir(parents=True, exist_ok=True)
            (folder / key).write_bytes(data)
        assert set(read_remote(folder / "mem")["records"]) == held, after
        other = sync_ops.sync(b, open_remote(url, s3_server))
        assert other.damaged == 0 and contents(b) == contents(here), after
        assert prefs.read(b)["editor"]["value"] == "vim", after
        shutil.rmtree(tmp_path / "b")
        b = machine(tmp_path, "b")


def test_a_client_that_cannot_be_made_fails_as_the_remote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client is made on a thread while the sync scans: what fails there (here, a
    profile that no file names) is the remote's error at its first request."""
    from memvault.errors import ConfigError

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "nowhere")
    remote = open_remote("s3://bucket/mem", "http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="nowhere"):
        list(remote.list("x/"))


def test_what_fails_at_the_remote_exits_with_what_to_do_about_it(
        tmp_path: Path, s3_server: str, bucket: str, script_runner: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials: configuration (78); no such bucket: not found (66); both one
    line, nothing saved as the default remote. A network or server failure is for the
    next run (75)."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    from memvault.errors import EX_TEMPFAIL

    a = machine(tmp_path, "a")
    add(a, "Likes hiking", "fact")
    env = {"MEM_VAULT": str(tmp_path / "a"), "MEM_MASTER_KEY": os.environ["MEM_MASTER_KEY"],
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var)
    done = mem(script_runner, "sync", "--remote", f"s3://{bucket}/p", "--endpoint-url",
               s3_server, **env)
    assert done.returncode == 78 and "credentials" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    env.update(CREDENTIALS)
    done = mem(script_runner, "sync", "--remote", "s3://no-such-bucket/p", "--endpoint-url",
               s3_server, **env)
    assert done.returncode == 66 and "no-such-bucket does not exist" in done.stderr
    assert not (tmp_path / "config" / "config.yaml").exists()
    # Refused connections are retried by the client for seconds: the mapping is checked.
    remote = open_remote(f"s3://{bucket}/p", s3_server)
    down = remote._fail("an upload", EndpointConnectionError(endpoint_url=s3_server))
    slow = remote._fail("a listing", ClientError({"Error": {"Code": "SlowDown"}}, "List"))
    assert down.exit_code == slow.exit_code == EX_TEMPFAIL


def test_one_s3_remote_however_spelled_keeps_a_forget(tmp_path: Path, s3_server: str,
                                                     bucket: str) -> None:
    """`s3://b/p/` is `s3://b/p`: the cache is kept, and with it or without it the
    forgotten record is not pulled back, nor left at the remote."""
    a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
    gone = add(a, f"Divorce lawyer {CANARY}", "fact").record.memory_id
    for v in (a, b):
        sync_ops.run(v, f"s3://{bucket}/mem", s3_server)
    forget_ops.forget(a, forget_ops.select(a, [gone]))
    result = sync_ops.run(a, f"s3://{bucket}//mem/", s3_server)
    assert isinstance(result, sync_ops.SyncResult)
    assert (result.remote, result.pulled, result.erasures_pushed) == \
        (f"s3://{bucket}/mem", 0, 1)
    sync_ops.run(b, f"s3://{bucket}/mem/", s3_server)
    assert gone not in sync_ops.scan_local(a) and gone not in sync_ops.scan_local(b)
    assert not any(CANARY.encode() in blob for blob in objects(s3_server, bucket).values())


def test_an_s3_remote_needs_botocore_alone(tmp_path: Path, s3_server: str, bucket: str) -> None:
    """boto3 (its resources, its transfer manager) is never imported by a sync: some 0.2 s
    and 5 MB of every S3 sync's start-up."""
    a = machine(tmp_path, "a")
    add(a, "Prefers green tea", "preference")
    sync_ops.sync(a, open_remote(f"s3://{bucket}/mem", s3_server))
    code = ("import sys\nfrom memvault.storage.remote import open_remote\n"
            f"r = open_remote('s3://{bucket}/mem', '{s3_server}')\n"
            "assert any('/o/' in n for n in r.list(''))\n"
            "print(sorted(m for m in ('boto3', 's3transfer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
