"""The typed contracts between the driver and its Spark tasks: the job's context, one frozen dataclass per unit
kind and one per result.

Spark pickles them (units and the context into the tasks, results back to the driver), so they hold only plain
values and other frozen dataclasses: a table definition, data-file statistics, Arrow IPC bytes. Every class is
keyword-only: build them with keyword arguments and copy them with `dataclasses.replace`, so that adding a field
can never shift another one silently. A task that fails returns a `TaskFailure` (spark_jobs.boundary) instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, BinaryIO, cast

from destination.batch_files.reader import FileFormat
from destination.changes.files import ChangeTarget
from destination.changes.metadata import KIND_ROWS, ChangeFile
from destination.model.conversion import FailureKey
from destination.model.table_model import TableDef
from destination.on_disk.datafiles import DataFile
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage

# the roles of a request's batch files, in the order their rows apply (fivetran-protocol §10.1, §10.2)
FILE_KINDS = ("earliest", "replace", "update", "delete")


def data_rows(kind: str, rows: int) -> int:
    """A batch file's rows as a request's rows count them: those of its replace, update and delete files. A history
    request's earliest-start rows only say where each key's new versions begin (the figure Fivetran's tester reports
    for a request leaves them out too)."""
    return 0 if kind == "earliest" else rows


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """What every task of one job shares: where to read and write, and the definition of the new version."""

    storage: StorageSpec
    base_dir: str | None  # the base version's directory (stored files are read from here)
    target_dir: str  # where new data files are written
    table: TableDef  # the new version's definition
    version: int
    changes: ChangeTarget | None = None  # where the version's change files go, when change files are on
    target_file_bytes: int = 64 << 20  # the data-file size writes aim for (destination.on_disk.placement)
    scratch: StorageSpec | None = None  # where sorted runs are staged (None: the table's own storage)
    run_compression: str | None = "lz4"  # how sorted runs are staged: IPC buffer compression, None: uncompressed

    @property
    def tracks_row_changes(self) -> bool:
        return self.changes is not None and self.changes.kind == KIND_ROWS

    @property
    def read_dir(self) -> str:
        return self.base_dir or ""


# ---- units: one per task ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class StagedCopy:
    """A batch file's bytes as sent (still encrypted), copied by the driver into the table root's storage for
    executors that cannot read the server's disk (destination/write/staging.py)."""

    storage: StorageSpec
    path: str  # below the storage's root


@dataclass(frozen=True, kw_only=True)
class BatchFileRef:
    """One batch file of a request, as the task that decodes it needs it."""

    kind: str  # one of FILE_KINDS
    path: str  # on the server's disk (and in error messages)
    key: bytes | None  # the AES key (None: not encrypted)
    position: int  # in request order
    staged: StagedCopy | None = None  # where tasks read the file instead of `path`

    def open_staged(self) -> BinaryIO | None:
        """A stream of the staged copy's bytes, or None: read `path`."""
        if self.staged is None:
            return None
        return cast(BinaryIO, open_storage(self.staged.storage).open_stream(self.staged.path))


@dataclass(frozen=True, kw_only=True)
class RunSource:
    """Stage 1 of a large write: one batch file decoded into operations (or, for a relayout, one stored file's
    rows), sorted in key order and staged as an Arrow IPC file of small record batches at `run_path`."""

    run_path: str  # in the scratch storage (JobContext.scratch)
    ref: BatchFileRef | None = None
    fmt: FileFormat | None = None
    stored: DataFile | None = None  # a relayout: this file's rows, in the base version


@dataclass(frozen=True, kw_only=True)
class RunSlice:
    """The record batches of one sorted run that may hold keys of a unit's range (consecutive, in order)."""

    run_path: str
    batches: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class RangeUnit:
    """One unit of a write over the table's key ranges (destination.on_disk.placement): the range [lo, hi) of entity keys
    (JSON keys, None: unbounded), the base's files that overlap it, and the request's operations in it — Arrow
    IPC chunks (decoded on the driver) and/or slices of sorted runs (filtered to the range by the task)."""

    lo: list[Any] | None
    hi: list[Any] | None
    files: tuple[DataFile, ...] = ()
    compact: bool = False  # rewrite `files` even where no operation touches them
    chunks: tuple[bytes, ...] = ()
    runs: tuple[RunSlice, ...] = ()
    rows_only: bool = False  # the runs hold rows to place in key order, not operations (a relayout)
    tag: int = 0  # the unit's position, for file names and change-file order


