"""The fleet scenario: many small syncs across many tables, several WriteBatch calls in flight, as Fivetran sends
them (docs/BENCHMARKS.md, "Fleet").

N tables (the benchmark's 20-column table) are loaded, then each receives one small sync per round: a replace file
of mostly new keys and some updates of recent keys, an update file (partial rows) every other round and a delete
file every third, the keys of one sync distinct. Each in-flight level runs rounds of its own (the tables keep
growing), its calls on a thread pool of that size; a table's syncs stay in order (each waits for the table's
previous sync). Measured per level: latency percentiles, calls/s, rows/s, the server's RSS after it, errors by kind,
and the server's own time per phase (its log lines' `phases`). Baselines in the same run: DuckDB applying the same
syncs to a table file of its own and rewriting it whole per sync, one sync at a time, and the floor (decode the
sync's files, write one Parquet file and three small JSON files, each fsynced). At the end every table, the
server's and DuckDB's, is compared with a model built from the batch files sent (`FleetModel`).
"""
from __future__ import annotations

import io
import json
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from bench import baselines, duck
from bench.batches import BatchFile
from bench.data import KEY
from bench.tables import data_file_urls
from bench.workload import FileJob, SetPlan, cached_set
from destination.on_disk.datafiles import dictionary_columns
from destination.store.table_store import TableStore
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING

UPDATE_SHARE, DELETE_SHARE = 0.10, 0.05  # of a sync's rows, in the rounds that have an update / a delete file
EXISTING_SHARE = 0.2  # of the replace file: keys among the recent ones (updates by upsert), the rest new keys
RECENT = 0.05  # recent keys: the top 5 % of the live keys (at least four syncs' worth)
FLEET_STEP = 5000  # the syncs' _fivetran_synced steps start here (bench/workload.py `stamp`)
KINDS = ("replace", "update", "delete")
_VARIANTS = {"replace": "plain", "update": "plain_update", "delete": "plain_delete"}
# the columns the model checks: the key, every kind of value an update sets or keeps, and nullable text
CHECKED = {"id": int, "flag": bool, "small": int, "count": int, "big": int, "score": float, "name": str,
           "city": str, "notes": str, "email": str}


@dataclass(frozen=True)
class FleetShape:
    tables: int = 40
    rows: int = 20_000  # per table, at its initial load
    rounds: int = 10  # per in-flight level
    sync_rows: int = 500
    levels: tuple[int, ...] = (1, 4, 8)

    @property
    def total_rounds(self) -> int:
        return self.rounds * len(self.levels)


def round_kinds(r: int) -> tuple[str, ...]:
    """The files of round r's sync: a replace file always, an update file every other round, a delete every third."""
    return ("replace", *(("update",) if r % 2 == 1 else ()), *(("delete",) if r % 3 == 2 else ()))


def table_name(t: int) -> str:
    return f"fleet_{t:03d}"


def sync_keys(shape: FleetShape, t: int) -> list[dict[str, np.ndarray]]:
    """Each round's keys per file kind for table t, tracking its live keys: new keys above the maximum; updates
    (by upsert or update file) and deletes among the recent live keys, all of one sync distinct."""
    rng = np.random.default_rng(1000 + t)
    top = shape.rows
    deleted: set[int] = set()
    out = []
    for r in range(shape.total_rounds):
        kinds = round_kinds(r)
        n_update = int(shape.sync_rows * UPDATE_SHARE) if "update" in kinds else 0
        n_delete = int(shape.sync_rows * DELETE_SHARE) if "delete" in kinds else 0
        n_replace = shape.sync_rows - n_update - n_delete
        n_existing = int(n_replace * EXISTING_SHARE)
        live = top - len(deleted)
        window = max(int(live * RECENT), 4 * shape.sync_rows)
        candidates = np.arange(max(top - window - len(deleted), 0), top, dtype=np.int64)
        recent = np.array([k for k in candidates.tolist() if k not in deleted], dtype=np.int64)[-window:]
        chosen = rng.choice(recent, min(n_existing + n_update + n_delete, len(recent)), replace=False)
        existing, updated = chosen[:n_existing], chosen[n_existing:n_existing + n_update]
        removed = chosen[n_existing + n_update:]
        new = np.arange(top, top + n_replace - len(existing), dtype=np.int64)
        keys = {"replace": np.sort(np.concatenate([new, existing]))}
        if "update" in kinds:
            keys["update"] = np.sort(updated)
        if "delete" in kinds:
            keys["delete"] = np.sort(removed)
        top += len(new)
        deleted.update(removed.tolist())
        out.append(keys)
    return out


