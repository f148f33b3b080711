"""Every batch file of a benchmark run, generated up front (so generation never counts in a measurement) and kept
in a cache between runs (a 100M-row load takes minutes to generate).

Sets of batch files (N = the scale's rows, k = N × the change fraction):
- `load`: N rows, keys 0…N−1 in order, CSV files of about 100 MB; `parquet_load`: the same rows as Parquet.
- uniform changes of the `big` table: `upsert` (half new keys, half existing ones at random), `update` (random
  keys, most columns unmodified), `delete` (random keys); `new_keys`: k keys far above every table's own.
- `small_load`: the small table (1M rows by default) from Parquet files; it receives the same `new_keys`.
- `hist_*`: a history-mode table of N rows receiving the uniform pattern through WriteHistoryBatch.
- `clustered-NN`: the clustered syncs, keys that grow: in turn an append (k keys above the current maximum), an
  upsert (80 % new keys above the maximum, 20 % among the most recent 5 % of live keys), an update and a delete
  (among the most recent 5 %).
- `small_syncs` (one file per sync, keys increasing) and `small_syncs_upsert` (half new, half existing keys).

A set is generated once per content: its cache folder is named by a digest of the generator's source and of
every file's parameters and keys, so a changed generator or parameter makes a new set and reuses nothing stale.
A file's AES key is derived from that digest and its name, so the cache holds no key.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
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
RECENT = 0.05  # clustered updates and deletes reach the most recent 5 % of keys
NEW_SHARE = 0.8  # share of new keys in a clustered upsert
CLUSTERED_KINDS = ("append", "upsert", "update", "delete")
CLUSTERED_STEP = 100  # the clustered syncs' _fivetran_synced steps start here
SMALL_SYNCS_STEP = 1000
SOURCES = ("data.py", "batches.py", "workload.py")


def stamp(step: int) -> str:
    return instant_text(T0_MS + step * STEP_MS)


@dataclass(frozen=True)
class Shape:
    """The figures the sets are made from."""

    rows: int  # the big, clustered and history tables (the scale)
    small_rows: int = 1_000_000  # the small table that new keys also go into
    change_fraction: float = 0.01  # rows of each change, as a share of the table
    clustered_syncs: int = 20
    small_syncs: int = 1000
    small_sync_rows: int = 10_000

    @property
    def change_rows(self) -> int:
        return max(int(self.rows * self.change_fraction), 2)


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
    key: bytes = b""

    def fingerprint(self) -> bytes:
        described = f"{self.name}|{self.kind}|{self.fmt}|{self.variant}|{self.seed}|{self.step}|{len(self.ids)}"
        return described.encode() + hashlib.sha256(np.ascontiguousarray(self.ids, dtype=np.int64).data).digest()


@dataclass
class SetPlan:
    """The files of one set, before they exist; `earliest`: the history set's earliest-start file (ids, start)."""

    name: str
    jobs: list[FileJob]
    earliest: tuple[np.ndarray, str] | None = None

    def digest(self) -> str:
        h = hashlib.sha256()
        for source in SOURCES:
            h.update(Path(__file__).with_name(source).read_bytes())
        for job in self.jobs:
            h.update(job.fingerprint())
        if self.earliest is not None:
            h.update(b"earliest" + self.earliest[1].encode())
            h.update(np.ascontiguousarray(self.earliest[0], dtype=np.int64).data)
        return h.hexdigest()[:20]


def _derived_key(digest: str, name: str) -> bytes:
    return hashlib.sha256(f"records-destination bench {digest} {name}".encode()).digest()


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
    return write_batch_file(Path(job.directory), job.name, table, job.kind, job.fmt, job.key)


def _rows_per_file(pools: Pools, history: bool) -> int:
    """Rows that make a ~100 MB plaintext file, from a sample's size."""
    sample = np.arange(20_000, dtype=np.int64)
    rows = history_rows(sample, 0, pools, stamp(0), stamp(0)) if history else plain_rows(sample, 0, pools, stamp(0))
    table = text_table(rows, column_names(history))
    return max(1_000, int(FILE_BYTES / (len(csv_text(table)) / len(sample))))


