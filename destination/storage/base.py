"""The storage contract the table store relies on.

Paths are relative, `/`-separated keys below the root. Methods raise
FileNotFoundError for a missing object, FileExistsError only from
`create_exclusive` (as False), and `StorageError` (a Task) for anything the
user must fix: unreachable endpoint, bad credentials, missing bucket, a path
that cannot be written. Backends translate their library's errors into these;
a StorageError names the path and the cause, never the credentials.
"""
from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from destination.runtime.errors import DestinationError, StorageError, scrub
from destination.runtime.pools import side_by_side

IO_THREADS = 8  # objects written or checked at once by `write_all` and `all_exist` in a process (more wait)
IO_POOL = "storage-io"  # one pool for both: its threads never wait on its own work

S3_RETRY_ATTEMPTS = 6  # attempts per S3 call, the first included
STREAM_BUFFER = 8 << 20  # a sequential reader fetches this much per request (S3: one ranged GET)


@dataclass(frozen=True)
class StorageSpec:
    """Everything needed to (re)open a store; picklable so Spark tasks can open it too."""

    root: str  # a local path or s3://bucket/prefix
    s3_endpoint: str = ""
    s3_region: str = ""
    access_key_id: str = ""
    secret_access_key: str = ""
    s3_retry_attempts: int = S3_RETRY_ATTEMPTS  # per S3 call (driver and tasks), at least 1

    @property
    def is_s3(self) -> bool:
        return self.root.startswith("s3://")

    def __repr__(self) -> str:  # never print credentials
        return f"StorageSpec(root={self.root!r}, s3_endpoint={self.s3_endpoint!r})"


@dataclass(frozen=True)
class ObjectInfo:
    path: str
    size: int
    mtime: float  # seconds since the epoch