@dataclass
class TableSyncs:
    """One table's batch files: its initial load, then one sync (a list of files) per round."""

    name: str
    load: BatchFile
    syncs: list[list[BatchFile]]


def plan(shape: FleetShape, t: int) -> SetPlan:
    name = table_name(t)
    jobs = [FileJob("", f"{name}-load-replace", "replace", "csv", "plain", np.arange(shape.rows, dtype=np.int64),
                    100_000 + t, FLEET_STEP)]
    for r, keys in enumerate(sync_keys(shape, t)):
        jobs += [FileJob("", f"{name}-r{r:03d}-{kind}", kind, "csv", _VARIANTS[kind], keys[kind],
                         200_000 + 1000 * t + r, FLEET_STEP + 1 + r) for kind in KINDS if kind in keys]
    return SetPlan(f"{name}-{shape.rows}-{shape.sync_rows}", jobs)


def prepare(shape: FleetShape, cache: Path, log: Callable[[str], None]) -> list[TableSyncs]:
    """Every table's files, generated into the cache (one process per core) or read from it."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for t in range(shape.tables):
            p = plan(shape, t)
            files = dict(zip([j.name for j in p.jobs], cached_set(cache, p, pool, log), strict=True))
            name = table_name(t)
            syncs = [[files[f"{name}-r{r:03d}-{kind}"] for kind in KINDS if f"{name}-r{r:03d}-{kind}" in files]
                     for r in range(shape.total_rounds)]
            out.append(TableSyncs(name, files[f"{name}-load-replace"], syncs))
    return out


# ---- the model: what every table must hold -------------------------------------------------------------------

def read_text(f: BatchFile) -> pa.Table:
    """A batch file's rows as sent: text, the null marker as null (the unmodified marker stays text)."""
    plain = baselines.plaintext(f)
    header = plain[:plain.index(b"\n")].decode().split(",")
    return pacsv.read_csv(io.BytesIO(plain), convert_options=pacsv.ConvertOptions(
        column_types={name: pa.string() for name in header}, null_values=[NULL_STRING], strings_can_be_null=True,
        quoted_strings_can_be_null=False))


def _typed(column: str, text: str | None) -> Any:
    if text is None:
        return None
    kind = CHECKED[column]
    if kind is bool:
        return text == "true"
    return kind(text)


class FleetModel:
    """key → the checked columns' values, from the batch files in the order a table receives them: a replace
    row sets every column, an update row of a stored key the columns it does not mark unmodified (an update of a
    missing key does nothing), a delete removes the key; in a sync, replace then update then delete files."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def apply(self, f: BatchFile) -> None:
        table = read_text(f)
        keys = [int(k) for k in table.column(KEY).to_pylist()]
        if f.kind == "delete":
            for k in keys:
                self.rows.pop(k, None)
            return
        columns = {c: table.column(c).to_pylist() for c in CHECKED}
        for i, k in enumerate(keys):
            if f.kind == "replace":
                self.rows[k] = {c: _typed(c, columns[c][i]) for c in CHECKED}
            elif k in self.rows:
                self.rows[k].update({c: _typed(c, columns[c][i]) for c in CHECKED
                                     if columns[c][i] != UNMODIFIED_STRING})


def stored_rows(con: duck.Connection, urls: list[str]) -> dict[int, dict[str, Any]]:
    """The checked columns of a table's data files, read with DuckDB."""
    names = list(CHECKED)
    query = f"SELECT {', '.join(duck._quoted(c) for c in names)} FROM read_parquet(?)"
    return {int(row[0]): dict(zip(names, row, strict=True)) for row in con.execute(query, [urls]).fetchall()}


def differences(model: dict[int, dict[str, Any]], stored: dict[int, dict[str, Any]]) -> int:
    """Keys missing, extra or with any checked value different."""
    return len(model.keys() ^ stored.keys()) + sum(1 for k in model.keys() & stored.keys() if model[k] != stored[k])


# ---- the server's side ---------------------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


@dataclass
class Level:
    in_flight: int
    calls: int
    rows: int
    seconds: float  # wall time of the level
    latencies: list[float]
    rss_before: int
    rss_after: int
    jvm_after: int
    errors: dict[str, int]
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # phase → mean, median (seconds)
    bytes_written: float = 0.0  # data bytes the level's syncs wrote (the server's bytes_written counter)
    table_bytes_per_row: float = 0.0  # the tables' data bytes per row after the level

    @property
    def write_amplification(self) -> float:
        """Data bytes written over the syncs' rows at the tables' own bytes per row."""
        return self.bytes_written / (self.rows * self.table_bytes_per_row) if self.rows and self.table_bytes_per_row \
            else 0.0

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        del out["latencies"]
        out.update(p50=percentile(self.latencies, 50), p95=percentile(self.latencies, 95),
                   p99=percentile(self.latencies, 99), calls_per_second=self.calls_per_second,
                   rows_per_second=self.rows_per_second, write_amplification=self.write_amplification)
        return out


