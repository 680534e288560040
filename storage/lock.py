"""One writer at a time: a lock object beside what it guards, on a local disk or any fsspec store.

Problem: two pipeline runs appending to one dataset at once appended the same partitions
twice, and two registry publishes could pick the same version number.  Every writer of a
dataset (ingest, append, ``pipeline run``) and of a registry model (publish, promote)
holds a :class:`Lock` on it; a second writer waits up to ``timeout`` seconds, then fails
with :class:`LockHeldError` naming the holder (the CLI's exit code 4, ``EXIT_LOCKED``).

The lock is one small JSON object (owner: host, pid, PID namespace, run id; a random
token; the heartbeat time and count), written with create-if-absent semantics:

* local disks: written to a temp file and hard-linked into place (``os.link`` fails if
  the name exists; atomic on POSIX file systems).  Compare-and-swap (heartbeat, takeover,
  release) runs under ``flock`` on the folder, which the kernel drops if the process dies.
* S3 (s3fs): ``PutObject`` with ``If-None-Match: *``; compare-and-swap by ``If-Match`` on
  the object's ETag (PutObject and DeleteObject) — checked against the moto server.
* other fsspec stores: ``open(mode="xb")`` where the file system supports it, else an
  existence check then a write; compare-and-swap is read-compare-write.  There the race
  window is the time between the check and the write (milliseconds): documented in
  ``docs/pipeline.md``.

A heartbeat thread rewrites the object every ``heartbeat`` seconds (compare-and-swap on
the version it wrote last; if that fails the lock was taken over and :meth:`Lock.check`
raises).  A lock is *stale* when its holder is on this host, in this PID namespace, and
its process is gone (a SIGKILLed run: recovered at once), or when its heartbeat time is
older than ``stale_after`` seconds (clocks in sync, as NTP keeps them), or when the object
has not changed for ``stale_after`` seconds of the waiter's own clock (no clock needed).
A stale lock is taken over by compare-and-swap on the version judged stale, so of two
waiters exactly one wins.  A thread holding a lock may take it again (re-entrant).

A lock is keyed by the guarded thing's one identity (:func:`distsvm.storage.paths.canonical`:
absolute, symlinks resolved; the URL of a remote store), so every spelling of a store is
one lock, and a process never waits on itself: a lock object naming this very process
that none of its live locks holds (one never released, or a recycled pid) is taken over
at once.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import threading
import time
import uuid

from . import bounded
from .errors import StorageError
from .paths import canonical

DEFAULT_TIMEOUT = 60.0  # seconds a second writer waits for the lock
HEARTBEAT = 5.0  # seconds between heartbeats
STALE_AFTER = 30.0  # a heartbeat older than this is a dead holder's


class LockHeldError(StorageError):
    """Another writer holds the lock (the message names it) and did not let go in time."""


class LockLostError(StorageError):
    """This writer's lock was taken over (its heartbeat stopped for too long)."""


def lock_url(url: str, kind: str = "lock") -> str:
    """Where the lock of a dataset or other path ``url`` lives: ``.NAME.lock`` beside it,
    ``url`` taken by its one identity (:func:`distsvm.storage.paths.canonical`: a relative path, a
    symlink and the absolute path of one store have one lock)."""
    url = canonical(url)
    parent, sep, base = url.rpartition("/")
    if not sep or parent.endswith(":/") or parent.endswith(":"):  # a bucket or bare name
        if "://" in url:
            return f"{url}/.distsvm.{kind}"
        parent, base = ".", url
    return f"{parent}/.{base}.{kind}"


def _now() -> float:
    return time.time()


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


def _pidns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


# ------------------------------------------------------------------ backends
# Each stores one object: create(data) -> tag or None (exists); read() -> (data, tag) or
# None (absent); swap(data, tag) -> new tag or None (changed); delete(tag) -> bool.


