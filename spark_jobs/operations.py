"""Batch files → operations (the merge jobs' input), one file at a time, in the Spark task that decodes it.

Rows are numbered in request order: (history tables: earliest-start files first,)
replace files, then update files, then delete files, each in list order and rows
in file order (fivetran-protocol §10.1, §10.2): SEQ = file position << 40 | row in file.
A column missing from a file, or holding the unmodified marker, is flagged
unmodified: it keeps the stored value (NULL for a new row).

The driver only plans a request (`plan_batch`: the files in order and the request's digest,
which identifies a retried request); `file_operations` decodes one file into operations
with their key token and bucket, and `bucket_chunks` splits them into per-bucket Arrow IPC
chunks that Spark shuffles to the bucket's merge task.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from destination.batch.reader import DecodedBatch, FileFormat, iter_batch_file
from destination.conversion import Failure, FailureKey, changes_column, count_by_column
from destination.errors import BadBatchFile
from destination.table_model import START, TableDef
from destination.type_mapping import arrow_type
from destination.keys import buckets_of, key_hashes, key_tokens
from spark_jobs.merge import BUCKET, CHANGES, DELETE, EARLIEST, HASH, KEY, OP, REPLACE, SEQ, UNMOD, UPDATE, key_columns

KINDS = (("earliest", EARLIEST), ("replace", REPLACE), ("update", UPDATE), ("delete", DELETE))
ROW_BITS = 40  # SEQ = file position << ROW_BITS | row within the file
READ_SIZE = 1 << 20


@dataclass(frozen=True)
class BatchFileRef:
    kind: str  # earliest | replace | update | delete
    path: str
    key: bytes | None
    position: int  # in request order
    data: bytes | None = None  # the file's bytes, for executors that cannot read the server's disk

    @property
    def op(self) -> int:
        return dict(KINDS)[self.kind]


@dataclass
class BatchPlan:
    files: list[BatchFileRef]
    fmt: FileFormat
    batch_id: str  # digest of every file's bytes and role: identifies a retried request
    total_bytes: int = 0  # the files as sent (compressed, encrypted)


@dataclass
class FileOperations:
    """One file's operations: typed columns + OP, SEQ, CHANGES, UNMOD flags, KEY, BUCKET."""

    parts: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    failures_by_column: dict[FailureKey, int] = field(default_factory=dict)

    def chunks(self) -> list[tuple[int, bytes]]:
        """(bucket, Arrow IPC stream of that bucket's operations), in bucket order. The file is split once:
        per-block splits left the merge many small batches, which cost more than the split saved."""
        return bucket_chunks(pa.concat_tables(self.parts)) if self.parts else []


def plan_batch(files: dict[str, list[str]], keys: dict[str, bytes], fmt: FileFormat,
               ship_bytes: bool = False) -> BatchPlan:
    """The request's files in order, and its digest (over the files' raw bytes: no decryption needed).
    With `ship_bytes` the files' bytes travel with the plan (Spark executors on other machines)."""
    digest = hashlib.sha256()
    refs: list[BatchFileRef] = []
    total = 0
    for kind, _op in KINDS:
        for path in files.get(kind, []):
            digest.update(f"{kind}\x00{os.path.basename(path)}\x00".encode())
            try:
                total += os.path.getsize(path)
                with open(path, "rb") as fh:
                    data = fh.read() if ship_bytes else None
                    if data is not None:
                        digest.update(data)
                    else:
                        while chunk := fh.read(READ_SIZE):
                            digest.update(chunk)
            except FileNotFoundError:
                raise BadBatchFile(path, "file not found") from None
            except OSError as exc:
                raise BadBatchFile(path, f"cannot open: {exc.strerror}") from None
            refs.append(BatchFileRef(kind, path, keys.get(path), len(refs), data))
    return BatchPlan(refs, fmt, digest.hexdigest(), total)


def _block_to_ops(block: DecodedBatch, table_def: TableDef, op: int, seq_start: int) -> pa.Table:
    n = block.table.num_rows
    arrays: list[pa.Array] = []
    names: list[str] = []
    flags: list[pa.Array] = []
    every, none = pa.array(np.ones(n, dtype=bool)), pa.array(np.zeros(n, dtype=bool))  # shared: arrays are immutable
    for col in table_def.columns:
        names.append(col.name)
        present = col.name in block.table.column_names and op != DELETE
        if col.name in block.table.column_names:
            arrays.append(block.table.column(col.name).combine_chunks())
        else:
            arrays.append(pa.nulls(n, arrow_type(col)))
        if not present:
            flags.append(every)
        elif col.name in block.unmodified:
            flags.append(block.unmodified[col.name])
        else:
            flags.append(none)
    arrays += [pa.array(np.full(n, op, dtype=np.int8)), pa.array(np.arange(seq_start, seq_start + n, dtype=np.int64)),
               changes_column(block.failures, n), *flags]
    names += [OP, SEQ, CHANGES, *(UNMOD + c.name for c in table_def.columns)]
    return pa.Table.from_arrays(arrays, names=names)


def with_keys(ops: pa.Table, table_def: TableDef) -> pa.Table:
    """Append each operation's key token, key hash and bucket (history tables: the key without `_fivetran_start`)."""
    tokens = key_tokens(ops, key_columns(table_def)) if ops.num_rows else pa.array([], pa.string())
    hashes = key_hashes(tokens)
    return (ops.append_column(KEY, tokens).append_column(HASH, pa.array(hashes, pa.uint64()))
            .append_column(BUCKET, pa.array(buckets_of(hashes, table_def.bucket_count))))


def file_operations(table_def: TableDef, ref: BatchFileRef, fmt: FileFormat) -> FileOperations:
    """Decode one batch file into operations; raises BadBatchFile naming the file and the cause."""
    required = [c.name for c in key_columns(table_def)]
    if table_def.is_history and ref.op != DELETE:
        required.append(START)  # a version's start is its identity; a delete closes whatever is active
    out = FileOperations()
    failures: list[Failure] = []
    for block in iter_batch_file(ref.path, list(table_def.columns), fmt, ref.key, required, data=ref.data):
        if block.table.num_rows == 0:
            continue
        missing_key = [c for c in required if block.table.column(c).null_count]
        if missing_key:
            raise BadBatchFile(ref.path, f"NULL or unconvertible value in key column(s) {missing_key}")
        out.parts.append(with_keys(_block_to_ops(block, table_def, ref.op, (ref.position << ROW_BITS) + out.rows),
                                   table_def))
        out.rows += block.table.num_rows
        failures.extend(block.failures)
    out.failures_by_column = count_by_column(failures)
    return out


def split_by_bucket(ops: pa.Table) -> list[tuple[int, pa.Table]]:
    """(bucket, that bucket's rows of `ops`), one per bucket present, in bucket order."""
    if not ops.num_rows:
        return []
    ids = ops.column(BUCKET).to_numpy()
    order = np.argsort(ids, kind="stable")
    ops, ids = ops.take(pa.array(order)), ids[order]
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ids)) + 1, [len(ids)]])
    return [(int(ids[s]), ops.slice(int(s), int(e - s))) for s, e in zip(starts[:-1], starts[1:])]


def bucket_chunks(ops: pa.Table) -> list[tuple[int, bytes]]:
    """(bucket, Arrow IPC stream of that bucket's operations), one per bucket present (key hashes left out)."""
    return [(b, to_ipc(part.drop_columns([HASH]))) for b, part in split_by_bucket(ops)]


def to_ipc(table: pa.Table) -> bytes:
    """An uncompressed IPC stream (compressing the shuffled chunks cost more time than it saved)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(data)).read_all()