def error_kind(call: Callable[[], Any]) -> str | None:
    """None for a success; else "gRPC <code>", "Task" or "warning"."""
    import grpc

    try:
        response = call()
    except grpc.RpcError as exc:
        return f"gRPC {exc.code().name}"
    which = response.WhichOneof("response")
    return None if which == "success" or which is None else {"task": "Task"}.get(which, which)


def run_level(in_flight: int, tables: list[TableSyncs], rounds: range,
              send: Callable[[TableSyncs, list[BatchFile]], str | None]) -> tuple[list[float], Counter[str], float]:
    """Every table's syncs of `rounds`, `in_flight` calls at a time, round-major (`run_calls`)."""
    return run_calls(in_flight, [(t, r) for r in rounds for t in tables], send)


def run_calls(in_flight: int, calls: list[tuple[TableSyncs, int]],
              send: Callable[[TableSyncs, list[BatchFile]], str | None]) -> tuple[list[float], Counter[str], float]:
    """The syncs `calls` names (table, round), `in_flight` calls at a time in that order; a table's sync starts only
    after its previous one in `calls` ended. Returns the calls' latencies, the errors by kind and the wall time."""
    done = {(t.name, r): threading.Event() for t, r in calls}
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    lock = threading.Lock()

    def one(t: TableSyncs, r: int) -> None:
        previous = done.get((t.name, r - 1))
        if previous is not None:
            previous.wait()
        try:
            started = time.perf_counter()
            kind = send(t, t.syncs[r])
            seconds = time.perf_counter() - started
            with lock:
                latencies.append(seconds)
                if kind is not None:
                    errors[kind] += 1
        finally:
            done[(t.name, r)].set()

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        for future in [pool.submit(one, t, r) for t, r in calls]:
            future.result()
    return latencies, errors, time.perf_counter() - started


def log_phases(lines: Iterator[str]) -> list[dict[str, float]]:
    """Per WriteBatch log line with phases: its phases, plus `seconds` and `other` (the time no phase covers)."""
    out = []
    for line in lines:
        if '"phases"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not str(record.get("message", "")).startswith("[WriteBatch]"):
            continue
        spent = {k: float(v) for k, v in record["phases"].items()}
        seconds = float(record["seconds"])
        out.append({**spent, "seconds": seconds, "other": max(0.0, seconds - sum(spent.values()))})
    return out


def phase_summary(requests: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Mean and median seconds per phase over the requests (a request without a phase counts as 0)."""
    names = list(dict.fromkeys(k for r in requests for k in r))
    return {name: {"mean": statistics.fmean(r.get(name, 0.0) for r in requests),
                   "median": statistics.median(r.get(name, 0.0) for r in requests)} for name in names}


# ---- the baselines -------------------------------------------------------------------------------------------

def duck_schema(con: duck.Connection, url: str) -> list[tuple[str, str]]:
    """A Parquet file's columns and their DuckDB types."""
    return [(str(row[0]), str(row[1])) for row in con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [[url]]).fetchall()]


def duckdb_sync(con: duck.Connection, table_file: str, schema: list[tuple[str, str]], out: str,
                files: list[BatchFile], scratch: Path) -> float:
    """DuckDB applies one sync (replace, update, delete files in turn, chained in one statement) to the table in
    `table_file` (of `schema`) and writes the whole table to `out`; decrypting the files to CSV is timed too."""
    work = scratch / "sync"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    source = f"read_parquet({duck._literal(table_file)})"
    for i, f in enumerate(files):
        path = work / f"{i}.csv"
        plain = baselines.plaintext(f)
        path.write_bytes(plain)
        header = plain[:plain.index(b"\n")].decode().split(",")
        source = f"({duck.merge_rows(source, [str(path)], header, schema, f.kind)})"
    con.execute(f"COPY (SELECT * FROM {source}) TO {duck._literal(out)} (FORMAT parquet, COMPRESSION snappy)")
    return time.perf_counter() - started


