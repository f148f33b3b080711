"""A write request on the driver, before any row is read: the rules it must meet and its plan.

Rules: the table exists and is in the RPC's mode (merging a request with the other mode's rules would corrupt
it silently); columns the request's definition adds are added first (fivetran-protocol §10.10); the files'
format is the server's, unless a file is named `*.parquet`. (With a Spark master other than local, the files
are staged where the executors can read them: destination/write/staging.py.)

Plan: the files in request order and the request's identity (BatchIdentity: its files' roles, names and sizes,
and a digest of their raw bytes, no decryption needed), which recognises a retried request.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import BinaryIO

from destination.batch_files.reader import FileFormat
from destination.runtime.errors import BadBatchFile, TableNotFound, UserActionRequired
from destination.runtime.pools import shared_pool
from destination.store.versions import TableVersion
from spark_jobs.contracts import FILE_KINDS, BatchFileRef

READ_SIZE = 1 << 20
WRITE_BATCH, WRITE_HISTORY_BATCH = "WriteBatch", "WriteHistoryBatch"


# hashes a request's files while its write runs (hashlib releases the GIL on large buffers)
DIGEST_THREADS = 4


@dataclass(frozen=True)
class BatchIdentity:
    """A request's identity, recorded as `<fingerprint>:<digest>` by the version it commits (ids recorded before
    fingerprints existed are the digest alone). The fingerprint (every file's role, name and size) is known at
    once; the digest of the files' bytes is computed in a thread while the write runs, and waited for only when a
    recorded id could be this request's: hashing a 24 GB load before its job began took about 25 s (measured)."""

    fingerprint: str
    digest: Future[str]

    @property
    def value(self) -> str:
        return f"{self.fingerprint}:{self.digest.result()}"

    def seen_in(self, recent: Sequence[str]) -> bool:
        candidates = [r for r in recent if r.startswith(f"{self.fingerprint}:") or ":" not in r]
        if not candidates:
            return False
        digest = self.digest.result()
        return any(r in (f"{self.fingerprint}:{digest}", digest) for r in candidates)


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    files: tuple[BatchFileRef, ...]
    fmt: FileFormat
    identity: BatchIdentity  # recognises a retried request
    total_bytes: int = 0  # the files as sent (compressed, encrypted)


def check_mode(current: TableVersion | None, rpc: str) -> TableVersion:
    """The table the request writes: it must exist and be in the RPC's mode."""
    if current is None:
        raise TableNotFound("the table does not exist; CreateTable must come first")
    history = rpc == WRITE_HISTORY_BATCH
    if current.table.is_history != history:
        mode = "history mode" if current.table.is_history else "not in history mode"
        raise UserActionRequired(f"the table is {mode} but {rpc} was called; migrate the table's sync mode "
                                 "(Migrate table_sync_mode_migration) or re-create it in the right mode")
    return current


def files_format(files: dict[str, list[str]], fmt: FileFormat, server_format: str) -> FileFormat:
    """The request's format with its kind: the server's (`--batch-file-format`), or Parquet when a file says so
    by its name."""
    named_parquet = any(".parquet" in os.path.basename(p) for paths in files.values() for p in paths)
    return replace(fmt, kind="parquet" if named_parquet else server_format)


def plan_batch(files: dict[str, list[str]], keys: dict[str, bytes], fmt: FileFormat) -> BatchPlan:
    """The request's files in order, and its identity (every file is opened here: a missing or unreadable one is
    a BadBatchFile before anything runs)."""
    fingerprint = hashlib.sha256()
    refs: list[BatchFileRef] = []
    total = 0
    for kind in FILE_KINDS:
        for path in files.get(kind, []):
            size = _check_readable(path)
            fingerprint.update(f"{kind}\x00{os.path.basename(path)}\x00{size}\x00".encode())
            total += size
            refs.append(BatchFileRef(kind=kind, path=path, key=keys.get(path), position=len(refs)))
    identity = BatchIdentity(fingerprint.hexdigest()[:16], shared_pool("batch-digest", DIGEST_THREADS).submit(_digest, refs))
    return BatchPlan(files=tuple(refs), fmt=fmt, identity=identity, total_bytes=total)


@contextmanager
def _opened(path: str) -> Iterator[BinaryIO]:
    """The batch file open for reading; BadBatchFile naming it when it is missing or cannot be read."""
    try:
        with open(path, "rb") as fh:
            yield fh
    except FileNotFoundError as exc:
        raise BadBatchFile(path, "file not found") from exc
    except OSError as exc:
        raise BadBatchFile(path, f"cannot open: {exc.strerror}") from exc


def _check_readable(path: str) -> int:
    """The file's size; BadBatchFile when it is missing or cannot be opened."""
    with _opened(path) as fh:
        return os.fstat(fh.fileno()).st_size


def _digest(refs: Sequence[BatchFileRef]) -> str:
    """The digest of every file's role, name and bytes, in request order (BadBatchFile when one cannot be read)."""
    digest = hashlib.sha256()
    for ref in refs:
        digest.update(f"{ref.kind}\x00{os.path.basename(ref.path)}\x00".encode())
        with _opened(ref.path) as fh:
            while chunk := fh.read(READ_SIZE):
                digest.update(chunk)
    return digest.hexdigest()

