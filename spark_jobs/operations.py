"""The operations schema and its builders: what a merge takes as input, built from batch files (in the task that
decodes them, or on the driver for a small request) or from stored rows (a key change).

An operation is a row of the table's columns plus:
- `OP`: what to do (OP_REPLACE, OP_UPDATE, OP_DELETE, or OP_EARLIEST for a history table's earliest-start row);
- `SEQ`: request order, file position << ROW_BITS | row within the file. Rows are numbered (history tables:
  earliest-start files first,) replace files, then update files, then delete files, each in list order and rows
  in file order (fivetran-protocol §10.1, §10.2);
- `CHANGES`: the row's values that did not convert, as JSON (destination.model.row_meta), or NULL;
- `UNMOD + column`: the column is unmodified (missing from the file, or holding the unmodified marker) and keeps
  the stored value (NULL for a new row);
- `KEY`: the row's key token (destination.model.keys; history tables: of the entity key).
Operations travel to a unit's merge task as Arrow IPC chunks (decoded on the driver) or in sorted runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from destination.batch_files.reader import DecodedBatch, FileFormat, iter_batch_file
from destination.model import row_meta
from destination.model.conversion import Failure, FailureKey, count_by_column
from destination.model.keys import key_tokens
from destination.model.table_model import START, TableDef
from destination.model.type_mapping import arrow_type
from destination.runtime.errors import BadBatchFile
from spark_jobs.contracts import BatchFileRef

OP = "\x00op"
SEQ = "\x00seq"
KEY = "\x00key"
CHANGES = "\x00changes"
UNMOD = "\x00unmod:"
OP_REPLACE, OP_UPDATE, OP_DELETE, OP_EARLIEST = 0, 1, 2, 3  # the values of OP
OP_OF_FILE_KIND = {"earliest": OP_EARLIEST, "replace": OP_REPLACE, "update": OP_UPDATE, "delete": OP_DELETE}
ROW_BITS = 40  # SEQ = file position << ROW_BITS | row within the file


@dataclass
class FileOperations:
    """One file's operations (in blocks, as decoded), its row count and its values that did not convert."""

    parts: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    failures_by_column: dict[FailureKey, int] = field(default_factory=dict)


def _block_operations(block: DecodedBatch, table_def: TableDef, op: int, seq_start: int) -> pa.Table:
    n = block.table.num_rows
    arrays: list[pa.Array] = []
    names: list[str] = []
    flags: list[pa.Array] = []
    every, none = pa.array(np.ones(n, dtype=bool)), pa.array(np.zeros(n, dtype=bool))  # shared: arrays are immutable
    for col in table_def.columns:
        names.append(col.name)
        present = col.name in block.table.column_names and op != OP_DELETE
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
               row_meta.changes_json(block.failures, n), *flags]
    names += [OP, SEQ, CHANGES, *(UNMOD + c.name for c in table_def.columns)]
    return pa.Table.from_arrays(arrays, names=names)


def replace_operations(stored: pa.Table, table_def: TableDef) -> pa.Table:
    """Stored rows (already in `table_def`) as replace operations of every column, in row order: a key change
    places a table's rows anew by merging them into an empty one."""
    n = stored.num_rows
    ops = stored.select([c.name for c in table_def.columns])
    ops = ops.append_column(OP, pa.array(np.full(n, OP_REPLACE, dtype=np.int8)))
    ops = ops.append_column(SEQ, pa.array(np.arange(n, dtype=np.int64)))
    ops = ops.append_column(CHANGES, pa.nulls(n, pa.string()))
    for c in table_def.columns:
        ops = ops.append_column(UNMOD + c.name, pa.array(np.zeros(n, dtype=bool)))
    return with_keys(ops, table_def)


def with_keys(ops: pa.Table, table_def: TableDef) -> pa.Table:
    """Append each operation's key token (history tables: of the key without `_fivetran_start`)."""
    tokens = key_tokens(ops, table_def.entity_key) if ops.num_rows else pa.array([], pa.string())
    return ops.append_column(KEY, tokens)


def file_operations(table_def: TableDef, ref: BatchFileRef, fmt: FileFormat) -> FileOperations:
    """Decode one batch file into operations; raises BadBatchFile naming the file and the cause."""
    op = OP_OF_FILE_KIND[ref.kind]
    required = [c.name for c in table_def.entity_key]
    if table_def.is_history and op != OP_DELETE:
        required.append(START)  # a version's start is its identity; a delete closes whatever is active
    out = FileOperations()
    failures: list[Failure] = []
    for block in iter_batch_file(ref.path, list(table_def.columns), fmt, ref.key, required, source=ref.open_staged()):
        if block.table.num_rows == 0:
            continue
        missing_key = [c for c in required if block.table.column(c).null_count]
        if missing_key:
            raise BadBatchFile(ref.path, f"NULL or unconvertible value in key column(s) {missing_key}")
        seq_start = (ref.position << ROW_BITS) + out.rows
        out.parts.append(with_keys(_block_operations(block, table_def, op, seq_start), table_def))
        out.rows += block.table.num_rows
        failures.extend(block.failures)
    out.failures_by_column = count_by_column(failures)
    return out


def to_ipc(table: pa.Table) -> bytes:
    """An uncompressed IPC stream (compressing the shuffled chunks cost more time than it saved)."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(data)).read_all()