def _put(place: baselines.Place, name: str, body: bytes, local: bool) -> None:
    """One file at `place`, fsynced on local disk (an S3 PUT is durable when it returns)."""
    path = f"{place.root}/{name}"
    if local:
        with open(path, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
    else:
        with place.fs.open_output_stream(path) as out:
            out.write(body)


def floor_sync(files: list[BatchFile], place: baselines.Place, n: int) -> float:
    """The least a sync costs: decode its files, write one Parquet file and three small JSON files, each fsynced."""
    local = isinstance(place.fs, pafs.LocalFileSystem)
    started = time.perf_counter()
    table = pa.concat_tables([baselines.decode(f, False).table for f in files], promote_options="permissive")
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy", use_dictionary=dictionary_columns(table))
    _put(place, f"{n:06d}.parquet", sink.getvalue().to_pybytes(), local)
    for name in ("schema", "files", "manifest"):
        _put(place, f"{n:06d}-{name}.json", json.dumps({"version": n, "name": name}).encode(), local)
    return time.perf_counter() - started


def latency_summary(seconds: list[float]) -> dict[str, float]:
    return {"count": len(seconds), "p50": percentile(seconds, 50), "p95": percentile(seconds, 95),
            "p99": percentile(seconds, 99), "seconds": sum(seconds)}


# ---- one backend's pass --------------------------------------------------------------------------------------

class FleetBackend(Protocol):
    """What the pass needs of bench/run.py's Backend."""

    name: str
    configuration: dict[str, str]
    store: TableStore
    s3_access: duck.S3Access | None

    def place(self, name: str) -> baselines.Place: ...


SCHEMA = "fleet"


def _urls(backend: FleetBackend, table: str) -> list[str]:
    version = backend.store.load(SCHEMA, table)
    assert version is not None, table
    return [duck.readable(u) for u in data_file_urls(backend.store.storage, version)]


def load_tables(stub: Any, conf: dict[str, str], tables: list[TableSyncs]) -> float:
    """Create and load every table, one call at a time; the seconds it took."""
    from bench.server import create_table, write

    started = time.perf_counter()
    for t in tables:
        create_table(stub, conf, SCHEMA, t.name, False)
        write(stub, conf, SCHEMA, t.name, [t.load], False)
    return time.perf_counter() - started


def sender(stub: Any, conf: dict[str, str]) -> Callable[[TableSyncs, list[BatchFile]], str | None]:
    """One sync of a table as one WriteBatch call; its error kind (None: success)."""
    from bench.server import write_request

    def send(t: TableSyncs, files: list[BatchFile]) -> str | None:
        request = write_request(conf, SCHEMA, t.name, files, False)
        return error_kind(lambda: stub.WriteBatch(request, timeout=1800))

    return send


def run_backend(backend: FleetBackend, shape: FleetShape, tables: list[TableSyncs], work: Path, duckdb_memory: str,
                log: Callable[[str], None]) -> dict[str, Any]:
    """Load the tables, copy each for DuckDB, run the server's levels, then the baselines (the server idle), then
    every table against the model; the pass's figures."""
    from bench.server import Server

    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"server-fleet-{backend.name}.log"
    server = Server(str(work / "server-root"), log_path, metrics=True)
    conf, stub = backend.configuration, server.stub
    con = duck.connect(backend.s3_access, work / "duckdb-fleet", duckdb_memory)
    place = backend.place("duckdb-fleet")
    place.reset()
    result: dict[str, Any] = {"shape": asdict(shape), "levels": []}
    try:
        log(f"{backend.name}: fleet: creating and loading {shape.tables} tables of {shape.rows:,} rows")
        result["load_seconds"] = load_tables(stub, conf, tables)
        for t in tables:  # DuckDB's copy of each loaded table (not timed)
            urls = ", ".join(duck._literal(u) for u in _urls(backend, t.name))
            con.execute(f"COPY (SELECT * FROM read_parquet([{urls}])) TO {duck._literal(_duck_file(place, t, -1))} "
                        "(FORMAT parquet)")
        send = sender(stub, conf)
        for i, in_flight in enumerate(shape.levels):
            rounds = range(i * shape.rounds, (i + 1) * shape.rounds)
            before = server.memory.now()
            offset = log_path.stat().st_size
            written = server.counter("bytes_written")
            log(f"{backend.name}: fleet: {in_flight} in flight, rounds {rounds.start + 1}-{rounds.stop}")
            latencies, errors, seconds = run_level(in_flight, tables, rounds, send)
            time.sleep(0.5)  # the server's last log lines
            after = server.memory.now()
            with open(log_path, encoding="utf-8", errors="replace") as lines:
                lines.seek(offset)
                spent = phase_summary(log_phases(iter(lines)))
            rows = sum(f.rows for t in tables for r in rounds for f in t.syncs[r])
            level = Level(in_flight, len(latencies), rows, seconds, latencies, before.total, after.total, after.jvm,
                          dict(errors), spent, server.counter("bytes_written") - written,
                          _bytes_per_row(backend, tables))
            summary = level.summary()
            result["levels"].append(summary)
            log(f"{backend.name}: fleet: {in_flight} in flight: p50 {summary['p50'] * 1000:.0f} ms, p95 "
                f"{summary['p95'] * 1000:.0f} ms, {summary['calls_per_second']:.1f} calls/s, RSS "
                f"{before.total / 1e6:,.0f} → {after.total / 1e6:,.0f} MB, write amplification "
                f"{summary['write_amplification']:.1f}, errors {dict(errors) or 'none'}")
        _baselines(backend, con, place, tables, work, log, result)
        _check_tables(backend, con, place, tables, log, result)
    finally:
        server.stop()
        con.close()
        place.remove()
    return result


def _bytes_per_row(backend: FleetBackend, tables: list[TableSyncs]) -> float:
    """The tables' data bytes per row, from their latest versions."""
    versions = [backend.store.load(SCHEMA, t.name) for t in tables]
    rows = sum(v.rows for v in versions if v is not None)
    return sum(f.bytes for v in versions if v is not None for f in v.files) / rows if rows else 0.0


def table_model(t: TableSyncs, rounds: int) -> FleetModel:
    """The model of table t after its load and its first `rounds` syncs."""
    model = FleetModel()
    for f in [t.load, *(f for sync in t.syncs[:rounds] for f in sync)]:
        model.apply(f)
    return model


def server_differences(backend: FleetBackend, con: duck.Connection, t: TableSyncs, model: FleetModel) -> int:
    """Keys of the server's table t that differ from the model."""
    return differences(model.rows, stored_rows(con, _urls(backend, t.name)))


def _duck_file(place: baselines.Place, t: TableSyncs, r: int) -> str:
    """DuckDB's table file after round r (-1: the initial load); two files in turn, as one is read, one written."""
    return f"{place.url}/{t.name}-{'load' if r < 0 else r % 2}.parquet"


def _baselines(backend: FleetBackend, con: duck.Connection, place: baselines.Place, tables: list[TableSyncs],
               work: Path, log: Callable[[str], None], result: dict[str, Any]) -> None:
    """DuckDB's syncs and the floor, one sync at a time, table after table, with the server idle."""
    floor = backend.place("floor-fleet")
    floor.reset()
    duck_seconds: list[float] = []
    floor_seconds: list[float] = []
    log(f"{backend.name}: fleet: DuckDB's syncs and the floor")
    try:
        for t in tables:
            schema = duck_schema(con, _duck_file(place, t, -1))
            for r, files in enumerate(t.syncs):
                duck_seconds.append(duckdb_sync(con, _duck_file(place, t, r - 1), schema, _duck_file(place, t, r),
                                                files, work / "duckdb-fleet"))
                floor_seconds.append(floor_sync(files, floor, len(floor_seconds)))
    finally:
        floor.remove()
    result["duckdb"] = latency_summary(duck_seconds)
    result["floor"] = latency_summary(floor_seconds)
    log(f"{backend.name}: fleet: DuckDB p50 {result['duckdb']['p50'] * 1000:.0f} ms, floor p50 "
        f"{result['floor']['p50'] * 1000:.0f} ms")


def _check_tables(backend: FleetBackend, con: duck.Connection, place: baselines.Place, tables: list[TableSyncs],
                  log: Callable[[str], None], result: dict[str, Any]) -> None:
    """Every table of the server and of DuckDB compared with the model of the files sent."""
    exact = duck_exact = 0
    for t in tables:
        model = table_model(t, len(t.syncs))
        server_diff = server_differences(backend, con, t, model)
        duck_diff = differences(model.rows, stored_rows(con, [_duck_file(place, t, len(t.syncs) - 1)]))
        exact += server_diff == 0
        duck_exact += duck_diff == 0
        if server_diff or duck_diff:
            log(f"{backend.name}: fleet: {t.name}: {server_diff} keys differ from the model in the server's table, "
                f"{duck_diff} in DuckDB's")
    result["server_tables_exact"], result["duckdb_tables_exact"] = exact, duck_exact
    log(f"{backend.name}: fleet: tables exact: server {exact} of {len(tables)}, DuckDB {duck_exact}")
