"""Every batch file of a benchmark run, generated up front (so generation never counts in a measurement).

Tables (N = --rows):
- `big`: N rows loaded from CSV batch files of about 100 MB each, then the incremental pattern: 1 % upserts (half
  new keys, half existing), 1 % updates that leave most columns unmodified, 1 % deletes; then 1 % new keys.
- `small`: N/10 rows loaded from Parquet batch files; the same new keys (the cost of adding rows should follow
  the batch, not the table); then a soft truncate of all its N/10 loaded rows.
- `hist`: a history-mode table of N rows receiving the same incremental pattern through WriteHistoryBatch.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from bench.batches import BatchFile, csv_text, write_batch_file
from bench.data import (
    KEY,
    START,
    UPDATABLE,
    Pools,
    column_names,
    delete_rows,
    history_rows,
    instant_text,
    partial_update,
    plain_rows,
    text_table,
)

FILE_BYTES = 100_000_000
T0_MS = 1_717_200_000_000  # 2024-06-01T00:00:00Z, the initial loads' _fivetran_synced
STEP_MS = 3_600_000
NEW_KEY_BASE = 10**12  # keys of the new-key upsert: far from every table's own keys


def stamp(step: int) -> str:
    return instant_text(T0_MS + step * STEP_MS)


@dataclass
class Workload:
    rows: int
    directory: Path
    files: dict[str, list[BatchFile]] = field(default_factory=dict)

    def plain_bytes(self, name: str) -> int:
        return sum(f.plain_bytes for f in self.files[name])

    def batch_rows(self, name: str) -> int:
        return sum(f.rows for f in self.files[name] if f.kind != "earliest")


def _rows_per_file(pools: Pools, fmt: str, history: bool) -> int:
    """Rows that make a ~100 MB plaintext file, from a sample's size."""
    sample = np.arange(20_000, dtype=np.int64)
    rows = history_rows(sample, 0, pools, stamp(0), stamp(0)) if history else plain_rows(sample, 0, pools, stamp(0))
    table = text_table(rows, column_names(history))
    return max(1_000, int(FILE_BYTES / (len(csv_text(table)) / len(sample))))


@dataclass(frozen=True)
class FileJob:
    """One batch file to generate (picklable: generation runs in a process per core)."""

    directory: str
    name: str
    kind: str  # replace | update | delete
    fmt: str
    variant: str  # plain | history | plain_update | history_update | plain_delete | history_delete
    ids: np.ndarray
    seed: int
    step: int


_POOLS: Pools | None = None


def _rows(job: FileJob) -> dict[str, pa.Array]:
    global _POOLS
    if _POOLS is None:
        _POOLS = Pools.make()
    history = job.variant.startswith("history")
    synced = stamp(job.step)
    if job.variant.endswith("_delete"):
        return delete_rows(job.ids, synced, history)
    rows = history_rows(job.ids, job.seed, _POOLS, synced, synced) if history else plain_rows(job.ids, job.seed, _POOLS, synced)
    return partial_update(rows, UPDATABLE) if job.variant.endswith("_update") else rows


def make_file(job: FileJob) -> BatchFile:
    table = text_table(_rows(job), column_names(job.variant.startswith("history")))
    return write_batch_file(Path(job.directory), job.name, table, job.kind, job.fmt)


def _jobs(w: Workload, name: str, ids: np.ndarray, variant: str, kind: str, fmt: str, per_file: int, seed: int,
          step: int) -> list[tuple[str, FileJob]]:
    return [(name, FileJob(str(w.directory), f"{name}-{kind}-{i:03d}", kind, fmt, variant, ids[start:start + per_file],
                           seed + i, step))
            for i, start in enumerate(range(0, len(ids), per_file))]


def _earliest(w: Workload, name: str, ids: np.ndarray, start: str) -> None:
    table = pa.table({KEY: pa.array(ids, pa.int64()).cast(pa.string()), START: pa.array([start] * len(ids))})
    w.files.setdefault(name, []).append(write_batch_file(w.directory, f"{name}-earliest", table, "earliest", "csv"))


def generate(rows: int, directory: Path, log: Callable[[str], None]) -> Workload:
    directory.mkdir(parents=True, exist_ok=True)
    pools = Pools.make()
    rng = np.random.default_rng(42)
    w = Workload(rows, directory)
    k = max(rows // 100, 2)
    small = max(rows // 10, 2)
    plain_per_file = _rows_per_file(pools, "csv", False)
    hist_per_file = _rows_per_file(pools, "csv", True)
    all_ids = np.arange(rows, dtype=np.int64)
    upsert_ids = np.concatenate([np.arange(rows, rows + k // 2, dtype=np.int64),
                                 rng.choice(rows, k - k // 2, replace=False).astype(np.int64)])
    update_ids = rng.choice(rows, k, replace=False).astype(np.int64)
    delete_ids = rng.choice(rows, k, replace=False).astype(np.int64)
    new_ids = NEW_KEY_BASE + np.arange(k, dtype=np.int64)
    jobs = [
        *_jobs(w, "load", all_ids, "plain", "replace", "csv", plain_per_file, 1000, 0),
        *_jobs(w, "small_load", np.arange(small, dtype=np.int64), "plain", "replace", "parquet", plain_per_file, 2000, 0),
        *_jobs(w, "upsert", upsert_ids, "plain", "replace", "csv", plain_per_file, 3000, 1),
        *_jobs(w, "update", update_ids, "plain_update", "update", "csv", plain_per_file, 4000, 2),
        *_jobs(w, "delete", delete_ids, "plain_delete", "delete", "csv", plain_per_file, 5000, 3),
        *_jobs(w, "new_keys", new_ids, "plain", "replace", "csv", plain_per_file, 6000, 4),
        *_jobs(w, "hist_load", all_ids, "history", "replace", "csv", hist_per_file, 7000, 0),
        *_jobs(w, "hist_upsert", upsert_ids, "history", "replace", "csv", hist_per_file, 8000, 1),
        *_jobs(w, "hist_update", update_ids, "history_update", "update", "csv", hist_per_file, 9000, 2),
        *_jobs(w, "hist_delete", delete_ids, "history_delete", "delete", "csv", hist_per_file, 10000, 3),
    ]
    log(f"generating {len(jobs)} batch files for {rows:,}-row tables (~{plain_per_file:,} rows per CSV file), "
        f"{os.cpu_count()} processes")
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for (name, _job), made in zip(jobs, pool.map(make_file, [job for _n, job in jobs]), strict=True):
            w.files.setdefault(name, []).append(made)
    for name, ids, step in (("hist_load", all_ids, 0), ("hist_upsert", upsert_ids, 1), ("hist_update", update_ids, 2)):
        _earliest(w, name, ids, stamp(step))
    return w
