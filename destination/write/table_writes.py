"""Rows into a table: a request's batch files merged over its key ranges, a table still in key-hash buckets placed
in key ranges first, and Truncate. Each commits one version (docs/ARCHITECTURE.md "Write path")."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace

import pyarrow as pa

from destination.changes.change_settings import ChangeSettings
from destination.changes.metadata import KIND_ROWS
from destination.model.conversion import FailureKey
from destination.model.table_model import KEY_RANGES
from destination.on_disk.datafiles import DataFile
from destination.runtime import logs, phases
from destination.runtime.errors import TableNotFound
from destination.runtime.settings import SMALL_REQUEST_BYTES
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.write.batches import WRITE_BATCH, WRITE_HISTORY_BATCH, BatchPlan
from destination.write.jobs import JobOutput, JobRunner
from destination.write.one_step import commit_one_step
from destination.write.outcome import BatchRetried, Outcome
from destination.write.sorted_runs import SortedRuns
from destination.write.with_changes import CommitsWithChanges
from spark_jobs.contracts import RequestCounts, RunSource, TruncateUnit, data_rows
from spark_jobs.operations import file_operations
from spark_jobs.tasks.key_ranges import merge_range_task
from spark_jobs.tasks.per_file import truncate_file_task

# Small requests are decoded on the driver (ServerOptions.small_request_bytes) unless their rows decode to more
# than this: the driver's units travel inside the job's tasks, and a 1 GiB driver heap ran out of memory on a
# 16 MiB request holding 130 MB of values
DRIVER_DECODED_LIMIT = 64 << 20


class TableWrites:
    """WriteBatch's merge, the placement of key-hash-bucket tables in key ranges, and Truncate."""

    def __init__(self, jobs: JobRunner, runs: SortedRuns, commits: CommitsWithChanges, changes: ChangeSettings,
                 small_request: int = SMALL_REQUEST_BYTES) -> None:
        self._jobs = jobs
        self._runs = runs
        self._commits = commits
        self._store = commits.store
        self._changes = changes
        self._small_request = small_request  # batch files up to this size (as sent) are decoded on the driver

    def write_batch(self, schema: str, table_name: str, plan: BatchPlan, rpc: str = WRITE_BATCH,
                    checked: TableVersion | None = None) -> Outcome | BatchRetried:
        """Merge one request's batch files (plain or history, by the table's mode) over the table's key ranges
        and commit the result, beginning again on the new base after a commit conflict (docs/ARCHITECTURE.md
        "Write path"). What the base found under the claim decides first: no table, a retry (its batch committed
        since the request's own check), or a table still in key-hash buckets, placed in key ranges first (a
        version of its own). A request without rows commits nothing. `checked`: the table's latest version as the
        request loaded it (TableStore.begin)."""
        attempt = self._store.begin(schema, table_name, checked=checked)
        while True:
            base = attempt.base
            if base is None:
                self._store.abandon(attempt)
                raise TableNotFound(f"{rpc}: table {schema}.{table_name} does not exist; CreateTable must come first")
            if plan.identity.seen_in(base.recent_batches):
                self._store.abandon(attempt)
                return BatchRetried(len(plan.files), base.version)
            if not base.table.in_key_ranges:
                self._store.abandon(attempt)
                self.place_in_ranges(schema, table_name)
                attempt = self._store.begin(schema, table_name)
                continue
            with self._store.held(attempt):
                pending, merged = self._merge(schema, table_name, base, attempt.target, plan, rpc)
            if pending is None:  # no rows: nothing to commit
                self._store.abandon(attempt)
                return replace(merged, version=base.version)
            committed = self._commits.commit(attempt, pending, plan.identity)
            if committed is not None:
                return replace(merged, version=committed.version)
            attempt = self._store.begin(schema, table_name, after=attempt)

    def _merge(self, schema: str, table_name: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
               rpc: str) -> tuple[PendingVersion | None, Outcome]:
        """The request's merge into `target` on one of two paths: a small request is decoded here and merged by one
        task per key range it touches; any other request is decoded and sorted into runs by one task per file, then
        merged by one task per key range. The version to commit (None: the request holds no rows), and what the
        merge did."""
        description = f"{rpc} {schema}.{table_name}"
        started = time.perf_counter()
        out = (self._merge_decoded(schema, base, target, plan, description)
               if plan.total_bytes <= self._small_request else None)
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
        units = self._jobs.units_of_operations(base.files, pa.concat_tables(parts), base.table) if parts else []
        out = self._jobs.run(merge_range_task, schema, base, target, base.table, units, description, KIND_ROWS)
        out.request = RequestCounts(rows=rows, files=len(plan.files), failures_by_column=dict(failures), data_rows=data)
        return out

    def _merge_staged(self, schema: str, base: TableVersion, target: VersionTarget, plan: BatchPlan,
                      description: str) -> JobOutput:
        """A large request: stage 1 decodes each batch file in a task of its own and stages its operations sorted
        by key; stage 2 merges each key range's operations with the files they can touch."""
        def sources(directory: str) -> list[RunSource]:
            return [RunSource(run_path=f"{directory}/{ref.position:06d}.arrow", ref=ref, fmt=plan.fmt)
                    for ref in plan.files]
        with self._runs.staged(schema, base, target, base.table, sources, description) as (ctx, runs):
            return self._runs.merge(ctx, base.files, runs, description)

    def place_in_ranges(self, schema: str, name: str) -> None:
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
            with self._runs.staged(schema, base, target, table, sources, description) as (ctx, runs):
                out = self._runs.merge(ctx, [], runs, description, rows_only=True)
            logs.info(f"{schema}.{name}: placed {sum(f.rows for f in stored)} rows of {len(stored)} key-hash bucket "
                      f"files in {len(out.new_files)} key-range files")
            return PendingVersion(table, out.new_files, [], {"kind": "place_in_key_ranges"}, out.change_parts(KIND_ROWS))
        commit_one_step(self._commits, schema, name, produce)

    def truncate(self, schema: str, table_name: str, synced_column: str, cutoff_us: int,
                 deleted_column: str | None) -> Outcome:
        """Rows synced before the cutoff removed, or marked deleted in `deleted_column` (which the table has);
        the version None: the table does not exist."""
        cutoff_ms = cutoff_us // 1000

        counts: dict[str, int] = {}  # the committed try's (a conflict runs `produce` again)

        def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion | None:
            counts.clear()
            if base is None:
                return None
            units: list[TruncateUnit] = []
            dropped: list[DataFile] = []
            for f in base.files:
                if not f.rows or f.min_synced is None or f.max_synced is None:
                    continue
                if f.min_synced // 1000 >= cutoff_ms:
                    continue  # every row is at or after the cutoff: keep the file as it is
                if f.max_synced // 1000 < cutoff_ms and not deleted_column and not self._changes.enabled:
                    dropped.append(f)  # every row goes: drop the file unread (its rows' changes need a read)
                    continue
                units.append(TruncateUnit(file=f, cutoff_us=cutoff_us, synced_column=synced_column,
                                          deleted_column=deleted_column))
            if not units and not dropped:
                return None
            out = self._jobs.run(truncate_file_task, schema, base, target, base.table, units,
                                 f"truncate {schema}.{table_name}", KIND_ROWS)
            gone = out.replaced | {f.name for f in dropped}
            counts.update(out.counts)
            counts["deleted"] = counts.get("deleted", 0) + sum(f.rows for f in dropped)
            carried = [f for f in base.files if f.name not in gone]
            kind = "soft_truncate" if deleted_column else "truncate"
            return PendingVersion(base.table, out.new_files, carried, {"kind": kind, "counts": dict(counts)},
                                  out.change_parts(KIND_ROWS))
        committed = commit_one_step(self._commits, schema, table_name, produce)
        return Outcome(committed.version if committed else None, counts)
