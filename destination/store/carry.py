"""Carrying a base version's unchanged files forward into the version being written (step 4 of the commit protocol,
destination/store/commit.py)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from destination.model.table_model import TableDef
from destination.on_disk import layout as layouts
from destination.on_disk.datafiles import DataFile
from destination.on_disk.locations import file_path
from destination.on_disk.options import REFERENCING
from destination.storage.base import Storage
from destination.store.versions import Copies, TableVersion

COPY_THREADS = 8  # concurrent server-side copies (boto3's connection pool holds 10)
FAN_OUT_COPIES = 64  # a carry-forward of at least this many S3 files runs as a Spark job of copy tasks (`Copies`)


class CarryForward:
    """Lists a new version's unchanged files the way its `layout` holds them (destination/on_disk/options.py).
    `copies`: how a large S3 carry-forward is fanned out (None: this process's thread pool). `keep_origin`: the
    table formats are on, so a copied file remembers where it was first written."""

    def __init__(self, storage: Storage, layout: str, copies: Copies | None, *, keep_origin: bool) -> None:
        self.storage = storage
        self.layout = layout
        self._copies = copies
        self._keep_origin = keep_origin

    def carry(self, base: TableVersion, table: TableDef, target: int, files: list[DataFile]) -> list[DataFile]:
        """The base's unchanged files as the new version lists them. Referencing layout: where they are stored
        (a file of the base's own directory now names it). Complete layout: copied into the new directory, from
        wherever they are (so a table switched from the referencing layout gets complete versions again)."""
        home = layouts.version_dir_name(base.version)
        if self.layout == REFERENCING:
            return [f if f.stored_in is not None else replace(f, stored_in=home) for f in files]
        directory = layouts.version_dir(base.prefix, target)
        self._carry_forward(table, directory, target, [(file_path(base.directory, f), f"{directory}/{f.name}")
                                                       for f in files])
        # the table formats reference a file where it was first written: remembered (and kept by retention) only
        # while they are on
        return [replace(f, stored_in=None, written_in=(f.written_in or f.stored_in or home) if self._keep_origin else None)
                for f in files]

    def _carry_forward(self, table: TableDef, directory: str, version: int, pairs: list[tuple[str, str]]) -> None:
        """Hard links on disk, server-side copies on S3. A copy's time is spent by the object store, so they run
        concurrently (one after another, a 10M-row table's 32 files took seconds on every write that touched none
        of them); many S3 copies go to `copies` (Spark's executors) when the store has one."""
        if not pairs:
            return
        if self._copies is not None and self.storage.spec.is_s3 and len(pairs) >= FAN_OUT_COPIES:
            self._copies(self.storage.spec, table, directory, version, pairs)
            return
        with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(pairs))) as pool:  # a pool refused at exit:
            for _ in pool.map(lambda pair: self.storage.copy(*pair), pairs):  # `Committer._write` abandons the write
                pass