@dataclass
class Workload:
    """The sets of one shape, generated on demand into `cache` (`prepare`), then read from `files`."""

    shape: Shape
    cache: Path
    log: Callable[[str], None]
    files: dict[str, list[BatchFile]] = field(default_factory=dict)
    _plans: dict[str, SetPlan] = field(default_factory=dict)

    def plain_bytes(self, name: str) -> int:
        return sum(f.plain_bytes for f in self.files[name])

    def batch_rows(self, name: str) -> int:
        return sum(f.rows for f in self.files[name] if f.kind != "earliest")

    def set_names(self, group: str) -> list[str]:
        """The sets a scenario group needs (run.py's groups)."""
        s = self.shape
        return {"load": ["load"], "parquet": ["small_load"], "parquet_full": ["parquet_load"],
                "uniform": ["upsert", "update", "delete"], "new_keys": ["new_keys"], "truncate": [],
                "history": ["hist_load", "hist_upsert", "hist_update", "hist_delete"],
                "clustered": [clustered_name(i) for i in range(s.clustered_syncs)],
                "small_syncs": ["small_syncs", "small_syncs_upsert"]}[group]

    def prepare(self, names: Iterable[str]) -> None:
        """Generate the sets not in the cache yet (one process per core), then describe every set asked for."""
        wanted = [n for n in dict.fromkeys(names) if n not in self.files]
        if not wanted:
            return
        self._plan_all()
        self.cache.mkdir(parents=True, exist_ok=True)
        with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for name in wanted:
                self.files[name] = self._cached(self._plans[name], pool)

    def _cached(self, plan: SetPlan, pool: ProcessPoolExecutor) -> list[BatchFile]:
        return cached_set(self.cache, plan, pool, self.log)

    def _plan_all(self) -> None:
        if self._plans:
            return
        for plan in plans(self.shape):
            self._plans[plan.name] = plan