class _Local:
    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)

    @contextlib.contextmanager
    def _guard(self):
        """flock on the lock's folder (no file left behind; dropped if the process dies).
        Where the file system refuses it, read-compare-replace runs unguarded."""
        import fcntl

        fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # drops the flock

    def _tmp(self, data: bytes) -> str:
        """``data`` in a new temp file beside the lock; removed again if writing it fails
        (a full disk), the error naming the lock."""
        tmp = f"{self.path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise OSError(exc.errno, exc.strerror, self.path) from exc
        return tmp

    def _sweep(self) -> None:
        """Remove temp files of this lock older than :data:`STALE_AFTER`: a writer that
        failed between writing one and removing it (others' live ones are milliseconds
        old).  Called by the holder."""
        folder, prefix = os.path.split(self.path)
        for name in os.listdir(folder):
            if name.startswith(f"{prefix}.") and name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if _now() - os.stat(os.path.join(folder, name)).st_mtime > STALE_AFTER:
                        os.unlink(os.path.join(folder, name))

    @staticmethod
    def _tag(data: bytes) -> str:
        import hashlib

        return hashlib.sha256(data).hexdigest()

    def create(self, data: bytes):
        tmp = self._tmp(data)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return None
        except OSError:  # a file system without hard links: O_EXCL, then the content
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return None
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        finally:
            os.unlink(tmp)
        with contextlib.suppress(OSError):
            self._sweep()
        return self._tag(data)

    def read(self):
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return data, self._tag(data)

    def swap(self, data: bytes, tag: str):
        with self._guard():
            cur = self.read()
            if cur is None or cur[1] != tag:
                return None
            os.replace(self._tmp(data), self.path)
            return self._tag(data)

    def delete(self, tag: str) -> bool:
        with self._guard():
            cur = self.read()
            if cur is None or cur[1] != tag:
                return False
            os.unlink(self.path)
            return True


class _S3:
    def __init__(self, fs, path: str):
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)

    def _call(self, method, **kw):
        from fsspec.asyn import sync

        return sync(self.fs.loop, self.fs._call_s3, method, Bucket=self.bucket, Key=self.key, **kw)

    @staticmethod
    def _failed_precondition(exc) -> bool:
        text = f"{exc} {exc.__cause__}"
        return any(k in text for k in ("pre-condition", "PreconditionFailed",
                                       "ConditionalRequestConflict"))

    def create(self, data: bytes):
        try:
            return self._call("put_object", Body=data, IfNoneMatch="*")["ETag"]
        except FileExistsError:
            return None
        except OSError as exc:
            if self._failed_precondition(exc):
                return None
            raise

    def read(self):
        from fsspec.asyn import sync

        try:
            r = self._call("get_object")
        except FileNotFoundError:
            return None

        async def body():
            return await r["Body"].read()

        return sync(self.fs.loop, body), r["ETag"]

    def swap(self, data: bytes, tag: str):
        try:
            return self._call("put_object", Body=data, IfMatch=tag)["ETag"]
        except (FileNotFoundError, FileExistsError):
            return None
        except OSError as exc:
            if self._failed_precondition(exc):
                return None
            raise

    def delete(self, tag: str) -> bool:
        try:
            self._call("delete_object", IfMatch=tag)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            if self._failed_precondition(exc):
                return False
            cur = self.read()  # a server without conditional deletes: compare, then delete
            if cur is None or cur[1] != tag:
                return False
            self._call("delete_object")
            return True


class _Fsspec:
    """Any other fsspec file system: best effort (see the module docstring)."""

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path

    def create(self, data: bytes):
        try:
            with self.fs.open(self.path, "xb") as f:
                f.write(data)
        except FileExistsError:
            return None
        except (ValueError, NotImplementedError):  # no exclusive mode: check, then write
            if self.fs.exists(self.path):
                return None
            self.fs.pipe_file(self.path, data)
        return _Local._tag(data)

    def read(self):
        try:
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        return data, _Local._tag(data)

    def swap(self, data: bytes, tag: str):
        cur = self.read()
        if cur is None or cur[1] != tag:
            return None
        self.fs.pipe_file(self.path, data)
        return _Local._tag(data)

    def delete(self, tag: str) -> bool:
        cur = self.read()
        if cur is None or cur[1] != tag:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path)
        return True


def _backend(url: str, storage_options: dict | None):
    if "://" not in url or url.startswith("file://"):
        return _Local(url[len("file://"):] if url.startswith("file://") else url)
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    if type(fs).__name__ == "S3FileSystem":
        return _S3(fs, path)
    return _Fsspec(fs, path)


# ------------------------------------------------------------------ the lock

