"""Driver side of every table-changing operation: plan the Spark job, run it, commit the version.

Handlers call these functions; they know nothing of gRPC. Each returns an Outcome
with counts for the RPC's log line.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from destination.shared import logs, phases
from destination.shared.changes.change_settings import ChangeSettings
from destination.shared.changes.files import STAGING, ChangeTarget, write_empty
from destination.shared.changes.metadata import (
    KIND_ROWS,
    KIND_SNAPSHOT,
    ZERO_TOTALS,
    ChangeFile,
    ChangeParts,
    ChangeSet,
    change_set,
)
from destination.shared.conversion import FailureKey
from destination.shared.errors import BadRequest, RefusedChange, TableNotFound, UserActionRequired
from destination.shared.key_order import key_columns_of, keys_from_json
from destination.shared.on_disk.datafiles import DataFile, align, read_data_file
from destination.shared.on_disk.locations import file_dir
from destination.shared.placement import TARGET_FILE_BYTES, KeySample, plan_units
from destination.shared.settings import SMALL_REQUEST_BYTES
from destination.shared.storage.base import StorageSpec, open_storage
from destination.shared.table_model import KEY_RANGES, ColumnDef, TableDef
from destination.shared.type_changes import checked_columns, key_changed
from destination.shared.type_mapping import normalize_column
from destination.store.table_store import PendingVersion, RequestIdentity, TableStore, TableVersion, VersionTarget
from destination.write.batches import WRITE_BATCH, WRITE_HISTORY_BATCH, BatchPlan
from destination.write.runner import run_units
from spark_jobs.alter import colliding_keys, convert_table, key_text
from spark_jobs.contracts import (
    CheckConversionUnit,
    FilesWritten,
    FormatChangesUnit,
    JobContext,
    RangeUnit,
    RequestCounts,
    RewriteUnit,
    RunSlice,
    RunSource,
    SnapshotChangesUnit,
    SortedRun,
    TruncateUnit,
    data_rows,
)
from spark_jobs.operations import file_operations, replace_operations, to_ipc
from spark_jobs.tasks.conversion_check import check_conversion_task
from spark_jobs.tasks.key_ranges import merge_range_task, sort_run_task
from spark_jobs.tasks.per_file import (
    format_changes_task,
    rewrite_file_task,
    snapshot_changes_task,
    truncate_file_task,
)

U = TypeVar("U")
R = TypeVar("R")


@dataclass
class Outcome:
    version: int | None  # None: the table does not exist
    counts: dict[str, int] = field(default_factory=dict)
    rows: int = 0  # operations read from the request's files
    data_rows: int = 0  # of them, the rows of its replace, update and delete files (what the status page shows)
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
    changes: list[ChangeFile]  # change files, in unit order
    request: RequestCounts = field(default_factory=RequestCounts)  # a write's rows and failures

    task_seconds: float = 0.0  # summed over the tasks that report it

    @staticmethod
    def of(results: Sequence[FilesWritten], request: RequestCounts | None = None) -> JobOutput:
        counts: Counter[str] = Counter()
        for r in results:
            counts.update(r.counts)
        replaced = {name for r in results for name in r.replaced}
        if "files_rewritten" in counts:  # a file cut between units is rewritten by each, and counted once
            counts["files_rewritten"] = len(replaced)
        return JobOutput(new_files=[f for r in results for f in r.new_files],
                         replaced=replaced, counts=dict(counts),
                         changes=[c for r in results for c in r.changes], request=request or RequestCounts(),
                         task_seconds=sum(r.seconds for r in results))

    def change_parts(self, kind: str) -> ChangeParts:
        return ChangeParts(kind=kind, files=tuple(self.changes), noop_updates=self.counts.get("noop_updates", 0))


@dataclass(frozen=True, kw_only=True)
class PlacementSettings:
    """A destination's placement settings: the target data-file size (configuration field target_file_size) and
    where sorted runs are staged (a local directory in Spark's local mode; None: the table's own storage, which a
    cluster's executors reach)."""

    target_file_bytes: int = TARGET_FILE_BYTES
    scratch: StorageSpec | None = None


class _InHashBuckets(Exception):
    """A write found its base still placed in key-hash buckets (internal: write_batch places it and writes)."""


Producer = Callable[[TableVersion | None, VersionTarget], PendingVersion | None]
# Small requests are decoded on the driver (ServerOptions.small_request_bytes) unless their rows decode to more
# than this: the driver's units travel inside the job's tasks, and a 1 GiB driver heap ran out of memory on a
# 16 MiB request holding 130 MB of values
DRIVER_DECODED_LIMIT = 64 << 20
# sizing units before any Parquet exists: decoded operations (and runs staged uncompressed on a local scratch
# disk) and runs staged with lz4 are a few times larger than the Parquet they become (measured on the
# benchmark's 20-column table: 3.5x and 2x)
DECODED_TO_PARQUET = 3.5
STAGED_TO_PARQUET = 2.0
# staged runs are written once and read once, soon after: uncompressed on a local scratch disk (the page cache
# holds them), lz4 where they cross a network to the table's storage (a cluster's executors) or where the scratch
# disk lacks room for them uncompressed. Measured on the benchmark's table: a 57 MB batch file (zstd, encrypted)
# stages 74 MB of runs, 39 MB with lz4 at 0.12 s more per file.
RUN_COMPRESSION = "lz4"
RUN_BYTES_PER_SENT_BYTE = 1.3
SCRATCH_HEADROOM = 1.5  # uncompressed runs need this share of free space over their estimate
RUNS_DIR = "_runs"  # a new version's sorted runs when executors cannot reach a local scratch directory


class WritePath:
    def __init__(self, store: TableStore, spark: Callable[[], SparkSession],
                 changes: ChangeSettings | None = None, small_request: int = SMALL_REQUEST_BYTES,
                 placement: PlacementSettings | None = None) -> None:
        self.store = store
        self._spark = spark
        self.changes = changes or ChangeSettings()
        self.placement = placement or PlacementSettings()
        self.small_request = small_request  # batch files up to this size (as sent) are decoded on the driver

    # ---- helpers -------------------------------------------------------------------------

    def _context(self, schema: str, base: TableVersion | None, target: VersionTarget, table: TableDef,
                 kind: str) -> JobContext:
        changes = self._change_target(schema, target, kind) if self.changes.enabled else None
        return JobContext(storage=self.store.storage.spec, base_dir=base.directory if base else None,
                          target_dir=target.directory, table=table, version=target.version, changes=changes,
                          target_file_bytes=self.placement.target_file_bytes, scratch=self.placement.scratch)

    def _run(self, task: Callable[[JobContext, U], FilesWritten], schema: str, base: TableVersion | None,
             target: VersionTarget, table: TableDef, units: Sequence[U], description: str,
             kind: str = KIND_SNAPSHOT) -> JobOutput:
        """Run `task` over `units` as one Spark job writing version `target`; with change files on, the tasks
        also write the version's change files of `kind` (KIND_ROWS: their events, KIND_SNAPSHOT: the rows they
        write)."""
        ctx = self._context(schema, base, target, table, kind)
        return JobOutput.of(run_units(self._spark(), task, ctx, units, description))

    def _units_of_operations(self, base_files: Sequence[DataFile], ops: pa.Table, table: TableDef) -> list[RangeUnit]:
        """Operations held here (a small request, a key change) routed to the units of the table's key ranges:
        one unit per range that receives operations or compacts files, each with its operations as one chunk."""
        keys = key_columns_of(ops, table)
        plan = plan_units(base_files, KeySample.exact(keys), table, self.placement.target_file_bytes,
                          bytes_per_row=ops.nbytes / max(1, ops.num_rows) / DECODED_TO_PARQUET)
        unit_of = plan.unit_of(keys)
        order = np.argsort(unit_of, kind="stable")
        ops, unit_of = ops.take(pa.array(order)), unit_of[order]
        starts = np.searchsorted(unit_of, np.arange(len(plan.units) + 1))
        units = []
        for u, planned in enumerate(plan.units):
            a, b = int(starts[u]), int(starts[u + 1])
            if a == b and not planned.compact:
                continue
            chunks = (to_ipc(ops.slice(a, b - a)),) if b > a else ()
            units.append(RangeUnit(lo=planned.lo, hi=planned.hi, files=planned.files, compact=planned.compact,
                                   chunks=chunks, tag=u))
        return units

    def _merge_decoded(self, schema: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
                       description: str) -> JobOutput | None:
        """A small request: decoded here, merged by one task per key range it touches (staging sorted runs
        costs more than the decode itself at this size). None when its rows decode to more than
        DRIVER_DECODED_LIMIT: the caller stages it in Spark tasks."""
        parts: list[pa.Table] = []
        failures: Counter[FailureKey] = Counter()
        rows = data = 0
        for ref in plan.files:  # the driver reads its own disk, not a copy staged for a cluster's executors
            with phases.timed("decode"):
                ops = file_operations(base.table, replace(ref, staged=None), plan.fmt)
            parts += ops.parts
            rows += ops.rows
            data += data_rows(ref.kind, ops.rows)
            failures.update(ops.failures_by_column)
        if sum(part.nbytes for part in parts) > DRIVER_DECODED_LIMIT:
            # the units travel inside the Spark job's tasks, copied several times in the JVM heap: rows this large
            # (a file of a few large, highly compressible values) are decoded again by tasks that stream them
            logs.info(f"{description}: {plan.total_bytes} bytes of batch files decode to more than "
                      f"{DRIVER_DECODED_LIMIT >> 20} MiB; decoding them in Spark tasks instead")
            return None
        units = self._units_of_operations(base.files, pa.concat_tables(parts), base.table) if parts else []
        out = self._run(merge_range_task, schema, base, target, base.table, units, description, KIND_ROWS)
        out.request = RequestCounts(rows=rows, files=len(plan.files), failures_by_column=dict(failures), data_rows=data)
        return out

    @contextmanager
    def _stage_runs(self, schema: str, base: TableVersion, target: VersionTarget, table: TableDef,
                    sources: Callable[[str], list[RunSource]], description: str) -> Iterator[tuple[JobContext, list[SortedRun]]]:
        """Stage 1: one task per source sorts its rows into a run in the scratch storage; the runs are removed
        when the block ends, whether the job succeeded or not."""
        directory = self._scratch_dir(target)
        units = sources(directory)
        ctx = replace(self._context(schema, base, target, table, KIND_ROWS),
                      run_compression=self._run_compression(units, description))
        try:
            yield ctx, run_units(self._spark(), sort_run_task, ctx, units, f"{description} (sort)")
        finally:
            storage = open_storage(self.placement.scratch) if self.placement.scratch else self.store.storage
            try:
                storage.delete_prefix(directory)
            except Exception as exc:  # the version's own directory is cleared with it; a scratch leftover is logged
                logs.warning(f"{description}: could not remove staged runs {storage.url(directory)}: {exc}")

    def _run_compression(self, sources: Sequence[RunSource], description: str) -> str | None:
        """Runs go uncompressed to a local scratch disk with room for them, lz4 anywhere else (RUN_COMPRESSION):
        a load larger than the scratch disk's free space is staged compressed rather than failing on a full disk."""
        if self.placement.scratch is None:
            return RUN_COMPRESSION
        estimate = sum(_run_bytes(s) for s in sources)
        root = self.placement.scratch.root
        os.makedirs(root, exist_ok=True)
        free = shutil.disk_usage(root).free
        if free >= SCRATCH_HEADROOM * estimate:
            return None
        logs.info(f"{description}: staging sorted runs with {RUN_COMPRESSION}: about {estimate >> 20} MiB of "
                  f"runs uncompressed, {free >> 20} MiB free on the scratch disk {root}")
        return RUN_COMPRESSION

    def _scratch_dir(self, target: VersionTarget) -> str:
        """Where one job's sorted runs go: the scratch storage's, or (executors elsewhere) the new version's own
        directory, which the commit protocol clears if the writer dies."""
        if self.placement.scratch is not None:
            return f"runs/{uuid.uuid4().hex}"
        return f"{target.directory}/{RUNS_DIR}"

    def _merge_runs(self, ctx: JobContext, base_files: Sequence[DataFile], runs: Sequence[SortedRun],
                    description: str, rows_only: bool = False) -> JobOutput:
        """Stage 2: the units of the key ranges, planned from the runs' batch keys; each reads the batches of
        every run that may hold its keys. `rows_only` (a relayout, with no base files): the runs hold rows."""
        table = ctx.table
        firsts = keys_from_json([k for r in runs for k in r.batch_first], table)
        weights = np.array([w for r in runs for w in r.batch_rows], dtype=np.int64)
        staged_rows, staged_bytes = sum(r.rows for r in runs), sum(r.bytes for r in runs)
        plan = plan_units(base_files, KeySample(keys=firsts, weights=weights), table, self.placement.target_file_bytes,
                          bytes_per_row=staged_bytes / max(1, staged_rows) / (
                              DECODED_TO_PARQUET if ctx.run_compression is None else STAGED_TO_PARQUET))
        # each batch goes to every unit its keys [first, last] reach
        first_unit = plan.unit_of(firsts)
        last_unit = plan.unit_of(keys_from_json([k for r in runs for k in r.batch_last], table))
        slices: list[dict[str, list[int]]] = [{} for _ in plan.units]
        at = 0
        for run in runs:
            for batch in range(len(run.batch_rows)):
                for u in range(int(first_unit[at]), int(last_unit[at]) + 1):
                    slices[u].setdefault(run.run_path, []).append(batch)
                at += 1
        units = [RangeUnit(lo=p.lo, hi=p.hi, files=p.files, compact=p.compact, rows_only=rows_only, tag=u,
                           runs=tuple(RunSlice(run_path=path, batches=tuple(b)) for path, b in slices[u].items()))
                 for u, p in enumerate(plan.units) if slices[u] or p.compact]
        results = run_units(self._spark(), merge_range_task, ctx, units, description)
        failures: Counter[FailureKey] = Counter()
        counted = [r.counts for r in runs if r.counts is not None]
        for c in counted:
            failures.update(c.failures_by_column)
        request = RequestCounts(rows=sum(c.rows for c in counted), files=len(counted),
                                failures_by_column=dict(failures), decode_seconds=sum(c.seconds for c in counted),
                                data_rows=sum(c.data_rows for c in counted))
        return JobOutput.of(results, request)

    def _merge_staged(self, schema: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
                      description: str) -> JobOutput:
        """A large request: stage 1 decodes each batch file in a task of its own and stages its operations sorted
        by key; stage 2 merges each key range's operations with the files they can touch."""
        def sources(directory: str) -> list[RunSource]:
            return [RunSource(run_path=f"{directory}/{ref.position:06d}.arrow", ref=ref, fmt=plan.fmt)
                    for ref in plan.files]
        with self._stage_runs(schema, base, target, base.table, sources, description) as (ctx, runs):
            return self._merge_runs(ctx, base.files, runs, description)

    def _place_in_ranges(self, schema: str, name: str) -> None:
        """A table placed in key-hash buckets (written before key ranges) is placed anew in key ranges, as a
        version of its own that changes no row (its change files hold no events): every stored file is sorted
        into a run, and the runs are cut into target-size ranges."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion | None:
            if base is None or base.table.in_key_ranges:
                return None
            table = replace(base.table, placement=KEY_RANGES)
            stored = [f for f in base.files if f.rows]

            def sources(directory: str) -> list[RunSource]:
                return [RunSource(run_path=f"{directory}/{i:06d}.arrow", stored=f) for i, f in enumerate(stored)]
            description = f"place {schema}.{name} in key ranges"
            with self._stage_runs(schema, base, target, table, sources, description) as (ctx, runs):
                out = self._merge_runs(ctx, [], runs, description, rows_only=True)
            logs.info(f"{schema}.{name}: placed {sum(f.rows for f in stored)} rows of {len(stored)} key-hash bucket "
                      f"files in {len(out.new_files)} key-range files")
            return PendingVersion(table, out.new_files, [], {"kind": "place_in_key_ranges"}, out.change_parts(KIND_ROWS))
        self.commit(schema, name, produce)

    def _change_target(self, schema: str, target: VersionTarget, kind: str) -> ChangeTarget:
        return ChangeTarget(settings=self.changes, directory=target.changes_directory, version=target.version,
                            timestamp_us=int(target.timestamp * 1_000_000), schema=schema, kind=kind)

    def commit(self, schema: str, name: str, produce: Producer, *,
               batch: RequestIdentity | None = None) -> TableVersion | None:
        """Commit what `produce` returns as the next version of `name`, with its change directory when change
        files are on (the store calls `produce` again on a new base after a conflict)."""
        committed, _ = self.commit_with_result(schema, name, lambda base, target: (produce(base, target), None),
                                               batch=batch)
        return committed

    def commit_with_result(self, schema: str, name: str,
                           produce: Callable[[TableVersion | None, VersionTarget], tuple[PendingVersion | None, R]],
                           *, batch: RequestIdentity | None = None) -> tuple[TableVersion | None, R]:
        """`commit` for a `produce` that also returns its job's result (counts, timings): handed back with the
        version it committed (or, with nothing to commit, the latest)."""
        def produce_with_changes(base: TableVersion | None, target: VersionTarget) -> tuple[PendingVersion | None, R]:
            pending, result = produce(base, target)
            if pending is not None and self.changes.enabled:
                pending.changes = self._complete_changes(schema, base, target, pending)
            return pending, result
        return self.store.write_with_result(schema, name, produce_with_changes, batch=batch)

    def _complete_changes(self, schema: str, base: TableVersion | None, target: VersionTarget,
                          pending: PendingVersion) -> ChangeSet:
        """Snapshot a version whose tasks wrote no change files; format staged Arcion events with their running
        totals (a second job: the totals of a bucket depend on the buckets before it); describe the directory."""
        table = pending.table
        parts = pending.change_parts
        if parts is None:  # the version's files came without a Spark task (a table copy, a new empty table)
            units = [SnapshotChangesUnit(directory=target.directory, file=f) for f in pending.new_files if f.rows]
            if base is not None:
                units += [SnapshotChangesUnit(directory=base.directory, file=f) for f in pending.carried if f.rows]
            parts = self._run(snapshot_changes_task, schema, base, target, table, units,
                              f"snapshot changes {schema}.{table.name}").change_parts(KIND_SNAPSHOT)
        before = dict(base.change_totals) if base else {}
        files: Sequence[ChangeFile] = parts.files
        if parts.kind == KIND_ROWS and self.changes.is_arcion and files:
            running = {k: before.get(k, 0) for k in ZERO_TOTALS}
            staged = []
            for part in files:
                staged.append(FormatChangesUnit(part=part, totals_before=dict(running)))
                for k, v in part.counts.items():
                    running[k] = running.get(k, 0) + v
            files = self._run(format_changes_task, schema, base, target, table, staged,
                              f"format changes {schema}.{table.name}", KIND_ROWS).changes
            self.store.storage.delete_prefix(f"{target.changes_directory}/{STAGING}")
        if not files:
            with phases.timed("change_files"):
                files = [write_empty(self.store.storage, self._change_target(schema, target, parts.kind), table)]
        return change_set(schema, table, self.changes, parts.kind, target.version, int(target.timestamp * 1_000_000),
                          files, before, parts.noop_updates)

    def transform(self, schema: str, name: str, new: TableDef, operation: str,
                  task: Callable[[JobContext, U], FilesWritten], units: Callable[[TableVersion], Sequence[U]],
                  source: TableVersion | None = None) -> TableVersion | None:
        """Commit a version of `name` under the definition `new` whose data files are all produced by `task`
        over `units(origin)`: origin is the table's latest version, or `source` (another table, for copies)."""
        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            origin = source or base
            if origin is None:
                raise TableNotFound(f"table {schema}.{name} does not exist")
            out = self._run(task, schema, origin, target, new, units(origin), f"{operation} {schema}.{name}")
            return PendingVersion(new, out.new_files, [], {"kind": operation, "counts": out.counts},
                                  out.change_parts(KIND_SNAPSHOT))
        return self.commit(schema, name, produce)

    def rewrite_all(self, schema: str, new: TableDef, operation: str, sources: dict[str, str] | None = None,
                    constants: dict[str, str | None] | None = None) -> TableVersion | None:
        """Rewrite every data file under the definition `new` (see spark_jobs.alter.convert_table)."""
        return self.transform(schema, new.name, new, operation, rewrite_file_task, lambda base: [
            RewriteUnit(file=f, old_table=base.table, sources=sources or {}, constants=constants or {})
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
        type change may lose values (destination/shared/type_changes.py) that would not convert; any → RefusedChange."""
        columns = checked_columns(current.table, new)
        units = [CheckConversionUnit(file=f, old_table=current.table, columns=tuple(columns))
                 for f in current.files if f.rows] if columns else []
        if not units:
            return
        ctx = JobContext(storage=self.store.storage.spec, base_dir=current.directory, target_dir=current.directory,
                         table=new, version=current.version)
        results = run_units(self._spark(), check_conversion_task, ctx, units, f"check alter {schema}.{new.name}")
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
        new = replace(requested, placement=KEY_RANGES)  # rows are placed anew anyway

        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            assert base is not None
            storage = self.store.storage
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
            units = self._units_of_operations([], replace_operations(converted, new), new)
            out = self._run(merge_range_task, schema, None, target, new, units, f"rekey {schema}.{new.name}")
            return PendingVersion(new, out.new_files, [], {"kind": "alter_table_primary_key"},
                                  out.change_parts(KIND_SNAPSHOT))
        committed = self.commit(schema, new.name, produce)
        return Outcome(committed.version if committed else None)

    def ensure_columns(self, schema: str, current: TableVersion, requested: list[ColumnDef]) -> TableVersion:
        """§10.10: a write whose definition carries columns the table lacks adds them first."""
        missing = [normalize_column(c) for c in requested if current.table.column(c.name) is None]
        if not missing:
            return current
        new = current.table.with_columns([*current.table.columns, *(replace(c, primary_key=False) for c in missing)])
        committed = self.rewrite_all(schema, new, "add_columns")
        assert committed is not None
        return committed

    # ---- WriteBatch -----------------------------------------------------------------------

    def write_batch(self, schema: str, table_name: str, plan: BatchPlan, rpc: str = WRITE_BATCH) -> Outcome:
        """Merge one request's batch files (plain or history, by the table's mode) over the table's key ranges,
        on one of two paths (docs/ARCHITECTURE.md "Write path"): a small request is decoded here and merged by one
        task per key range it touches; any other request is decoded and sorted into runs by one task per file,
        then merged by one task per key range. A table still in key-hash buckets is first placed in key ranges
        (a version of its own). A request without rows commits nothing."""
        def produce(base: TableVersion | None, target: VersionTarget) -> tuple[PendingVersion | None, Outcome]:
            if base is None:
                raise TableNotFound(f"{rpc}: table {schema}.{table_name} does not exist; CreateTable must come first")
            if not base.table.in_key_ranges:
                raise _InHashBuckets()  # nothing is written: the caller places the table, then writes
            description = f"{rpc} {schema}.{table_name}"
            started = time.perf_counter()
            out = (self._merge_decoded(schema, base, target, plan, description)
                   if plan.total_bytes <= self.small_request else None)
            if out is None:
                out = self._merge_staged(schema, base, target, plan, description)
            timings = {"job": time.perf_counter() - started, "task_s": out.task_seconds}
            if out.request.decode_seconds is not None:  # the shuffled path decodes in tasks of their own
                timings["decode_task_s"] = out.request.decode_seconds
            merged = Outcome(None, out.counts, out.request.rows, out.request.data_rows, out.request.failures_by_column,
                             timings)
            if merged.rows == 0:
                return None, merged
            carried = [f for f in base.files if f.name not in out.replaced]
            kind = "write_history_batch" if rpc == WRITE_HISTORY_BATCH else "write_batch"
            return PendingVersion(base.table, out.new_files, carried, {"kind": kind, "counts": out.counts},
                                  out.change_parts(KIND_ROWS)), merged
        try:
            committed, merged = self.commit_with_result(schema, table_name, produce, batch=plan.identity)
        except _InHashBuckets:
            self._place_in_ranges(schema, table_name)
            committed, merged = self.commit_with_result(schema, table_name, produce, batch=plan.identity)
        return replace(merged, version=committed.version if committed else None)

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

        def produce(base: TableVersion | None, target: VersionTarget) -> tuple[PendingVersion | None, dict[str, int]]:
            if base is None:
                return None, {}
            units: list[TruncateUnit] = []
            dropped: list[DataFile] = []
            for f in base.files:
                if not f.rows or f.min_synced is None or f.max_synced is None:
                    continue
                if f.min_synced // 1000 >= cutoff_ms:
                    continue  # every row is at or after the cutoff: keep the file as it is
                if f.max_synced // 1000 < cutoff_ms and not deleted_column and not self.changes.enabled:
                    dropped.append(f)  # every row goes: drop the file unread (its rows' changes need a read)
                    continue
                units.append(TruncateUnit(file=f, cutoff_us=cutoff_us, synced_column=synced_column,
                                          deleted_column=deleted_column))
            if not units and not dropped:
                return None, {}
            out = self._run(truncate_file_task, schema, base, target, base.table, units,
                            f"truncate {schema}.{table_name}", KIND_ROWS)
            gone = out.replaced | {f.name for f in dropped}
            counts = dict(out.counts)
            counts["deleted"] = counts.get("deleted", 0) + sum(f.rows for f in dropped)
            carried = [f for f in base.files if f.name not in gone]
            kind = "soft_truncate" if deleted_column else "truncate"
            return PendingVersion(base.table, out.new_files, carried, {"kind": kind, "counts": counts},
                                  out.change_parts(KIND_ROWS)), counts
        committed, counts = self.commit_with_result(schema, table_name, produce)
        return Outcome(committed.version if committed else current.version, counts)


def plan_alter(current: TableDef, requested: TableDef, drop_columns: bool) -> TableDef:
    """The table after AlterTable: types and key flags as requested, new columns appended,
    columns absent from the request kept unless drop_columns (fivetran-protocol §10.3)."""
    wanted = {c.name: normalize_column(c) for c in requested.columns}
    columns: list[ColumnDef] = []
    for col in current.columns:
        if col.name in wanted:
            columns.append(wanted[col.name])
        elif not drop_columns:  # kept, but a column absent from the full definition is not in the key
            columns.append(replace(col, primary_key=False))
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


def _run_bytes(source: RunSource) -> int:
    """About how many bytes a source's run takes uncompressed: its batch file's size as sent, or (a relayout)
    its stored data file's, times how much larger decoded rows are."""
    if source.stored is not None:
        return int(source.stored.bytes * DECODED_TO_PARQUET)
    assert source.ref is not None
    try:
        return int(os.path.getsize(source.ref.path) * RUN_BYTES_PER_SENT_BYTE)
    except OSError:  # the decode task answers for a missing file, naming it
        return 0