def cached_set(cache: Path, plan: SetPlan, pool: ProcessPoolExecutor, log: Callable[[str], None]) -> list[BatchFile]:
    """The set's files, in the plan's order: from the cache, or generated into it."""
    digest = plan.digest()
    directory = cache / f"{plan.name}-{digest}"
    described = directory / "files.json"
    if described.exists():
        entries = json.loads(described.read_text())
        log(f"workload: {plan.name} from the cache ({len(entries)} files)")
        return [BatchFile(str(directory / e["file"]), _derived_key(digest, e["name"]), e["rows"], e["plain_bytes"],
                          e["kind"]) for e in entries]
    directory.mkdir(parents=True, exist_ok=True)
    rows = sum(len(j.ids) for j in plan.jobs)
    log(f"workload: generating {plan.name}: {len(plan.jobs)} files, {rows:,} rows")
    jobs = [FileJob(str(directory), j.name, j.kind, j.fmt, j.variant, j.ids, j.seed, j.step,
                    _derived_key(digest, j.name)) for j in plan.jobs]
    made = list(pool.map(make_file, jobs, chunksize=max(1, len(jobs) // 64)))
    names = [j.name for j in jobs]
    if plan.earliest is not None:
        ids, start = plan.earliest
        table = pa.table({KEY: pa.array(ids, pa.int64()).cast(pa.string()), START: pa.array([start] * len(ids))})
        names.append(f"{plan.name}-earliest")
        made.append(write_batch_file(directory, names[-1], table, "earliest", "csv", _derived_key(digest, names[-1])))
    described.write_text(json.dumps([{"file": Path(f.path).name, "name": name, "rows": f.rows,
                                      "plain_bytes": f.plain_bytes, "kind": f.kind}
                                     for f, name in zip(made, names, strict=True)]))
    return made


def clustered_name(i: int) -> str:
    return f"clustered-{i:02d}"


def clustered_kind(i: int) -> str:
    return CLUSTERED_KINDS[i % len(CLUSTERED_KINDS)]


def _split(name: str, ids: np.ndarray, variant: str, kind: str, fmt: str, per_file: int, seed: int,
           step: int) -> list[FileJob]:
    return [FileJob("", f"{name}-{kind}-{i:03d}", kind, fmt, variant, ids[start:start + per_file], seed + i, step)
            for i, start in enumerate(range(0, len(ids), per_file))]


_VARIANTS = {"replace": "plain", "update": "plain_update", "delete": "plain_delete"}


def plans(shape: Shape) -> list[SetPlan]:
    """Every set of the shape (cheap: key arrays only; the rows are made when a set is generated)."""
    pools = Pools.make()
    rng = np.random.default_rng(42)
    rows, k = shape.rows, shape.change_rows
    plain_per_file = _rows_per_file(pools, False)
    hist_per_file = _rows_per_file(pools, True)
    all_ids = np.arange(rows, dtype=np.int64)
    upsert_ids = np.concatenate([np.arange(rows, rows + k // 2, dtype=np.int64),
                                 rng.choice(rows, k - k // 2, replace=False).astype(np.int64)])
    update_ids = rng.choice(rows, k, replace=False).astype(np.int64)
    delete_ids = rng.choice(rows, k, replace=False).astype(np.int64)
    new_ids = NEW_KEY_BASE + np.arange(k, dtype=np.int64)
    out = [
        SetPlan("load", _split("load", all_ids, "plain", "replace", "csv", plain_per_file, 1000, 0)),
        SetPlan("parquet_load", _split("load", all_ids, "plain", "replace", "parquet", plain_per_file, 1000, 0)),
        SetPlan("small_load", _split("small_load", np.arange(shape.small_rows, dtype=np.int64), "plain", "replace",
                                     "parquet", plain_per_file, 2000, 0)),
        SetPlan("upsert", _split("upsert", upsert_ids, "plain", "replace", "csv", plain_per_file, 3000, 1)),
        SetPlan("update", _split("update", update_ids, "plain_update", "update", "csv", plain_per_file, 4000, 2)),
        SetPlan("delete", _split("delete", delete_ids, "plain_delete", "delete", "csv", plain_per_file, 5000, 3)),
        SetPlan("new_keys", _split("new_keys", new_ids, "plain", "replace", "csv", plain_per_file, 6000, 4)),
        SetPlan("hist_load", _split("hist_load", all_ids, "history", "replace", "csv", hist_per_file, 7000, 0),
                (all_ids, stamp(0))),
        SetPlan("hist_upsert", _split("hist_upsert", upsert_ids, "history", "replace", "csv", hist_per_file, 8000, 1),
                (upsert_ids, stamp(1))),
        SetPlan("hist_update", _split("hist_update", update_ids, "history_update", "update", "csv", hist_per_file, 9000,
                                      2), (update_ids, stamp(2))),
        SetPlan("hist_delete", _split("hist_delete", delete_ids, "history_delete", "delete", "csv", hist_per_file,
                                      10000, 3)),
    ]
    for i, (kind, ids) in enumerate(clustered_keys(shape)):
        name = clustered_name(i)
        batch_kind = "replace" if kind in ("append", "upsert") else kind
        out.append(SetPlan(name, _split(name, ids, _VARIANTS[batch_kind], batch_kind, "csv", plain_per_file,
                                        20000 + 100 * i, CLUSTERED_STEP + i)))
    out += _small_syncs(shape, rng)
    return out


def clustered_keys(shape: Shape) -> list[tuple[str, np.ndarray]]:
    """The keys of each clustered sync, tracking the table as the syncs change it: its maximum key and which of its
    most recent keys are deleted. "Most recent 5 %" is the top 5 % of the live keys (the rows at the sync's time)."""
    rng = np.random.default_rng(7)
    k = shape.change_rows
    top = shape.rows  # one above the highest key so far
    live = shape.rows
    deleted = np.zeros(0, dtype=np.int64)
    out: list[tuple[str, np.ndarray]] = []
    for i in range(shape.clustered_syncs):
        kind = clustered_kind(i)
        window = max(int(live * RECENT), k)
        recent = np.arange(max(top - window - len(deleted), 0), top, dtype=np.int64)
        recent = recent[~np.isin(recent, deleted)][-window:]
        if kind == "append":
            ids = np.arange(top, top + k, dtype=np.int64)
        elif kind == "upsert":
            new = int(k * NEW_SHARE)
            ids = np.concatenate([np.arange(top, top + new, dtype=np.int64),
                                  rng.choice(recent, min(k - new, len(recent)), replace=False)])
        else:
            ids = rng.choice(recent, min(k, len(recent)), replace=False)
        ids = np.sort(ids)
        if kind in ("append", "upsert"):
            added = int(np.count_nonzero(ids >= top))
            top, live = top + added, live + added
        elif kind == "delete":
            deleted = np.concatenate([deleted, ids])
            live -= len(ids)
        out.append((kind, ids))
    return out


def _small_syncs(shape: Shape, rng: np.random.Generator) -> list[SetPlan]:
    """One file per sync, keys increasing across syncs; then one upsert of 1 % of the rows (half new keys)."""
    per, count = shape.small_sync_rows, shape.small_syncs
    total = per * count
    syncs = [FileJob("", f"small_syncs-replace-{i:04d}", "replace", "csv", "plain",
                     np.arange(i * per, (i + 1) * per, dtype=np.int64), 30000 + i, SMALL_SYNCS_STEP + i)
             for i in range(count)]
    k = max(total // 100, 2)
    upsert = np.concatenate([np.arange(total, total + k // 2, dtype=np.int64),
                             rng.choice(total, k - k // 2, replace=False).astype(np.int64)])
    return [SetPlan("small_syncs", syncs),
            SetPlan("small_syncs_upsert", [FileJob("", "small_syncs_upsert-replace-000", "replace", "csv", "plain",
                                                   upsert, 40000, SMALL_SYNCS_STEP + count)])]
