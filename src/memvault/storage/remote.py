"""Where a sync's objects live: a folder, or S3-compatible object storage.

A remote is a flat set of named, immutable byte strings: list under a prefix, get,
create, delete. Nothing here reads what the bytes mean (crypto/syncseal.py seals them).
boto3 is imported only when an S3 remote is opened (the optional extra `memvault[s3]`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from memvault.errors import ConfigError, MemError, NotFound, StorageError, Unreachable
from memvault.storage import fsio


class Remote(Protocol):
    url: str
    workers: int  # requests that may run at once (threads)

    def list(self, prefix: str) -> Iterator[str]: ...

    def get(self, name: str) -> bytes: ...

    def put(self, name: str, data: bytes) -> None: ...

    def delete(self, name: str) -> None: ...


class FolderRemote:
    """A directory (a NAS, a synced folder, a USB disk). An object is written under a
    temporary name, fsynced and renamed: a reader sees it whole or not at all."""

    workers = 1  # one write at a time: a kill leaves a prefix of them, in order

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        if not root.is_dir():
            what = "is not a folder" if os.path.lexists(root) else "does not exist"
            raise NotFound(f"the sync folder {root} {what}", field="remote")

    def _path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def list(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return
        for dirpath, _, files in os.walk(base):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for f in sorted(files):
                if not f.startswith(".tmp-"):
                    yield f if rel == "." else f"{rel}/{f}"

    def get(self, name: str) -> bytes:
        try:
            return fsio.read_regular(self._path(name))
        except FileNotFoundError:
            raise NotFound(f"the remote object {name} is gone") from None

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        fsio.ensure_dir(path.parent)
        fsio.atomic_write(path, data)

    def delete(self, name: str) -> None:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            pass


# How botocore names what went wrong (its exception classes, S3's error codes).
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError",
                             "ProfileNotFound", "CredentialRetrievalError"})
_REFUSED = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                      "ExpiredToken", "InvalidToken", "AllAccessDisabled", "AccountProblem"})
_UNREACHABLE = frozenset({"EndpointConnectionError", "ConnectTimeoutError",
                          "ReadTimeoutError", "ConnectionClosedError",
                          "ProxyConnectionError", "ConnectionError"})
_SERVER = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout"})


class S3Remote:
    """An S3-compatible bucket through boto3, credentials from the standard chain.
    Requests run on several threads (one client is thread-safe), as boto3's own
    transfers do: each waits mostly on the network."""

    _errors: tuple[type[Exception], ...] = ()

    workers = 8

    def __init__(self, url: str, bucket: str, prefix: str, endpoint_url: str | None) -> None:
        import importlib.util
        import threading

        if importlib.util.find_spec("boto3") is None:
            raise ConfigError("an s3:// remote needs boto3: install memvault[s3]",
                              field="remote")
        self.url = url
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._endpoint_url = endpoint_url
        self._client: Any = None
        self._failed: BaseException | None = None
        # boto3's import and its client (service models read from JSON) cost about half
        # a second: made on a thread while the sync reads this machine's records, and
        # waited for at the first request.
        self._ready = threading.Thread(target=self._connect, name="mem-sync-s3", daemon=True)
        self._ready.start()

    def _connect(self) -> None:
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError, ClientError

            config = Config(retries={"max_attempts": 5, "mode": "standard"},
                            connect_timeout=10, read_timeout=60,
                            max_pool_connections=self.workers + 2)
            self._errors = (BotoCoreError, ClientError)
            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self._endpoint_url, config=config)
        except BaseException as exc:  # raised again, as it was, on the caller's thread
            self._failed = exc

    @property
    def client(self) -> Any:
        if self._client is None:
            self._ready.join()
            if self._failed is not None:
                raise self._failed
        return self._client

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _fail(self, what: str, exc: BaseException) -> MemError:
        """The error a failed request is, by what a user does about it: the set-up to
        fix (no credentials, refused ones: 78; no such bucket: 66), or the next run to
        wait for (the network, a time-out, the service failing: 75)."""
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        where = f"the remote {self.url}"
        if type(exc).__name__ in _NO_CREDENTIALS:
            return ConfigError(f"{where}: {exc} (S3 credentials come from the environment, "
                               "~/.aws or an instance role)", field="remote")
        if code in _REFUSED:
            return ConfigError(f"{where}: {what} was refused ({code}): check the "
                               "credentials and the bucket's policy", field="remote")
        if code == "NoSuchBucket":
            return NotFound(f"{where}: the bucket {self.bucket} does not exist",
                            field="remote")
        if type(exc).__name__ in _UNREACHABLE or code in _SERVER or code.startswith("5"):
            return Unreachable(f"{where}: {what} failed ({exc}); nothing is lost, the "
                               "next sync tries again")
        return StorageError(f"{where}: {what} failed ({exc})")

    def list(self, prefix: str) -> Iterator[str]:
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix))
            for page in pages:
                for item in page.get("Contents", []):
                    yield str(item["Key"])[cut:]
        except self._errors as exc:
            raise self._fail("listing", exc) from None

    def get(self, name: str) -> bytes:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket,
                                                 Key=self._key(name))["Body"].read()
            return body
        except self._errors as exc:
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in ("NoSuchKey",
                                                                             "404"):
                raise NotFound(f"the remote object {name} is gone") from None
            raise self._fail("a download", exc) from None

    def put(self, name: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data)
        except self._errors as exc:
            raise self._fail("an upload", exc) from None

    def delete(self, name: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(name))
        except self._errors as exc:
            raise self._fail("a delete", exc) from None


def folder_of(url: str) -> Path | None:
    """The folder a remote URL names (`file:///path` or a plain path, `~` expanded);
    None for any other scheme. ConfigError for a URL that names no folder: an empty
    path (an unset variable: `file://`, `""`), a file:// URL naming another host, or
    `~user` for a user this system does not have."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"the remote {url} names the host {parsed.netloc!r}: a "
                              "file:// remote is a folder on this machine "
                              "(file:///path)", field="remote")
        path = unquote(parsed.path)
    elif len(parsed.scheme) > 1:
        return None
    else:
        path = url
    if not path.strip():
        raise ConfigError(f"the remote {url!r} names no folder (an unset variable?)",
                          field="remote")
    if "\0" in path:
        raise ConfigError("the remote's path holds a NUL character", field="remote")
    try:
        return Path(path).expanduser()
    except RuntimeError:  # ~name for a user this system does not know
        raise ConfigError(f"the remote {url}: {path.split('/', 1)[0]} names no user of "
                          "this system", field="remote") from None


def canonical(url: str) -> str:
    """One name for one remote however it is spelled: a folder as its full, resolved
    path; s3://bucket/prefix without the slashes around the prefix (the keys it names
    are the same). What a sync's cache is kept for and config.yaml saves."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        prefix = parsed.path.strip("/")
        return f"s3://{parsed.netloc}/{prefix}" if prefix else f"s3://{parsed.netloc}"
    folder = folder_of(url)
    return url if folder is None else str(folder.resolve())


def open_remote(url: str, endpoint_url: str | None = None) -> Remote:
    """The remote a URL names: `s3://bucket/prefix`, `file:///path`, or a plain path."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"the remote {url} names no bucket", field="remote")
        return S3Remote(canonical(url), parsed.netloc, parsed.path, endpoint_url)
    folder = folder_of(url)
    if folder is None:
        raise ConfigError(f"the remote {url}: only s3:// and folders (file:// or a path) "
                          "are supported", field="remote")
    return FolderRemote(canonical(url), folder)