_HELD: dict[tuple[str, int], Lock] = {}  # (lock URL, thread) -> the lock it holds
_TOKENS: set[str] = set()  # the tokens of this process's locks, being acquired or held
_HELD_LOCK = threading.Lock()


def _orphan(doc: dict | None) -> bool:
    """Whether a lock document names this very process but none of its locks' tokens: no
    live writer of this process holds it, and no other process can."""
    o = (doc or {}).get("owner", {})
    if (o.get("host"), o.get("pidns"), o.get("pid")) != (socket.gethostname(), _pidns(),
                                                         os.getpid()):
        return False
    with _HELD_LOCK:
        return doc.get("token") not in _TOKENS


def _parse(data: bytes) -> dict:
    """A lock object's JSON document, bounded (:mod:`distsvm.storage.bounded`): ValueError if it
    is not one (a torn or foreign object, read as unknown)."""
    doc = bounded.loads(data, "lock object", bounded.MAX_DOCUMENT_BYTES)
    if not isinstance(doc, dict):
        raise ValueError("lock object: not a JSON object")
    return doc


def describe(doc: dict | None) -> str:
    """'run R (pid P on HOST, since T, heartbeat T2)' of a lock's JSON document."""
    if not doc:
        return "an unknown writer (unreadable lock)"
    o = doc.get("owner", {})
    return (f"run {o.get('run')} (pid {o.get('pid')} on {o.get('host')}, since "
            f"{doc.get('acquired')}, last heartbeat {doc.get('heartbeat')})")


def read_lock(url: str, storage_options: dict | None = None) -> dict | None:
    """The document of the lock at ``url`` (a :func:`lock_url`), or None if there is none."""
    cur = _backend(url, storage_options).read()
    if cur is None:
        return None
    try:
        return _parse(cur[0])
    except ValueError:
        return {}


def is_stale(doc: dict | None, stale_after: float = STALE_AFTER) -> bool:
    """Whether a lock document is a dead holder's by its own evidence (process gone on this
    host, or a heartbeat older than ``stale_after``)."""
    if not doc:
        return False
    o = doc.get("owner", {})
    if o.get("host") == socket.gethostname() and o.get("pidns") == _pidns() \
            and isinstance(o.get("pid"), int) and not _alive(o["pid"]):
        return True
    beat = doc.get("heartbeat_unix")
    return isinstance(beat, (int, float)) and _now() - beat > doc.get("stale_after", stale_after)


