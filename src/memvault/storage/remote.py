"""Where a sync's objects live: a folder, or S3-compatible object storage.

A remote is a flat set of named, immutable byte strings: list under a prefix, get,
create, delete. Nothing here reads what the bytes mean (crypto/syncseal.py seals them);
a read is bounded by the largest object of its name's kind that format makes.
botocore (from the optional extra `memvault[s3]`) is imported only when an S3 remote is
opened, and boto3 not at all: its resources and transfer manager are not used.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from memvault.crypto import syncseal
from memvault.errors import ConfigError, MemError, NotFound, StorageError, Unreachable
from memvault.storage import fsio


class Unreadable(NotFound):
    """A name in the remote that holds no object a sync reads: not a regular file (a
    pipe, a device, a socket, a link, a folder), or of a size, or a beginning, that its
    kind of object never has. To a reader it is an object that is not there (a sync
    skips it and counts it as damaged); it was never opened in a way that can block,
    nor read whole."""


def _unreadable(name: str, what: str) -> Unreadable:
    return Unreadable(f"the remote object {name} {what}; it was not read")


class Remote(Protocol):
    url: str
    workers: int  # requests that may run at once (threads)

    def list(self, prefix: str) -> Iterator[str]: ...

    def get(self, name: str) -> bytes: ...

    def put(self, name: str, data: bytes) -> None: ...

    def delete(self, name: str) -> None: ...


# A folder of the remote is opened without following a link: a link in a sync folder is
# none of mem's making, and would lead a listing, a read, a write or a delete out of it.
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# An object: O_NONBLOCK, so that a pipe swapped in after the check does not wait for a
# writer; O_NOCTTY, so that a terminal does not become this process's.
_OBJECT = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_IN_THE_WAY = (errno.ENOTDIR, errno.ELOOP)  # a file or a link where a folder should be


class FolderRemote:
    """A directory (a NAS, a synced folder, a USB disk). An object is written under a
    temporary name, fsynced and renamed: a reader sees it whole or not at all. Whoever
    else writes to the folder may put anything in it: below its root nothing is
    followed through a link, and only a regular file of a size its kind allows is read."""

    workers = 1  # one write at a time: a kill leaves a prefix of them, in order

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        if not root.is_dir():
            what = "is not a folder" if os.path.lexists(root) else "does not exist"
            raise NotFound(f"the sync folder {root} {what}", field="remote")

    def _path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def _error(self, where: str, exc: OSError) -> StorageError:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        return StorageError(f"the sync folder {self._path(where)}: {reason}",
                            errno=exc.errno)

    def _folder(self, parts: Sequence[str], create: bool = False) -> int | None:
        """A descriptor of the folder `parts` name below the root, each opened without
        following a link; None when one is missing (made, 0700, when `create`), a link
        or a file."""
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self._error("", exc) from None
        for at, part in enumerate(parts):
            try:
                try:
                    sub = os.open(part, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    sub = self._make(fd, part)
            except OSError as exc:
                if exc.errno == errno.ENOENT or exc.errno in _IN_THE_WAY:
                    return None
                raise self._error("/".join(parts[:at + 1]), exc) from None
            finally:
                os.close(fd)
            fd = sub
        return fd

    @staticmethod
    def _make(fd: int, part: str) -> int:
        """The folder `part` in the folder `fd`, made 0700 unless a concurrent writer
        made it first; opened as _folder opens one."""
        made = False
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, fsio.DIR_MODE, dir_fd=fd)
            made = True
        sub = os.open(part, _DIR, dir_fd=fd)
        if made:
            try:
                os.fchmod(sub, fsio.DIR_MODE)  # mkdir's mode is filtered by the umask
                os.fsync(fd)
            except OSError:
                os.close(sub)
                raise
        return sub

    def list(self, prefix: str) -> Iterator[str]:
        parts = [p for p in prefix.split("/") if p]
        fd = self._folder(parts)
        if fd is not None:
            yield from self._walk(fd, "/".join(parts))

    def _walk(self, fd: int, rel: str) -> Iterator[str]:
        """Every name below the folder `fd` (closed here). A folder is walked into, never
        through a link, and only above the layout's objects (docs/sync.md): anything
        else is listed, whatever it is (a pipe, a link, a folder where an object goes),
        so that a reader refuses it and counts it."""
        try:
            try:
                with os.scandir(fd) as entries:
                    found = sorted((e.name, e.is_dir(follow_symlinks=False))
                                   for e in entries)
            except OSError as exc:
                raise self._error(rel, exc) from None
            for entry, is_dir in found:
                if entry.startswith(fsio.TMP_PREFIX):
                    continue
                name = f"{rel}/{entry}" if rel else entry
                if is_dir and syncseal.kind(name) is None and name.count("/") < 2:
                    try:
                        sub = os.open(entry, _DIR, dir_fd=fd)
                    except OSError:
                        continue  # gone, or made a link, since it was listed
                    yield from self._walk(sub, name)
                else:
                    yield name
        finally:
            os.close(fd)

    def get(self, name: str) -> bytes:
        """The object's bytes, read only if it is a regular file (checked before it is
        opened, and again once open) of a size, and a beginning, its kind can have, and
        never past the largest that kind can be."""
        *parents, leaf = name.split("/")
        folder = self._folder(parents)
        if folder is None:
            raise NotFound(f"the remote object {name} is gone")
        try:
            if not stat.S_ISREG(os.stat(leaf, dir_fd=folder, follow_symlinks=False).st_mode):
                raise _unreadable(name, "is not a file")
            fd = os.open(leaf, _OBJECT, dir_fd=folder)
        except FileNotFoundError:
            raise NotFound(f"the remote object {name} is gone") from None
        except OSError as exc:
            if exc.errno in _IN_THE_WAY:
                raise _unreadable(name, "is not a file") from None
            raise self._error(name, exc) from None
        finally:
            os.close(folder)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped in since the check
                raise _unreadable(name, "is not a file")
            if not syncseal.admits(name, st.st_size, os.pread(fd, syncseal.HEAD, 0)):
                raise _unreadable(name, f"is {st.st_size} bytes, not an object of its kind")
            data = fh.read(st.st_size + 1)
        if len(data) > syncseal.max_size(name):  # it grew while it was read
            raise _unreadable(name, "is larger than an object of its kind")
        return data

    def put(self, name: str, data: bytes) -> None:
        *parents, leaf = name.split("/")
        folder = self._folder(parents, create=True)
        if folder is None:
            raise StorageError(f"cannot write {self._path(name)}: a file or a link stands "
                               "where the sync folder needs a folder")
        tmp = f"{fsio.TMP_PREFIX}{leaf}.{os.getpid()}.{time.monotonic_ns()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, fsio.FILE_MODE, dir_fd=folder)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, leaf, src_dir_fd=folder, dst_dir_fd=folder)
            os.fsync(folder)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise StorageError(f"cannot write {self._path(name)}: {reason}",
                               errno=exc.errno) from None
        finally:
            os.close(folder)

    def delete(self, name: str) -> None:
        """Only a name in the folder itself: never through a link, never a folder."""
        *parents, leaf = name.split("/")
        folder = self._folder(parents)
        if folder is None:
            return
        try:
            os.unlink(leaf, dir_fd=folder)
        except (FileNotFoundError, IsADirectoryError):
            pass
        except OSError as exc:
            raise self._error(name, exc) from None
        finally:
            os.close(folder)


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

        if importlib.util.find_spec("botocore") is None:
            raise ConfigError("an s3:// remote needs botocore: install memvault[s3]",
                              field="remote")
        self.url = url
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._endpoint_url = endpoint_url
        self._client: Any = None
        self._failed: BaseException | None = None
        # botocore's import and its client (service models read from JSON) cost about
        # half a second: made on a thread while the sync reads this machine's records,
        # and waited for at the first request.
        self._ready = threading.Thread(target=self._connect, name="mem-sync-s3", daemon=True)
        self._ready.start()

    def _connect(self) -> None:
        try:
            import botocore.session
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError, ClientError

            # botocore alone, not boto3 (which adds some 0.2 s of imports and 5 MB for a
            # transfer manager never used); the same credential chain. Every object is
            # sealed and authenticated (AES-GCM) already: no checksum is computed over
            # its bytes where S3 does not require one.
            config = Config(retries={"max_attempts": 5, "mode": "standard"},
                            connect_timeout=10, read_timeout=60,
                            max_pool_connections=self.workers + 2,
                            request_checksum_calculation="when_required",
                            response_checksum_validation="when_required")
            self._errors = (BotoCoreError, ClientError)
            self._client = botocore.session.get_session().create_client(
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
        """The object's bytes, asked for only up to the largest its kind can be (a
        ranged GET); one of a size (its Content-Range's total) or a beginning its kind
        never has is not read further."""
        bound = syncseal.max_size(name)
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self._key(name),
                                           Range=f"bytes=0-{bound}")
            body = reply["Body"]
            try:
                size = _whole_size(reply)
                head = body.read(syncseal.HEAD)
                if not syncseal.admits(name, size, head):
                    raise _unreadable(name, f"is {size} bytes, not an object of its kind")
                data: bytes = head + body.read(min(size, bound) + 1 - len(head))
            finally:
                body.close()  # what is left unread is not downloaded
        except self._errors as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise NotFound(f"the remote object {name} is gone") from None
            if code == "InvalidRange":  # an empty object has no byte 0
                raise _unreadable(name, "is empty") from None
            raise self._fail("a download", exc) from None
        if len(data) > bound:  # a server that ignored the range, or changed meanwhile
            raise _unreadable(name, "is larger than an object of its kind")
        return data

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


def _whole_size(reply: dict[str, Any]) -> int:
    """An object's whole size from the reply to a ranged GET: its Content-Range's total,
    else (a server that sent the object whole) its length."""
    total = str(reply.get("ContentRange") or "").rpartition("/")[2]
    return int(total) if total.isdigit() else int(reply.get("ContentLength") or 0)


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
