"""Driver side of every table-changing operation: plan the Spark job, run it, commit the version.

Handlers call these functions; they know nothing of gRPC. Each returns an Outcome
with counts for the RPC's log line.
"""
from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from destination import logs
from destination.changes.files import STAGING, ChangeTarget, write_empty
from destination.changes.metadata import ROWS, SNAPSHOT, ZERO_TOTALS, ChangeParts, ChangeSet, change_set
from destination.changes.settings import ChangeSettings
from destination.conversion import FailureKey
from destination.errors import (BadRequest, DestinationError, RefusedChange, SparkUnavailable, StorageError,
                                StorageUnavailable, TableNotFound, UserActionRequired)
from destination.ops_builder import BatchFileRef, BatchPlan, bucket_chunks, file_operations, with_keys
from destination.storage.s3 import is_transient_arrow_error
from destination.table_model import ColumnDef, TableDef
from destination.table_store.datafiles import DataFile, align, read_data_file
from destination.table_store.store import PendingVersion, TableStore, TableVersion, VersionTarget
from destination.type_changes import checked_columns, key_changed
from destination.type_mapping import normalize_column
from spark_jobs.alter import check_conversion_task, colliding_keys, convert_table, key_text
from spark_jobs.merge import CHANGES, OP, REPLACE, SEQ, UNMOD
from spark_jobs.runner import ReduceFn, TaskFn, run_shuffled, run_units
from spark_jobs.session import discard_if_dead
from spark_jobs.tasks import (JobContext, decode_file_task, distinct, format_changes_task, load_files_task, merge_bucket_task,
                              merge_shuffled_task, rewrite_file_task, snapshot_changes_task, truncate_file_task)


@dataclass
class Outcome:
    version: int | None  # None: the table does not exist
    counts: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # operations read from the request's files
    failures_by_column: dict[FailureKey, int] = field(default_factory=dict)  # values that did not convert
    timings: dict[str, float] = field(default_factory=dict)  # seconds: the Spark job, its tasks summed (and
    # the decode tasks summed, where a path decodes in tasks of their own)

    def timing_text(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items())


@dataclass
class JobOutput:
    """What one Spark job's tasks produced, summed over its units."""

    new_files: list[DataFile]
    replaced: set[str]  # base files rewritten (not carried)
    counts: dict[str, int]
    changes: list[dict[str, Any]]  # change files, in unit order
    meta: dict[str, Any] = field(default_factory=dict)  # a shuffled write's request counts

    task_seconds: float = 0.0  # summed over the tasks that report it

    @staticmethod
    def of(results: list[dict[str, Any]]) -> "JobOutput":
        meta = next((r["meta"] for r in results if "meta" in r), {})
        results = [r for r in results if "meta" not in r]
        task_seconds = sum(r.get("seconds", 0.0) for r in results)
        counts: Counter[str] = Counter()
        for r in results:
            counts.update(r["counts"])
        return JobOutput([DataFile.from_json(f) for r in results for f in r["new_files"]],
                         {name for r in results for name in r["replaced"]}, dict(counts),
                         [c for r in results for c in r["changes"]], meta, task_seconds)

    def change_parts(self, kind: str) -> ChangeParts:
        return ChangeParts(kind, self.changes, self.counts.get("noop_updates", 0))


Producer = Callable[[TableVersion | None, VersionTarget], PendingVersion | None]
SMALL_REQUEST_BYTES = 16 << 20  # batch files up to this size (as sent) are decoded on the driver
# ... unless their rows decode to more than this: the driver's units travel inside the job's tasks, and a 1 GiB
# driver heap ran out of memory on a 16 MiB request holding 130 MB of values
DRIVER_DECODED_LIMIT = 64 << 20


def small_request_bytes() -> int:
    """RECORDS_DESTINATION_SMALL_REQUEST_BYTES overrides the default (0: every request goes through Spark tasks)."""
    return int(os.environ.get("RECORDS_DESTINATION_SMALL_REQUEST_BYTES", SMALL_REQUEST_BYTES))


