"""The steady scenario: what a small sync costs at every table size and age (docs/BENCHMARKS.md, "Steady state").

Two parts against one `serve` process, one call in flight, retention retiring a version on every commit (the
`retention_min_age_seconds` field at 0, two versions kept):

- sizes: a small table (5,000 rows) and a large one (200,000 rows) take the same kind of small syncs in turn (the
  fleet's syncs: new keys above the largest, updates by upsert of recent keys, an update file every other sync and
  a delete file every third): each sync's latency and the data bytes it wrote (the new version's files not in the
  version before it), with its write amplification (those bytes over the sync's rows at the table's own bytes per
  row);
- history: one table takes thousands of small syncs in a row, measured per phase of `phase` commits: latency
  percentiles, the server's own time per step (its log lines' `phases`: commit, metadata, Delta, Iceberg, catalog,
  retention), and the entries under the table's folder (every object, and those of `_log`) at the phase's end.

At the end every table is compared with the model of the files sent (bench/fleet.py's `FleetModel`).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import duck, fleet
from bench.batches import BatchFile
from bench.fleet import FleetBackend, FleetShape, TableSyncs

RETENTION = {"retention_min_age_seconds": "0", "retention_versions": "2"}  # a version retired on every commit


@dataclass(frozen=True)
class SteadyShape:
    small_rows: int = 5_000
    large_rows: int = 200_000
    size_syncs: int = 100  # per table of the sizes part
    sync_rows: int = 200
    commits: int = 3_000  # syncs of the history part
    history_rows: int = 5_000
    history_sync_rows: int = 50
    phase: int = 500  # commits per phase of the history part

    def sizes(self, rows: int) -> FleetShape:
        return FleetShape(1, rows, self.size_syncs, self.sync_rows, (1,))

    def history(self) -> FleetShape:
        return FleetShape(1, self.history_rows, self.commits, self.history_sync_rows, (1,))


def prepare(shape: SteadyShape, cache: Path, log: Callable[[str], None]) -> dict[str, TableSyncs]:
    """The three tables' files (the fleet's generator, one table each), named for this scenario."""
    out = {}
    for name, fleet_shape in (("steady_small", shape.sizes(shape.small_rows)),
                              ("steady_large", shape.sizes(shape.large_rows)), ("steady_history", shape.history())):
        (table,) = fleet.prepare(fleet_shape, cache, log)
        out[name] = replace(table, name=name)
    return out


@dataclass
class Sync:
    seconds: float
    rows: int
    bytes_written: int  # data bytes of the files new in the version the sync made
    table_bytes: int  # data bytes of that version
    table_rows: int
    error: str | None

    @property
    def write_amplification(self) -> float:
        if not (self.rows and self.table_rows and self.table_bytes):
            return 0.0
        return self.bytes_written / (self.rows * self.table_bytes / self.table_rows)


class Syncer:
    """Sends one table's syncs one at a time, reading the table's version after each (not timed): the files of the
    version a sync made are the next sync's `before` (this benchmark is the tables' only writer)."""

    def __init__(self, backend: FleetBackend, send: Callable[[TableSyncs, list[BatchFile]], str | None]) -> None:
        self._backend = backend
        self._send = send
        self._files: dict[str, set[str]] = {}  # table → its latest version's data files

    def sync(self, t: TableSyncs, r: int) -> Sync:
        if t.name not in self._files:
            loaded = self._backend.store.load(fleet.SCHEMA, t.name)
            self._files[t.name] = {f.name for f in loaded.files} if loaded else set()
        before = self._files[t.name]
        started = time.perf_counter()
        error = self._send(t, t.syncs[r])
        seconds = time.perf_counter() - started
        version = self._backend.store.load(fleet.SCHEMA, t.name)
        assert version is not None, t.name
        written = sum(f.bytes for f in version.files if f.name not in before)
        self._files[t.name] = {f.name for f in version.files}
        return Sync(seconds, sum(f.rows for f in t.syncs[r]), written, sum(f.bytes for f in version.files),
                    sum(f.rows for f in version.files), error)


def summary(syncs: list[Sync]) -> dict[str, Any]:
    """Percentiles of latency, bytes written and write amplification over `syncs`."""
    seconds = [s.seconds for s in syncs]
    written = [float(s.bytes_written) for s in syncs]
    amplification = [s.write_amplification for s in syncs]
    return {"syncs": len(syncs), "p50": fleet.percentile(seconds, 50), "p95": fleet.percentile(seconds, 95),
            "bytes_written_p50": fleet.percentile(written, 50), "bytes_written_max": max(written, default=0),
            "bytes_written_first": written[0] if written else 0.0,
            "bytes_written_max_after_first": max(written[1:], default=0.0),
            "write_amplification_p50": fleet.percentile(amplification, 50),
            "write_amplification_max": max(amplification, default=0.0),
            "table_rows": syncs[-1].table_rows if syncs else 0, "table_bytes": syncs[-1].table_bytes if syncs else 0,
            "errors": dict(Counter(s.error for s in syncs if s.error))}


def folder_entries(backend: FleetBackend, table: str) -> tuple[int, int]:
    """(objects under the table's folder, objects under its `_log/`)."""
    storage = backend.store.storage
    prefix = backend.store.table_prefix(fleet.SCHEMA, table)
    paths = [o.path for o in storage.list_recursive(prefix)]
    return len(paths), sum(1 for p in paths if "/_log/" in p)


def _phases_since(log_path: Path, offset: int) -> dict[str, dict[str, float]]:
    with open(log_path, encoding="utf-8", errors="replace") as lines:
        lines.seek(offset)
        return fleet.phase_summary(fleet.log_phases(iter(lines)))


def run_backend(backend: FleetBackend, shape: SteadyShape, tables: dict[str, TableSyncs], work: Path,
                duckdb_memory: str, log: Callable[[str], None]) -> dict[str, Any]:
    """Load the three tables, run the sizes part then the history part, then check every table."""
    from bench.server import Server

    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"server-steady-{backend.name}.log"
    server = Server(str(work / "server-root"), log_path)
    conf = {**backend.configuration, **RETENTION}
    syncer = Syncer(backend, fleet.sender(server.stub, conf))
    result: dict[str, Any] = {"shape": asdict(shape), "sizes": {}, "phases": []}
    try:
        log(f"{backend.name}: steady: loading {shape.small_rows:,}, {shape.large_rows:,} and "
            f"{shape.history_rows:,} rows")
        result["load_seconds"] = fleet.load_tables(server.stub, conf, list(tables.values()))
        small, large = tables["steady_small"], tables["steady_large"]
        per_table: dict[str, list[Sync]] = {small.name: [], large.name: []}
        for r in range(shape.size_syncs):  # in turn, so that both tables see the same machine
            for t in (small, large):
                per_table[t.name].append(syncer.sync(t, r))
        for name, syncs in per_table.items():
            result["sizes"][name] = summary(syncs)
            s = result["sizes"][name]
            log(f"{backend.name}: steady: {name} ({s['table_rows']:,} rows): p50 {s['p50'] * 1000:.0f} ms, bytes "
                f"written p50 {s['bytes_written_p50'] / 1e6:.2f} MB, max {s['bytes_written_max'] / 1e6:.2f} MB")
        history = tables["steady_history"]
        for start in range(0, shape.commits, shape.phase):
            offset = log_path.stat().st_size
            syncs = [syncer.sync(history, r) for r in range(start, min(start + shape.phase, shape.commits))]
            time.sleep(0.3)  # the server's last log lines
            entries, log_entries = folder_entries(backend, history.name)
            phase = {**summary(syncs), "first_commit": start + 1, "entries": entries, "log_entries": log_entries,
                     "server_phases": _phases_since(log_path, offset)}
            result["phases"].append(phase)
            log(f"{backend.name}: steady: commits {start + 1:,}-{start + len(syncs):,}: p50 "
                f"{phase['p50'] * 1000:.0f} ms, p95 {phase['p95'] * 1000:.0f} ms, entries {entries:,} "
                f"(_log {log_entries:,}), errors {phase['errors'] or 'none'}")
    finally:
        server.stop()
    result["tables_exact"] = _check(backend, tables, shape, work, duckdb_memory, log)
    return result


def _check(backend: FleetBackend, tables: dict[str, TableSyncs], shape: SteadyShape, work: Path,
           duckdb_memory: str, log: Callable[[str], None]) -> int:
    """Tables equal to the model of the files sent to them."""
    con = duck.connect(backend.s3_access, work / "duckdb-steady", duckdb_memory)
    exact = 0
    try:
        for t in tables.values():
            rounds = shape.commits if t.name == "steady_history" else shape.size_syncs
            diff = fleet.server_differences(backend, con, t, fleet.table_model(t, rounds))
            exact += diff == 0
            if diff:
                log(f"{backend.name}: steady: {t.name}: {diff} keys differ from the model")
    finally:
        con.close()
    log(f"{backend.name}: steady: tables equal to the model: {exact} of {len(tables)}")
    return exact


def p50_ratio(result: dict[str, Any]) -> float | None:
    """The large table's p50 over the small table's."""
    sizes = result.get("sizes", {})
    small, large = sizes.get("steady_small", {}).get("p50"), sizes.get("steady_large", {}).get("p50")
    return large / small if small and large else None
