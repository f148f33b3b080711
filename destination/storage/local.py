"""Local filesystem storage: exclusive create with link(), atomic replace, hard links for carry-over.

Durability: a commit record must not survive a crash of the machine without what it names. So a table's files
are fsynced when written (`open_output`, `write_bytes`, a copied file), the folders holding their names are
fsynced before the commit record is created (`sync_directories`, called by the commit and by the table formats
before theirs), and the record itself (`create_exclusive`, the commit point of versions, claims and the table
formats' logs) is fsynced before it is linked into place, and its folder (and any folder made for it) after.
Files another library wrote (delta-rs's checkpoints) are fsynced by `sync_files`."""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from destination.runtime.errors import StorageError
from destination.storage.base import ObjectInfo, Storage, StorageSpec


def process_umask() -> int:
    """The process umask, read without changing it (os.umask can only set it, racing other threads)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    current = os.umask(0o022)  # no /proc (not Linux): set and restore
    os.umask(current)
    return current


class LocalStorage(Storage):
    def __init__(self, spec: StorageSpec) -> None:
        self.spec = spec
        self.base = Path(spec.root).expanduser().resolve()
        try:
            self.base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the root directory {str(self.base)!r}: {exc.strerror}") from None
        if not os.access(self.base, os.W_OK):
            raise StorageError(f"the root directory {str(self.base)!r} is not writable")
        self._fs = pafs.LocalFileSystem()

    def _p(self, path: str) -> Path:
        return self.base / path

    def read_bytes(self, path: str) -> bytes:
        return self._p(path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _synced_temporary(target.parent, data)
        try:
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def create_exclusive(self, path: str, data: bytes) -> bool:
        # Write a temp file then link it into place: link() fails if the target exists, so the
        # object appears complete and atomically, and exactly one of several racers wins.
        target = self._p(path)
        made = _absent_folders(target.parent)  # made here: their names, as the record's, made durable below
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _synced_temporary(target.parent, data)
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        with self.translated("write", path):
            for folder in (target.parent, *(f.parent for f in made)):
                _fsync(folder, directory=True)
        return True

    def exists(self, path: str) -> bool:
        return self._p(path).exists()

    def list_children(self, prefix: str) -> list[str]:
        p = self._p(prefix)
        if not p.is_dir():
            return []
        return sorted(name for name in os.listdir(p) if not name.startswith(".tmp-"))

    def list_recursive(self, prefix: str) -> Iterator[ObjectInfo]:
        top = self._p(prefix)
        if not top.is_dir():
            return
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                full = Path(dirpath) / name
                st = full.stat()
                yield ObjectInfo(str(full.relative_to(self.base)).replace(os.sep, "/"), st.st_size, st.st_mtime)

    def list_starting_with(self, path: str) -> list[str]:
        folder, _, start = path.rpartition("/")
        names = self.list_children(folder)
        return [f"{folder}/{n}" if folder else n for n in names if n.startswith(start)]

    def delete(self, path: str) -> None:
        self._p(path).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self._p(prefix), ignore_errors=True)

    def copy(self, src: str, dst: str) -> None:
        target = self._p(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(self._p(src), target)
        except FileExistsError:
            pass
        except OSError:  # another filesystem, or links not supported
            shutil.copyfile(self._p(src), target)
            _fsync(target)

    def size(self, path: str) -> int:
        return self._p(path).stat().st_size

    def url(self, path: str) -> str:
        return self._p(path).as_uri()

    @contextmanager
    def open_output(self, path: str, durable: bool = True) -> Iterator[pa.NativeFile]:
        with super().open_output(path) as sink:
            yield sink
        if durable:
            with self.translated("write", path):
                _fsync(self._p(path))

    def sync_directories(self, directories: Sequence[str]) -> None:
        for directory in dict.fromkeys(directories):  # each once, in the order given
            with self.translated("write", directory):
                _fsync(self._p(directory), directory=True)

    def sync_files(self, paths: Sequence[str]) -> None:
        for path in paths:
            with self.translated("write", path):
                _fsync(self._p(path))

    @property
    def arrow_fs(self) -> pafs.FileSystem:
        return self._fs

    def arrow_path(self, path: str) -> str:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        return str(target)


def _synced_temporary(folder: Path, data: bytes) -> Path:
    """`data` in a new temporary file of `folder` (a `.tmp-` name listings leave out), on the disk when this returns,
    as readable as the data files beside it (mkstemp creates 0600): renamed or linked into place by the caller."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~process_umask())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _absent_folders(folder: Path) -> list[Path]:
    """`folder` and those above it that do not exist yet, innermost first."""
    absent = []
    while not folder.exists() and folder != folder.parent:
        absent.append(folder)
        folder = folder.parent
    return absent


def _fsync(path: Path, directory: bool = False) -> None:
    """Flush a closed file's bytes (Linux fsyncs through a read-only descriptor too), or a folder's entries
    (the names created, linked or renamed in it), to the disk. A filesystem that cannot fsync a folder (EINVAL,
    EBADF: some network and FUSE filesystems) makes its entries durable otherwise, or not at all: as PostgreSQL
    does, that is not an error."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if not (directory and exc.errno in (errno.EINVAL, errno.EBADF)):
            raise
    finally:
        os.close(fd)
