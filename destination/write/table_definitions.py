"""A table's definition changed: CreateTable, AlterTable (a rewrite of every file, or a new key placing every row
anew), columns a write adds (§10.10), and the migrations' rewrites and copies. Each commits one version."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import pyarrow as pa

from destination.changes.metadata import KIND_SNAPSHOT
from destination.model.table_model import KEY_RANGES, ColumnDef, TableDef
from destination.model.type_changes import checked_columns, key_changed
from destination.model.type_mapping import normalize_column
from destination.on_disk.datafiles import align, read_data_file
from destination.on_disk.layout import data_file_name
from destination.on_disk.locations import file_dir, file_path
from destination.runtime.errors import RefusedChange, TableNotFound, UserActionRequired
from destination.store.table_store import TableStore
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.write.alter_plan import describe_difference, lossy_change_text, plan_alter
from destination.write.jobs import JobRunner
from destination.write.one_step import commit_one_step
from destination.write.outcome import Outcome
from destination.write.with_changes import CommitsWithChanges
from spark_jobs.alter import colliding_keys, convert_table, key_text
from spark_jobs.contracts import CheckConversionUnit, FilesWritten, JobContext, RewriteUnit
from spark_jobs.operations import replace_operations
from spark_jobs.tasks.conversion_check import check_conversion_task
from spark_jobs.tasks.key_ranges import merge_range_task
from spark_jobs.tasks.per_file import rewrite_file_task

U = TypeVar("U")


class TableDefinitions:
    """Creates tables and changes their definitions, rewriting their files where the change needs it."""

    def __init__(self, store: TableStore, jobs: JobRunner, commits: CommitsWithChanges) -> None:
        self._store = store
        self._jobs = jobs
        self._commits = commits

    def create_table(self, schema: str, table: TableDef) -> tuple[bool, str]:
        """(created, difference): an identical existing table is a retried call."""
        existing = self._store.load(schema, table.name)
        if existing is not None:
            return False, describe_difference(existing.table, table)
        commit_one_step(self._commits, schema, table.name,
                        lambda base, target: PendingVersion(table, [], [], {"kind": "create_table"}))
        return True, ""

    def alter_table(self, schema: str, requested: TableDef, drop_columns: bool) -> Outcome:
        current = self._store.load(schema, requested.name)
        if current is None:
            raise TableNotFound(f"AlterTable: table {schema}.{requested.name} does not exist; create it first")
        new = plan_alter(current.table, requested, drop_columns)
        if new == current.table:
            return Outcome(current.version)
        self._refuse_lossy_change(schema, current, new)
        if key_changed(current.table, new):
            return self._rekey(schema, new)
        committed = self.rewrite_all(schema, new, "alter_table")
        return Outcome(committed.version if committed else None)

    def ensure_columns(self, schema: str, current: TableVersion, requested: Sequence[ColumnDef]) -> TableVersion:
        """§10.10: a write whose definition carries columns the table lacks adds them first."""
        missing = [normalize_column(c) for c in requested if current.table.column(c.name) is None]
        if not missing:
            return current
        new = current.table.with_columns([*current.table.columns, *(replace(c, primary_key=False) for c in missing)])
        committed = self.rewrite_all(schema, new, "add_columns")
        assert committed is not None
        return committed

    def rewrite_all(self, schema: str, new: TableDef, operation: str, sources: dict[str, str] | None = None,
                    constants: dict[str, str | None] | None = None) -> TableVersion | None:
        """Rewrite every data file under the definition `new` (see spark_jobs.alter.convert_table)."""
        return self.transform(schema, new.name, new, operation, rewrite_file_task, lambda base: [
            RewriteUnit(file=f, old_table=base.table, sources=sources or {}, constants=constants or {})
            for f in base.files if f.rows])

    def transform(self, schema: str, name: str, new: TableDef, operation: str,
                  task: Callable[[JobContext, U], FilesWritten], units: Callable[[TableVersion], Sequence[U]],
                  source: TableVersion | None = None) -> TableVersion | None:
        """Commit a version of `name` under the definition `new` whose data files are all produced by `task`
        over `units(origin)`: origin is the table's latest version, or `source` (another table, for copies)."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            origin = source or base
            if origin is None:
                raise TableNotFound(f"table {schema}.{name} does not exist")
            table = new if source is not None else in_format_of(new, origin.table)
            out = self._jobs.run(task, schema, origin, target, table, units(origin), f"{operation} {schema}.{name}")
            return PendingVersion(table, out.new_files, [], {"kind": operation, "counts": out.counts},
                                  out.change_parts(KIND_SNAPSHOT))
        return commit_one_step(self._commits, schema, name, produce)

    def copy_table(self, schema: str, source: str, target: str) -> TableVersion | None:
        """A version of `target` holding a copy of `source`'s definition and files (server-side copies)."""
        origin = self._store.load(schema, source)
        if origin is None:
            raise TableNotFound(f"table {schema}.{source} does not exist")
        storage = self._store.storage

        def produce(base: TableVersion | None, spot: VersionTarget) -> PendingVersion:
            copied = []
            for f in origin.files:
                if not f.rows:
                    continue
                name = data_file_name(f.bucket, f.name.split(".", 1)[1])  # the records format's suffix kept
                storage.copy(file_path(origin.directory, f), f"{spot.directory}/{name}")
                # every statistic, the key range too, describes the copy, which is first written here
                copied.append(replace(f, name=name, stored_in=None, written_in=None))
            return PendingVersion(replace(origin.table, name=target), copied, [], {"kind": "copy_table", "from": source})
        return commit_one_step(self._commits, schema, target, produce)

    def _refuse_lossy_change(self, schema: str, current: TableVersion, new: TableDef) -> None:
        """Before anything is written: a Spark job over the stored files counts the values of each column whose
        type change may lose values (destination/model/type_changes.py) that would not convert; any → RefusedChange."""
        columns = checked_columns(current.table, new)
        units = [CheckConversionUnit(file=f, old_table=current.table, columns=tuple(columns))
                 for f in current.files if f.rows] if columns else []
        if not units:
            return
        ctx = JobContext(storage=self._store.storage.spec, base_dir=current.directory, target_dir=current.directory,
                         table=new, version=current.version)
        results = self._jobs.results(check_conversion_task, ctx, units, f"check alter {schema}.{new.name}")
        lost: Counter[str] = Counter()
        examples: dict[str, str] = {}
        for r in results:
            lost.update(r.lost)
            for name, key in r.example.items():
                examples.setdefault(name, key)
        if lost:
            first = next(name for name in columns if name in lost)
            raise RefusedChange(lossy_change_text(current.table, new, lost),
                                f"{examples[first]} (column {first!r})")

    def _rekey(self, schema: str, requested: TableDef) -> Outcome:
        """A primary-key change (other columns, or a key column's type) places every row anew in key ranges: stored
        rows become replace operations; refused when two rows would get the same key."""
        planned = replace(requested, placement=KEY_RANGES)  # rows are placed anew anyway

        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            assert base is not None
            new = in_format_of(planned, base.table)
            storage = self._store.storage
            parts = [align(read_data_file(storage, file_dir(base.directory, f), f.name), base.table)
                     for f in base.files if f.rows]
            stored = pa.concat_tables(parts) if parts else align(pa.table({}), base.table)
            converted, _ = convert_table(stored, base.table, new, target.version)
            nulls_in_key = [c for c in new.key_columns if converted.column(c).null_count]
            if nulls_in_key and converted.num_rows:
                raise UserActionRequired(
                    f"AlterTable {schema}.{new.name}: the new primary key column(s) {nulls_in_key} are NULL in existing "
                    "rows; back-fill them (Migrate update_column_value) or recreate the table")
            collisions, row = colliding_keys(converted, [c for c in new.columns if c.name in new.key_columns])
            if collisions:
                raise RefusedChange(f"with the new primary key {new.key_columns}, {collisions} rows would share "
                                    "their key with another row and be merged, so nothing was changed",
                                    key_text(converted, row, new.key_columns))
            units = self._jobs.units_of_operations([], replace_operations(converted, new), new)
            out = self._jobs.run(merge_range_task, schema, None, target, new, units, f"rekey {schema}.{new.name}")
            return PendingVersion(new, out.new_files, [], {"kind": "alter_table_primary_key"},
                                  out.change_parts(KIND_SNAPSHOT))
        committed = commit_one_step(self._commits, schema, planned.name, produce)
        return Outcome(committed.version if committed else None)


def in_format_of(new: TableDef, base: TableDef) -> TableDef:
    """A definition planned before the claim, in the records format of the base it is committed on: a move by
    `records-destination reformat` that another process committed meanwhile stands."""
    return replace(new, records_format=base.records_format, records_variant=base.records_variant,
                   records_hints=base.records_hints)