@dataclass(frozen=True, kw_only=True)
class TruncateUnit:
    file: DataFile
    cutoff_us: int  # rows whose synced column is before this (at ms precision) go
    synced_column: str
    deleted_column: str | None  # a soft truncate marks the rows instead (the column exists by then)


@dataclass(frozen=True, kw_only=True)
class RewriteUnit:
    """One stored file re-encoded under the job's definition (AlterTable, column migrations)."""

    file: DataFile
    old_table: TableDef
    sources: dict[str, str] = field(default_factory=dict)  # new column → the old column it takes its values from
    constants: dict[str, str | None] = field(default_factory=dict)  # column → the text every row gets (None: NULL)


@dataclass(frozen=True, kw_only=True)
class VersionAtStep:
    """ADD/DROP_COLUMN_IN_HISTORY_MODE: open a version at `ts_us` carrying `value` in `column`."""

    column: str
    value: str | None  # the text of the default (None: NULL)
    ts_us: int
    only_with_value: bool  # a drop opens versions only for rows that hold a value


@dataclass(frozen=True, kw_only=True)
class ToHistoryStep:
    """SOFT_DELETE_TO_HISTORY and COPY_TABLE_TO_HISTORY_MODE: rows become versions."""

    deleted_column: str | None
    start_us: int | None  # the start of every live row's version (None: the table has no rows)


@dataclass(frozen=True, kw_only=True)
class HistoryRewriteUnit:
    file: DataFile
    old_table: TableDef
    step: VersionAtStep | ToHistoryStep


@dataclass(frozen=True, kw_only=True)
class LatestVersionsUnit:
    """HISTORY_TO_SOFT_DELETE for one file, or one bucket of a table still in key-hash buckets (every version of a
    key is in one of them)."""

    bucket: int
    files: tuple[DataFile, ...]
    old_table: TableDef
    deleted_column: str
    keep_deleted_rows: bool


@dataclass(frozen=True, kw_only=True)
class FormatChangesUnit:
    """Phase 2 of an Arcion change directory: one staged file, with the running totals before it."""

    part: ChangeFile
    totals_before: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class SnapshotChangesUnit:
    """The snapshot change file of one data file that no task wrote (a table copy's files)."""

    directory: str
    file: DataFile


@dataclass(frozen=True, kw_only=True)
class CheckConversionUnit:
    """AlterTable's check before a lossy type change: one stored file, the columns to check."""

    file: DataFile
    old_table: TableDef
    columns: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CopyUnit:
    """Server-side copies of a complete-layout carry-forward: (source, target) storage paths."""

    pairs: tuple[tuple[str, str], ...]


# ---- results --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class FilesWritten:
    """What a task wrote: new data files, the base files they replace, counts, and change files."""

    new_files: tuple[DataFile, ...] = ()
    replaced: tuple[str, ...] = ()  # names of base files rewritten (not carried into the new version)
    counts: dict[str, int] = field(default_factory=dict)
    changes: tuple[ChangeFile, ...] = ()
    seconds: float = 0.0  # the task's own time, where it reports it


@dataclass(frozen=True, kw_only=True)
class DecodedCounts:
    """The map side's account of one batch file: its rows, the values that did not convert, its decode time."""

    rows: int
    failures_by_column: dict[FailureKey, int]
    seconds: float
    data_rows: int  # rows counted as the request's (data_rows)


@dataclass(frozen=True, kw_only=True)
class RequestCounts:
    """A whole request's account, summed over its files."""

    rows: int = 0  # every row read, earliest-start rows included
    files: int = 0
    failures_by_column: dict[FailureKey, int] = field(default_factory=dict)
    decode_seconds: float | None = None  # where the files were decoded in tasks of their own
    data_rows: int = 0  # the rows of the replace, update and delete files (data_rows)


@dataclass(frozen=True, kw_only=True)
class SortedRun:
    """A staged run: its rows, and per record batch its row count and first and last entity key (JSON), which
    the driver plans the units from; `counts` is the batch file's account (None for a relayout's stored file)."""

    run_path: str
    rows: int
    bytes: int
    batch_rows: tuple[int, ...]
    batch_first: tuple[list[Any], ...]
    batch_last: tuple[list[Any], ...]
    counts: DecodedCounts | None = None


@dataclass(frozen=True, kw_only=True)
class ConversionCheck:
    """Per checked column that would lose values: how many, and one row's key (for the user, never the log)."""

    lost: dict[str, int]
    example: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class FilesCopied:
    """A copy task's account: the files it copied and its time."""

    files: int
    seconds: float