class WritePath:
    def __init__(self, store: TableStore, spark: Callable[[], SparkSession],
                 changes: ChangeSettings | None = None, small_request: int | None = None) -> None:
        self.store = store
        self._spark = spark
        self.changes = changes or ChangeSettings()
        self.small_request = small_request_bytes() if small_request is None else small_request

    # ---- helpers -------------------------------------------------------------------------

    def _context(self, schema: str, base: TableVersion | None, target: VersionTarget, table: TableDef,
                 kind: str) -> JobContext:
        changes = self._change_target(schema, target, kind).to_json() if self.changes.enabled else None
        return JobContext(self.store.storage.spec, base.directory if base else None, target.directory,
                          table.to_json(), target.version, changes)

    def _run(self, task: TaskFn, schema: str, base: TableVersion | None, target: VersionTarget, table: TableDef,
             units: list[dict[str, Any]], description: str, kind: str = SNAPSHOT) -> JobOutput:
        """Run `task` over `units` as one Spark job writing version `target`; with change files on, the tasks
        also write the version's change files of `kind` (ROWS: their events, SNAPSHOT: the rows they write)."""
        ctx = self._context(schema, base, target, table, kind)
        try:
            return JobOutput.of(run_units(self._spark(), task, ctx, units, description))
        except Exception as exc:
            raise _task_error(exc) from None

    def _merge_small(self, schema: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
                     files_by_bucket: dict[int, list[dict[str, Any]]], description: str) -> JobOutput | None:
        """A small request: decoded here, merged by one task per bucket it touches (a shuffle's two stages
        cost more than the decode itself at this size). None when its rows decode to more than
        DRIVER_DECODED_LIMIT: the caller takes the task-decoded path."""
        parts: list[pa.Table] = []
        failures: Counter[FailureKey] = Counter()
        rows = 0
        for ref in plan.files:
            ops = file_operations(base.table, ref, plan.fmt)
            parts += ops.parts
            rows += ops.rows
            failures.update(ops.failures_by_column)
        if sum(part.nbytes for part in parts) > DRIVER_DECODED_LIMIT:
            # the units travel inside the Spark job's tasks, copied several times in the JVM heap: rows this large
            # (a file of a few large, highly compressible values) are decoded again by tasks that stream them
            logs.info(f"{description}: {plan.total_bytes} bytes of batch files decode to more than "
                      f"{DRIVER_DECODED_LIMIT >> 20} MiB; decoding them in Spark tasks instead")
            return None
        units = [{"bucket": b, "chunks": [chunk], "files": files_by_bucket.get(b, [])}
                 for b, chunk in (bucket_chunks(pa.concat_tables(parts)) if parts else [])]
        out = self._run(merge_bucket_task, schema, base, target, base.table, units, description, ROWS)
        out.meta = {"rows": rows, "failures_by_column": dict(failures)}
        return out

    def _load_empty(self, schema: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
                    description: str) -> JobOutput | None:
        """A write into an empty table: one load task per core over a share of the files, merging per bucket
        where it decodes (no shuffle). None, with nothing left behind, when a key is in two files: such a
        request needs the shuffle (the rows of one key must meet in one merge)."""
        spark = self._spark()
        inserts = [ref for ref in plan.files if ref.kind == "replace"]  # earliest-start rows: nothing to close
        if not inserts:
            return None
        groups = balanced_groups(inserts, spark.sparkContext.defaultParallelism)
        ctx = self._context(schema, base, target, base.table, ROWS)
        try:
            results = run_units(spark, load_files_task, ctx, [{"refs": g, "fmt": plan.fmt} for g in groups],
                                description)
        except Exception as exc:
            raise _task_error(exc) from None
        loads = [r.pop("load") for r in results]
        out = JobOutput.of(results)
        hashes = np.concatenate([np.frombuffer(load["key_hashes"], dtype=np.uint64) for load in loads])
        if len(distinct(hashes)) != len(hashes):
            storage = self.store.storage
            for f in out.new_files:
                storage.delete(f"{target.directory}/{f.name}")
            storage.delete_prefix(target.changes_directory)
            return None
        failures: Counter[FailureKey] = Counter()
        for load in loads:
            failures.update(load["failures_by_column"])
        out.meta = {"rows": sum(load["rows"] for load in loads), "failures_by_column": dict(failures)}
        out.task_seconds = sum(load["seconds"] for load in loads)
        return out

    def _run_shuffled(self, schema: str, base: TableVersion, target: VersionTarget, units: list[dict[str, Any]],
                      reduce: ReduceFn, description: str) -> JobOutput:
        """decode_file_task over the request's files, the shuffle by bucket, `reduce` per bucket (row changes)."""
        ctx = self._context(schema, base, target, base.table, ROWS)
        try:
            return JobOutput.of(run_shuffled(self._spark(), decode_file_task, reduce, ctx, units,
                                             base.table.bucket_count + 1, description))
        except Exception as exc:
            raise _task_error(exc) from None

    def _change_target(self, schema: str, target: VersionTarget, kind: str) -> ChangeTarget:
        return ChangeTarget(self.changes.to_json(), target.changes_directory, target.version,
                            int(target.timestamp * 1_000_000), schema, kind)

    def commit(self, schema: str, name: str, produce: Producer, *, batch_id: str | None = None) -> TableVersion | None:
        """Commit what `produce` returns as the next version of `name`, with its change directory when change
        files are on (store.write calls `produce` again on a new base after a conflict)."""
        def produce_with_changes(base: TableVersion | None, target: VersionTarget) -> PendingVersion | None:
            pending = produce(base, target)
            if pending is not None and self.changes.enabled:
                pending.changes = self._complete_changes(schema, base, target, pending)
            return pending
        return self.store.write(schema, name, produce_with_changes, batch_id=batch_id)

    def _complete_changes(self, schema: str, base: TableVersion | None, target: VersionTarget,
                          pending: PendingVersion) -> ChangeSet:
        """Snapshot a version whose tasks wrote no change files; format staged Arcion events with their running
        totals (a second job: the totals of a bucket depend on the buckets before it); describe the directory."""
        table = pending.table
        parts = pending.change_parts
        if parts is None:  # the version's files came without a Spark task (a table copy, a new empty table)
            units = [{"directory": target.directory, "file": f.to_json()} for f in pending.new_files if f.rows]
            if base is not None:
                units += [{"directory": base.directory, "file": f.to_json()} for f in pending.carried if f.rows]
            parts = self._run(snapshot_changes_task, schema, base, target, table, units,
                              f"snapshot changes {schema}.{table.name}").change_parts(SNAPSHOT)
        before = dict(base.change_totals) if base else {}
        files = parts.files
        if parts.kind == ROWS and self.changes.is_arcion and files:
            running = {k: before.get(k, 0) for k in ZERO_TOTALS}
            units = []
            for part in files:
                units.append({"part": part, "totals_before": dict(running)})
                for k, v in part["counts"].items():
                    running[k] = running.get(k, 0) + v
            files = self._run(format_changes_task, schema, base, target, table, units,
                              f"format changes {schema}.{table.name}", ROWS).changes
            self.store.storage.delete_prefix(f"{target.changes_directory}/{STAGING}")
        if not files:
            files = [write_empty(self.store.storage, self._change_target(schema, target, parts.kind), table)]
        return change_set(schema, table, self.changes, parts.kind, target.version, int(target.timestamp * 1_000_000),
                          files, before, parts.noop_updates)

    def transform(self, schema: str, name: str, new: TableDef, operation: str, task: TaskFn,
                  units: Callable[[TableVersion], list[dict[str, Any]]],
                  source: TableVersion | None = None) -> TableVersion | None:
        """Commit a version of `name` under the definition `new` whose data files are all produced by `task`
        over `units(origin)`: origin is the table's latest version, or `source` (another table, for copies)."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            origin = source or base
            if origin is None:
                raise TableNotFound(f"table {schema}.{name} does not exist")
            out = self._run(task, schema, origin, target, new, units(origin), f"{operation} {schema}.{name}")
            return PendingVersion(new, out.new_files, [], {"kind": operation, "counts": out.counts},
                                  out.change_parts(SNAPSHOT))
        return self.commit(schema, name, produce)

    def rewrite_all(self, schema: str, new: TableDef, operation: str, sources: dict[str, str] | None = None,
                    constants: dict[str, str | None] | None = None) -> TableVersion | None:
        """Rewrite every data file under the definition `new` (see spark_jobs.alter.convert_table)."""
        return self.transform(schema, new.name, new, operation, rewrite_file_task, lambda base: [
            {"file": f.to_json(), "old_table": base.table.to_json(), "sources": sources, "constants": constants}
            for f in base.files if f.rows])

    # ---- CreateTable / AlterTable ----------------------------------------------------------

    def create_table(self, schema: str, table: TableDef) -> tuple[bool, str]:
        """(created, difference): an identical existing table is a retried call."""
        existing = self.store.load(schema, table.name)
        if existing is not None:
            diff = describe_difference(existing.table, table)
            return False, diff
        self.commit(schema, table.name, lambda base, target: PendingVersion(table, [], [], {"kind": "create_table"}))
        return True, ""

    def alter_table(self, schema: str, requested: TableDef, drop_columns: bool) -> Outcome:
        current = self.store.load(schema, requested.name)
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

    def _refuse_lossy_change(self, schema: str, current: TableVersion, new: TableDef) -> None:
        """Before anything is written: a Spark job over the stored files counts the values of each column whose
        type change may lose values (destination/type_changes.py) that would not convert; any → RefusedChange."""
        columns = checked_columns(current.table, new)
        units = [{"file": f.to_json(), "old_table": current.table.to_json(), "columns": columns}
                 for f in current.files if f.rows] if columns else []
        if not units:
            return
        ctx = JobContext(self.store.storage.spec, current.directory, current.directory, new.to_json(), current.version)
        try:
            results = run_units(self._spark(), check_conversion_task, ctx, units, f"check alter {schema}.{new.name}")
        except Exception as exc:
            raise _task_error(exc) from None
        lost: Counter[str] = Counter()
        examples: dict[str, str] = {}
        for r in results:
            lost.update(r["lost"])
            for name, key in r["example"].items():
                examples.setdefault(name, key)
        if lost:
            first = next(name for name in columns if name in lost)
            raise RefusedChange(lossy_change_text(current.table, new, lost),
                                f"{examples[first]} (column {first!r})")

    def _rekey(self, schema: str, new: TableDef) -> Outcome:
        """A primary-key change (other columns, or a key column's type) re-buckets every row: stored rows become
        replace operations; refused when two rows would get the same key."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            assert base is not None
            storage = self.store.storage
            parts = [align(read_data_file(storage, base.directory, f.name), base.table) for f in base.files if f.rows]
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
            ops = _stored_rows_as_replace_ops(converted, new)
            units = [{"bucket": b, "chunks": [chunk], "files": []} for b, chunk in bucket_chunks(ops)]
            out = self._run(merge_bucket_task, schema, None, target, new, units, f"rekey {schema}.{new.name}")
            return PendingVersion(new, out.new_files, [], {"kind": "alter_table_primary_key"}, out.change_parts(SNAPSHOT))
        committed = self.commit(schema, new.name, produce)
        return Outcome(committed.version if committed else None)

    def ensure_columns(self, schema: str, current: TableVersion, requested: list[ColumnDef]) -> TableVersion:
        """§10.10: a write whose definition carries columns the table lacks adds them first."""
        missing = [normalize_column(c) for c in requested if current.table.column(c.name) is None]
        if not missing:
            return current
        new = current.table.with_columns([*current.table.columns,
                                          *(ColumnDef(c.name, c.type, False, c.precision, c.scale, c.string_byte_length) for c in missing)])
        committed = self.rewrite_all(schema, new, "add_columns")
        assert committed is not None
        return committed

    # ---- WriteBatch -----------------------------------------------------------------------

    def write_batch(self, schema: str, table_name: str, plan: BatchPlan, rpc: str = "WriteBatch") -> Outcome:
        """Merge one request's batch files (plain or history, by the table's mode: spark_jobs.tasks) as one
        Spark job: a task per file decodes it and splits its operations by bucket, the shuffle brings each
        bucket's operations to one merge task."""
        outcome = Outcome(None)

        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion | None:
            if base is None:
                raise TableNotFound(f"{rpc}: table {schema}.{table_name} does not exist; CreateTable must come first")
            files_by_bucket: dict[int, list[dict[str, Any]]] = {}
            for f in base.files:
                if f.rows and f.bucket is not None:
                    files_by_bucket.setdefault(f.bucket, []).append(f.to_json())
            description = f"{rpc} {schema}.{table_name}"
            started = time.perf_counter()
            out = (self._merge_small(schema, base, target, plan, files_by_bucket, description)
                   if plan.total_bytes <= self.small_request else None)
            if out is None and loads_empty(base, plan):
                out = self._load_empty(schema, base, target, plan, description)
            if out is None:
                units = [{"ref": ref, "fmt": plan.fmt} for ref in plan.files]
                out = self._run_shuffled(schema, base, target, units, partial(merge_shuffled_task, files_by_bucket),
                                         description)
            outcome.counts, outcome.failures_by_column, outcome.rows = out.counts, out.meta.get(
                "failures_by_column", {}), int(out.meta.get("rows", 0))
            outcome.timings = {"job": time.perf_counter() - started, "task_s": out.task_seconds}
            if "decode_seconds" in out.meta:  # the shuffled path decodes in tasks of their own
                outcome.timings["decode_task_s"] = out.meta["decode_seconds"]
            if outcome.rows == 0:
                return None
            carried = [f for f in base.files if f.name not in out.replaced]
            kind = "write_history_batch" if rpc == "WriteHistoryBatch" else "write_batch"
            return PendingVersion(base.table, out.new_files, carried, {"kind": kind, "counts": out.counts},
                                  out.change_parts(ROWS))
        committed = self.commit(schema, table_name, produce, batch_id=plan.batch_id)
        outcome.version = committed.version if committed else None
        return outcome

    # ---- Truncate -------------------------------------------------------------------------

    def truncate(self, schema: str, table_name: str, synced_column: str, cutoff_us: int,
                 deleted_column: str | None) -> Outcome:
        current = self.store.load(schema, table_name)
        if current is None:
            return Outcome(None)
        if current.table.column(synced_column) is None:
            raise BadRequest(f"Truncate {schema}.{table_name}: no column {synced_column!r}")
        if deleted_column and current.table.column(deleted_column) is None:
            current = self.ensure_columns(schema, current, [ColumnDef(deleted_column, "BOOLEAN")])
        cutoff_ms = cutoff_us // 1000
        stats: dict[str, int] = {}

        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion | None:
            if base is None:
                return None
            units, dropped = [], []
            for f in base.files:
                if not f.rows or f.min_synced is None or f.max_synced is None:
                    continue
                if f.min_synced // 1000 >= cutoff_ms:
                    continue  # every row is at or after the cutoff: keep the file as it is
                if f.max_synced // 1000 < cutoff_ms and not deleted_column and not self.changes.enabled:
                    dropped.append(f)  # every row goes: drop the file unread (its rows' changes need a read)
                    continue
                units.append({"file": f.to_json(), "cutoff_us": cutoff_us, "synced_column": synced_column,
                              "deleted_column": deleted_column})
            if not units and not dropped:
                return None
            out = self._run(truncate_file_task, schema, base, target, base.table, units,
                            f"truncate {schema}.{table_name}", ROWS)
            gone = out.replaced | {f.name for f in dropped}
            counts = dict(out.counts)
            counts["deleted"] = counts.get("deleted", 0) + sum(f.rows for f in dropped)
            stats.clear()
            stats.update(counts)
            carried = [f for f in base.files if f.name not in gone]
            kind = "soft_truncate" if deleted_column else "truncate"
            return PendingVersion(base.table, out.new_files, carried, {"kind": kind, "counts": counts},
                                  out.change_parts(ROWS))
        committed = self.commit(schema, table_name, produce)
        return Outcome(committed.version if committed else current.version, stats)


def loads_empty(base: TableVersion, plan: BatchPlan) -> bool:
    """Whether the request can skip the shuffle: an empty table, and only rows to insert (a history table's
    earliest-start rows close stored versions, of which there are none)."""
    return base.rows == 0 and all(ref.kind in ("replace", "earliest") for ref in plan.files)


def balanced_groups(refs: list[BatchFileRef], count: int) -> list[list[BatchFileRef]]:
    """`refs` in at most `count` groups of about equal bytes (largest first, each to the lightest group)."""
    sizes = {ref.position: len(ref.data) if ref.data is not None else os.path.getsize(ref.path) for ref in refs}
    groups: list[list[BatchFileRef]] = [[] for _ in range(max(1, min(count, len(refs))))]
    loads = [0] * len(groups)
    for ref in sorted(refs, key=lambda r: -sizes[r.position]):
        lightest = loads.index(min(loads))
        groups[lightest].append(ref)
        loads[lightest] += sizes[ref.position]
    return [g for g in groups if g]


def _stored_rows_as_replace_ops(stored: pa.Table, table: TableDef) -> pa.Table:
    n = stored.num_rows
    ops = stored.select([c.name for c in table.columns])
    ops = ops.append_column(OP, pa.array(np.full(n, REPLACE, dtype=np.int8)))
    ops = ops.append_column(SEQ, pa.array(np.arange(n, dtype=np.int64)))
    ops = ops.append_column(CHANGES, pa.nulls(n, pa.string()))
    for c in table.columns:
        ops = ops.append_column(UNMOD + c.name, pa.array(np.zeros(n, dtype=bool)))
    return with_keys(ops, table)


def plan_alter(current: TableDef, requested: TableDef, drop_columns: bool) -> TableDef:
    """The table after AlterTable: types and key flags as requested, new columns appended,
    columns absent from the request kept unless drop_columns (fivetran-protocol §10.3)."""
    wanted = {c.name: normalize_column(c) for c in requested.columns}
    columns: list[ColumnDef] = []
    for col in current.columns:
        if col.name in wanted:
            columns.append(wanted[col.name])
        elif not drop_columns:  # kept, but a column absent from the full definition is not in the key
            columns.append(ColumnDef(col.name, col.type, False, col.precision, col.scale, col.string_byte_length))
    known = {c.name for c in current.columns}
    columns += [c for c in wanted.values() if c.name not in known]
    return current.with_columns(columns)


def lossy_change_text(old: TableDef, new: TableDef, lost: dict[str, int]) -> str:
    """The user's reason a type change is refused: each column, its change and how many values it would lose."""
    columns = []
    for name, count in lost.items():
        before, after = old.column(name), new.column(name)
        assert before is not None and after is not None
        columns.append(f"column {name!r} {before.ddl()} -> {after.ddl()}: {count} stored values would not convert "
                       "exactly")
    return (f"changing the type would lose values, so nothing was changed ({'; '.join(columns)}). Keep the type, "
            "or correct those values first")


def describe_difference(existing: TableDef, requested: TableDef) -> str:
    """Empty when the definitions match (a retried CreateTable), else a human-readable difference."""
    a = {c.name: normalize_column(c) for c in existing.columns}
    b = {c.name: normalize_column(c) for c in requested.columns}
    notes = []
    for name in b.keys() - a.keys():
        notes.append(f"column {name!r} is new")
    for name in a.keys() - b.keys():
        notes.append(f"column {name!r} is missing from the request")
    for name in a.keys() & b.keys():
        if a[name] != b[name]:
            notes.append(f"column {name!r} is {a[name].ddl()}{' (key)' if a[name].primary_key else ''} "
                         f"but the request says {b[name].ddl()}{' (key)' if b[name].primary_key else ''}")
    return "; ".join(sorted(notes))


_TASK_ERROR = re.compile(r"destination\.errors\.(\w+): (.*)")
_TASK_ERRORS: dict[str, type[DestinationError]] = {
    "StorageError": StorageError, "StorageUnavailable": StorageUnavailable, "BadRequest": BadRequest,
    "BadBatchFile": BadRequest, "TableNotFound": TableNotFound}


def _task_error(exc: Exception) -> Exception:
    """Spark wraps a task's exception in a Java one; recover our own error type and message. A job that failed
    because the JVM died is retryable (the next job gets a new session), as is object-store I/O that stayed
    unreachable through pyarrow's retries."""
    if isinstance(exc, DestinationError):
        return exc
    if discard_if_dead():
        return SparkUnavailable("the Spark JVM stopped during the job (killed or out of memory); "
                                "a new Spark session is starting, retry the request")
    text = str(exc)
    found = _TASK_ERROR.findall(text)
    if found:
        name, message = found[-1]
        return _TASK_ERRORS.get(name, StorageError)(message.strip())
    last = [line for line in text.splitlines() if line.strip()]
    cause = last[-1] if last else type(exc).__name__
    if is_transient_arrow_error(text):
        return StorageUnavailable(f"object storage stayed unreachable through the retries: {cause}")
    return DestinationError(f"Spark job failed: {cause}")