class Lock:
    """A writer's lock on ``url`` (the thing guarded; the lock object is :func:`lock_url`'s,
    or ``lock_at``).  ``with Lock(url, ...):`` acquires (waiting up to ``timeout`` seconds;
    0: try once) and releases; ``what`` names the guarded thing in messages."""

    def __init__(self, url: str, storage_options: dict | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, run: str | None = None,
                 what: str | None = None, lock_at: str | None = None,
                 heartbeat: float = HEARTBEAT, stale_after: float = STALE_AFTER,
                 poll: float = 0.25, progress=None):
        self.url = canonical(url)
        self.lock_url = canonical(lock_at) if lock_at else lock_url(self.url)
        self.storage_options = storage_options
        self.timeout, self.heartbeat, self.stale_after, self.poll = (
            float(timeout), float(heartbeat), float(stale_after), float(poll))
        if not 0 <= self.timeout < float("inf"):  # NaN would never time out
            raise ValueError(f"{what or self.url}: a lock's timeout must be "
                             f"a finite number of seconds >= 0. Got {timeout!r} instead.")
        self.what = what or self.url
        self.run = run or uuid.uuid4().hex[:12]
        self.progress = progress
        self._tag = None
        self._doc = None
        self._count = 0
        self._stop = threading.Event()
        self._thread = None
        self.lost = False
        self.took_over = None  # the stale holder's document, if this lock replaced one

    # -- the document
    def _document(self, beat: int) -> bytes:
        t = _now()
        doc = {"owner": {"host": socket.gethostname(), "pid": os.getpid(), "pidns": _pidns(),
                         "run": self.run},
               "guards": self.url, "token": self._token, "acquired": self._acquired,
               "heartbeat": _iso(t), "heartbeat_unix": t, "beat": beat,
               "stale_after": self.stale_after}
        self._doc = doc
        return json.dumps(doc).encode()

    def acquire(self) -> Lock:
        key = (self.lock_url, threading.get_ident())
        with _HELD_LOCK:
            held = _HELD.get(key)
        if held is not None:  # re-entrant: this thread holds it already
            held._count += 1
            self._count, self._reentered = 1, held
            return self
        self._reentered = None
        backend = _backend(self.lock_url, self.storage_options)
        self._backend = backend
        self._token, self._acquired = uuid.uuid4().hex, _iso(_now())
        with _HELD_LOCK:
            _TOKENS.add(self._token)
        try:
            tag = self._wait(backend)
        except BaseException as exc:
            with _HELD_LOCK:
                _TOKENS.discard(self._token)
            if isinstance(exc, OSError):  # e.g. a full disk: say whose lock it was
                raise StorageError(f"{self.what}: cannot write its lock {self.lock_url}: "
                                   f"{exc.strerror or exc}") from exc
            raise
        self._tag, self._count, self._key = tag, 1, key
        with _HELD_LOCK:
            _HELD[key] = self
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"lock {self.lock_url}",
                                        daemon=True)
        self._thread.start()
        return self

    def _wait(self, backend):
        """Create the lock object, or take a stale or orphaned one over, waiting up to the
        timeout for a live holder; the new object's tag."""
        deadline = time.monotonic() + self.timeout
        seen: dict[str, float] = {}  # version tag -> when this waiter first saw it
        waited = False
        while True:
            tag = backend.create(self._document(0))
            if tag is not None:
                break
            cur = backend.read()
            if cur is None:
                continue  # released in between: try again at once
            data, old = cur
            try:
                doc = _parse(data)
            except ValueError:
                doc = {}
            first = seen.setdefault(old, time.monotonic())
            if (is_stale(doc, self.stale_after) or _orphan(doc)
                    or time.monotonic() - first > self.stale_after):
                tag = backend.swap(self._document(0), old)
                if tag is not None:
                    self.took_over = doc
                    if self.progress is not None:
                        self.progress.note(f"lock: {self.what}: took over the stale lock of "
                                           f"{describe(doc)}")
                    return tag
                continue
            if time.monotonic() >= deadline:
                raise LockHeldError(f"{self.what}: another writer holds the lock "
                                    f"{self.lock_url}: {describe(doc)}; waited "
                                    f"{self.timeout:g}s (retry later, or remove the lock "
                                    "file if that writer is surely gone)")
            if not waited and self.progress is not None:
                self.progress.note(f"lock: {self.what}: waiting up to {self.timeout:g}s for "
                                   f"{describe(doc)}")
            waited = True
            time.sleep(max(0.01, min(self.poll, deadline - time.monotonic())))
        return tag

    def _beat(self) -> None:
        beat = 0
        while not self._stop.wait(self.heartbeat):
            beat += 1
            try:
                tag = self._backend.swap(self._document(beat), self._tag)
            except OSError:  # a passing storage error: the next beat tries again
                continue
            if tag is None:  # taken over, unless the swap failed for another reason
                cur = self._backend.read()
                try:
                    ours = cur is not None and _parse(cur[0]).get("token") == self._token
                except ValueError:
                    ours = False
                if not ours:
                    self.lost = True
                    return
                tag = cur[1]
            self._tag = tag

    def check(self) -> None:
        """Raise :class:`LockLostError` if another writer took this lock over (the lock
        object is read: it must still hold this lock's token)."""
        lock = self._reentered or self
        if not lock.lost and lock._tag is not None:
            cur = lock._backend.read()
            try:
                lock.lost = cur is None or _parse(cur[0]).get("token") != lock._token
            except ValueError:
                lock.lost = True
        if lock.lost:
            raise LockLostError(f"{self.what}: this run's lock {self.lock_url} was taken over "
                                "by another writer (its heartbeat stopped); stopping")

    def release(self) -> None:
        if self._reentered is not None:
            self._reentered._count -= 1
            self._reentered = None
            return
        if self._tag is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with _HELD_LOCK:
            _HELD.pop(self._key, None)
            _TOKENS.discard(self._token)
        with contextlib.suppress(OSError):
            if not self.lost:
                self._backend.delete(self._tag)
        self._tag = None

    def __enter__(self) -> Lock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
