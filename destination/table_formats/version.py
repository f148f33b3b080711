"""What the table formats are told about one committed records version: the contract between the records store
(`sync.py` builds it) and the format writers (`delta.py`, `iceberg.py`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk.options import DELTA as DELTA  # the format names are the configuration's
from destination.on_disk.options import ICEBERG as ICEBERG
from destination.on_disk.options import TABLE_FORMATS as TABLE_FORMATS
from destination.storage.base import Storage


@dataclass(frozen=True, kw_only=True)
class LakeFile:
    """A data file of the version, where it was first written (never a carried-forward copy)."""

    path: str  # relative to the table's folder, e.g. "v00000000000000000003/part-….parquet"
    bytes: int
    rows: int


@dataclass(frozen=True, kw_only=True)
class ChangeDataFile:
    """A Parquet file of the version's row-level changes in Delta's change data feed layout: the table's columns
    (`_destination_meta` included) and `_change_type` (insert, update_preimage, update_postimage, delete)."""

    path: str  # relative to the table's folder, e.g. "_change_data/v00000000000000000003/00000.parquet"
    bytes: int


@dataclass(frozen=True)
class FormatLog:
    """One listing of a format's metadata for a table: the records versions it holds an entry for (ascending) and
    the names listed (Delta's log; Iceberg needs only the versions), handed from the check of how far the format
    is to the commit on top of it (on S3 a listing is a round trip; a small sync's commit no longer lists twice)."""

    versions: tuple[int, ...]
    names: tuple[str, ...]

    @property
    def last(self) -> int | None:
        return self.versions[-1] if self.versions else None


@dataclass(frozen=True, kw_only=True)
class LakeVersion:
    """One committed records version as the formats see it."""

    version: int  # the records version: the Delta version, and the Iceberg snapshot's `records-version`
    committed_at: float  # seconds since the epoch (the records commit time)
    table: TableDef
    files: tuple[LakeFile, ...]  # every live data file of the version
    operation: str  # what wrote it, from the commit record's operation kind (e.g. "write_batch", "alter_table")
    change_feed: bool  # the table's change files are on: Delta sets delta.enableChangeDataFeed
    # the version's row-level changes (change_feed on and the version has row events); None: no cdc files (changes
    # off, or a version that rewrote the table as a snapshot: readers derive its changes from files added/removed)
    change_data: tuple[ChangeDataFile, ...] | None = None


class TableFormat(Protocol):
    """A format's writer. Idempotent per version: committing a version the format already holds does nothing, so
    two writers catching up the same table, or a retry after a crash, converge."""

    name: str
    folders: tuple[str, ...]  # the table's folders holding the format's metadata (what `publish --rebuild` clears)
    reads_change_data: bool  # whether `commit` uses `version.change_data` (written for it only then)

    def log(self, storage: Storage, prefix: str) -> FormatLog:
        """The format's entries for the table at `prefix`, from one listing (`.last`: the records version of its
        latest entry; None: none yet)."""

    def commit(self, storage: Storage, prefix: str, version: LakeVersion, oldest_retained: int,
               log: FormatLog | None = None) -> None:
        """Make `version` the format's latest entry (its live files exactly `version.files`), on top of whatever
        entry the format holds now (`log`, when the caller has just listed it; the versions in between may be
        missing: retired before they were caught up).
        Versions before `oldest_retained` (<= version.version) stop being offered to readers: records retention
        deletes the files only they list right after this call, so time travel to them must fail, not read
        missing files."""


def left_out_text(table: TableDef, format_title: str, type_of: Callable[[ColumnDef], Any]) -> str | None:
    """The table description naming the columns a format's schema leaves out (`type_of` gives None for them), so
    their absence is never silent to that format's readers; None when every column is in the schema."""
    left_out = [f"{c.name} {c.ddl()}" for c in table.columns if type_of(c) is None]
    if not left_out:
        return None
    return (f"Columns not in this {format_title} schema (no {format_title} type every reader accepts over their "
            f"Parquet bytes; read them from the records directories): {', '.join(left_out)}")