class Storage(ABC):
    spec: StorageSpec

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write (or replace) a whole object; visible atomically."""

    @abstractmethod
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create the object only if absent (S3 If-None-Match: *, local O_EXCL). False if it existed."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list_children(self, prefix: str) -> list[str]:
        """Names of the direct children (objects and 'folders') of prefix, sorted."""

    @abstractmethod
    def list_recursive(self, prefix: str) -> Iterator[ObjectInfo]: ...

    @abstractmethod
    def list_starting_with(self, path: str) -> list[str]:
        """Paths of the objects in path's folder whose path starts with `path` (e.g. a claim and its
        takeovers: `_log/N.claim`, `_log/N.claim.1`), sorted."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete one object; a missing object is not an error."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None: ...

    @abstractmethod
    def copy(self, src: str, dst: str) -> None:
        """Carry an object to a new key without passing its bytes through this process."""

    @abstractmethod
    def size(self, path: str) -> int: ...

    @abstractmethod
    def url(self, path: str) -> str:
        """Absolute URL for manifests: file:///… or s3://bucket/…"""

    @property
    @abstractmethod
    def arrow_fs(self) -> pafs.FileSystem: ...

    @abstractmethod
    def arrow_path(self, path: str) -> str: ...

    def write_all(self, objects: Sequence[tuple[str, bytes]]) -> None:
        """Write (or replace) several whole objects side by side (a version's metadata files: one round trip's time
        on S3, not one per object); every write has ended when this returns, and the first failure is raised."""
        side_by_side(IO_POOL, IO_THREADS, [partial(self.write_bytes, path, data) for path, data in objects])

    def all_exist(self, paths: Sequence[str]) -> bool:
        """Whether every object of `paths` exists, asked side by side (one round trip's time on S3)."""
        missing: list[str] = []

        def check(path: str) -> None:
            if not self.exists(path):
                missing.append(path)

        side_by_side(IO_POOL, IO_THREADS, [partial(check, path) for path in paths])
        return not missing

    @contextmanager
    def probing_root(self) -> Iterator[None]:
        """Around a probe object written and deleted directly under the root: afterwards the root is as it was. Here
        nothing is left to do (a local root exists before the probe); S3 removes the folders the probe created."""
        yield

    @contextmanager
    def open_output(self, path: str, durable: bool = True) -> Iterator[pa.NativeFile]:
        """A stream writing the object at `path`, complete when the block ends. StorageError when it cannot be
        opened, written or closed. The bytes are stored as written (Arrow would gzip a `.gz` path by itself).
        `durable`: the object must survive a crash of the machine once the block ends (a table's files; scratch
        files a crash makes useless anyway pass False). An S3 object is durable when its upload completes."""
        with self.translated("write", path), \
                self.arrow_fs.open_output_stream(self.arrow_path(path), compression=None) as sink:
            yield sink

    def sync_directories(self, directories: Sequence[str]) -> None:  # noqa: B027 (a backend's hook, mostly empty)
        """Make the entries created in `directories` (files written, linked or renamed there, folders made there)
        survive a crash of the machine: before a commit record names them. Nothing to do where an object is
        durable once written (S3)."""

    def sync_files(self, paths: Sequence[str]) -> None:  # noqa: B027 (a backend's hook, mostly empty)
        """Make the bytes of files another library wrote at `paths` (delta-rs's checkpoints) survive a crash of the
        machine. Nothing to do where an object is durable once written (S3)."""

    @contextmanager
    def open_input(self, path: str, size: int | None = None) -> Iterator[pa.NativeFile]:
        """A random-access reader of the object at `path`. FileNotFoundError when it is missing, StorageError when
        it cannot be read. `size`, the object's size when the caller knows it, lets a backend read a small object
        whole (S3: one request)."""
        with self.translated("read", path), self.arrow_fs.open_input_file(self.arrow_path(path)) as source:
            yield source

    def open_stream(self, path: str) -> io.RawIOBase:
        """A sequential reader of the object at `path`, for a caller that reads it once from start to end and
        closes it. Its errors are the contract's, opening and reading alike (FileNotFoundError, StorageError)."""
        return _ObjectReader(self, path)

    @contextmanager
    def translated(self, action: str, path: str) -> Iterator[None]:
        """Within the block, an OSError of the storage library (pyarrow's, the operating system's) becomes the
        contract's StorageError (or what the backend's `library_error` makes of it), chained to it;
        FileNotFoundError stays what it is."""
        try:
            yield
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise self.library_error(action, path, exc) from exc

    def library_error(self, action: str, path: str, exc: OSError) -> DestinationError:
        """The contract's error for an OSError of the storage library: a StorageError naming the object."""
        return StorageError(f"{action} of {self.url(path)} failed: {reason(exc)}")


class _ObjectReader(io.RawIOBase):
    """Storage.open_stream: pyarrow's buffered input stream, with every library error translated."""

    def __init__(self, storage: Storage, path: str) -> None:
        super().__init__()
        self._storage, self._path = storage, path
        with storage.translated("read", path):
            self._source = storage.arrow_fs.open_input_stream(storage.arrow_path(path), buffer_size=STREAM_BUFFER)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        with self._storage.translated("read", self._path):
            return int(self._source.readinto(buffer))

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


def local_root_problem(root: str, must_exist: bool) -> str | None:
    """Why a local root (not s3://) cannot be opened as a directory: it is a file, or (`must_exist`) missing."""
    if "://" in root:
        return None
    path = Path(root).expanduser()
    if path.exists() and not path.is_dir():
        return f"the root {root!r} is a file, not a directory"
    if must_exist and not path.exists():
        return f"the root directory {root!r} does not exist"
    return None


def create_local_root(root: str) -> str | None:
    """Creates a missing local root (not s3://) with its parents; why it cannot be, or None when it is there."""
    if "://" in root:
        return None
    try:
        Path(root).expanduser().mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"the root directory {root!r} cannot be created: {reason(exc)}"
    return None


def reason(exc: OSError) -> str:
    """An OSError's cause in words: the system's text when it has one, else the library's (scrubbed)."""
    if exc.strerror:
        return exc.strerror
    lines = str(exc).strip().splitlines()
    return scrub(lines[0]) if lines else type(exc).__name__
