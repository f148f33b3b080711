"""A write request on the driver, before any row is read: the rules it must meet and its plan.

Rules: the table exists and is in the RPC's mode (merging a request with the other mode's rules would corrupt
it silently); columns the request's definition adds are added first (fivetran-protocol §10.10); the files'
format is the server's, unless a file is named `*.parquet`. (With a Spark master other than local, the files
are staged where the executors can read them: destination/write/staging.py.)

Plan: the files in request order and the request's digest (over their raw bytes: no decryption needed), which
identifies a retried request.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace

from destination.batch.reader import FileFormat
from destination.errors import BadBatchFile, TableNotFound, UserActionRequired
from destination.table_model import TableDef
from destination.table_store.store import TableVersion
from spark_jobs.contracts import FILE_KINDS, BatchFileRef

READ_SIZE = 1 << 20
WRITE_BATCH, WRITE_HISTORY_BATCH = "WriteBatch", "WriteHistoryBatch"


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    files: tuple[BatchFileRef, ...]
    fmt: FileFormat
    batch_id: str  # digest of every file's bytes and role: identifies a retried request
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


def added_columns(current: TableDef, requested: TableDef) -> list[str]:
    """The request's columns the table lacks (§10.10: they are added before the write)."""
    return [c.name for c in requested.columns if current.column(c.name) is None]


def files_format(files: dict[str, list[str]], fmt: FileFormat, server_format: str) -> FileFormat:
    """The request's format with its kind: the server's (`--batch-file-format`), or Parquet when a file says so
    by its name."""
    named_parquet = any(".parquet" in os.path.basename(p) for paths in files.values() for p in paths)
    return replace(fmt, kind="parquet" if named_parquet else server_format)


def plan_batch(files: dict[str, list[str]], keys: dict[str, bytes], fmt: FileFormat) -> BatchPlan:
    """The request's files in order, and its digest."""
    digest = hashlib.sha256()
    refs: list[BatchFileRef] = []
    total = 0
    for kind in FILE_KINDS:
        for path in files.get(kind, []):
            digest.update(f"{kind}\x00{os.path.basename(path)}\x00".encode())
            total += _digest_file(path, digest)
            refs.append(BatchFileRef(kind=kind, path=path, key=keys.get(path), position=len(refs)))
    return BatchPlan(files=tuple(refs), fmt=fmt, batch_id=digest.hexdigest(), total_bytes=total)


def _digest_file(path: str, digest: hashlib._Hash) -> int:
    """Add the file's bytes to `digest`; its size. BadBatchFile when it cannot be read."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            while chunk := fh.read(READ_SIZE):
                digest.update(chunk)
            return size
    except FileNotFoundError as exc:
        raise BadBatchFile(path, "file not found") from exc
    except OSError as exc:
        raise BadBatchFile(path, f"cannot open: {exc.strerror}") from exc
