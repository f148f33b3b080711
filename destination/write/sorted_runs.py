"""Rows too many for the driver, placed in key ranges in two Spark jobs: stage 1 sorts each source (a batch file,
or a stored data file being placed anew) into a run in scratch storage; stage 2 merges each key range's share of
the runs. The runs are removed when stage 2 ends, whether it succeeded or not."""
from __future__ import annotations

import os
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import numpy as np

from destination.changes.metadata import KIND_ROWS
from destination.model.conversion import FailureKey
from destination.model.key_order import keys_from_json
from destination.model.table_model import TableDef
from destination.on_disk.datafiles import DataFile
from destination.on_disk.placement import KeySample, plan_units
from destination.runtime import logs
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.versions import TableVersion, VersionTarget
from destination.write.jobs import DECODED_TO_PARQUET, JobOutput, JobRunner, PlacementSettings
from spark_jobs.contracts import JobContext, RangeUnit, RequestCounts, RunSlice, RunSource, SortedRun
from spark_jobs.tasks.key_ranges import merge_range_task, sort_run_task

# runs staged with lz4 are about twice the Parquet they become (measured on the benchmark's 20-column table)
STAGED_TO_PARQUET = 2.0
# staged runs are written once and read once, soon after: uncompressed on a local scratch disk (the page cache
# holds them), lz4 where they cross a network to the table's storage (a cluster's executors) or where the scratch
# disk lacks room for them uncompressed. Measured on the benchmark's table: a 57 MB batch file (zstd, encrypted)
# stages 74 MB of runs, 39 MB with lz4 at 0.12 s more per file.
RUN_COMPRESSION = "lz4"
RUN_BYTES_PER_SENT_BYTE = 1.3
SCRATCH_HEADROOM = 1.5  # uncompressed runs need this share of free space over their estimate
RUNS_DIR = "_runs"  # a new version's sorted runs when executors cannot reach a local scratch directory


class SortedRuns:
    """Stages sorted runs (stage 1) and merges them into the key ranges' units (stage 2)."""

    def __init__(self, jobs: JobRunner, storage: Storage, placement: PlacementSettings) -> None:
        self._jobs = jobs
        self._storage = storage  # the table's: runs go there when there is no scratch directory
        self._placement = placement

    @contextmanager
    def staged(self, schema: str, base: TableVersion, target: VersionTarget, table: TableDef,
               sources: Callable[[str], list[RunSource]], description: str) -> Iterator[tuple[JobContext, list[SortedRun]]]:
        """Stage 1: one task per source sorts its rows into a run in the scratch storage; the runs are removed
        when the block ends, whether the job succeeded or not."""
        directory = self._scratch_dir(target)
        units = sources(directory)
        ctx = replace(self._jobs.context(schema, base, target, table, KIND_ROWS),
                      run_compression=self._run_compression(units, description))
        try:
            yield ctx, self._jobs.results(sort_run_task, ctx, units, f"{description} (sort)")
        finally:
            storage = open_storage(self._placement.scratch) if self._placement.scratch else self._storage
            try:
                storage.delete_prefix(directory)
            except Exception as exc:  # the version's own directory is cleared with it; a scratch leftover is logged
                logs.warning(f"{description}: could not remove staged runs {storage.url(directory)}: {exc}")

    def merge(self, ctx: JobContext, base_files: Sequence[DataFile], runs: Sequence[SortedRun],
              description: str, rows_only: bool = False) -> JobOutput:
        """Stage 2: the units of the key ranges, planned from the runs' batch keys; each reads the batches of
        every run that may hold its keys. `rows_only` (a relayout, with no base files): the runs hold rows."""
        table = ctx.table
        firsts = keys_from_json([k for r in runs for k in r.batch_first], table)
        weights = np.array([w for r in runs for w in r.batch_rows], dtype=np.int64)
        staged_rows, staged_bytes = sum(r.rows for r in runs), sum(r.bytes for r in runs)
        plan = plan_units(base_files, KeySample(keys=firsts, weights=weights), table, self._placement.target_file_bytes,
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
        results = self._jobs.results(merge_range_task, ctx, units, description)
        failures: Counter[FailureKey] = Counter()
        counted = [r.counts for r in runs if r.counts is not None]
        for c in counted:
            failures.update(c.failures_by_column)
        request = RequestCounts(rows=sum(c.rows for c in counted), files=len(counted),
                                failures_by_column=dict(failures), decode_seconds=sum(c.seconds for c in counted),
                                data_rows=sum(c.data_rows for c in counted))
        return JobOutput.of(results, request)

    def _run_compression(self, sources: Sequence[RunSource], description: str) -> str | None:
        """Runs go uncompressed to a local scratch disk with room for them, lz4 anywhere else (RUN_COMPRESSION):
        a load larger than the scratch disk's free space is staged compressed rather than failing on a full disk."""
        if self._placement.scratch is None:
            return RUN_COMPRESSION
        estimate = sum(_run_bytes(s) for s in sources)
        root = self._placement.scratch.root
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
        if self._placement.scratch is not None:
            return f"runs/{uuid.uuid4().hex}"
        return f"{target.directory}/{RUNS_DIR}"


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
