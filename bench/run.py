"""`python -m bench.run`: generate the workload, measure the baselines and the server, write docs/BENCHMARKS.md.

Every scenario goes through the real server over gRPC (a subprocess with its own Spark), one RPC at a time, and is
compared with its baselines measured in the same run (bench/baselines.py, bench/duck.py). Scenarios come in groups
(`--scenarios`), so a run at 100M rows does only what its targets need; each scale (`--rows 10M,30M`) is a pass of
its own per backend. See docs/BENCHMARKS.md for the method.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from bench import baselines, duck, fleet, soak, steady
from bench.report import write_into
from bench.results import Measurement, Run, code_version, load_results, origin, pass_key, save
from bench.scenarios import FLEET, GROUPS, SECTIONS, SOAK, STEADY, requested_groups, rows_option, selected_groups
from bench.server import Server, create_table, soft_truncate, unknown_fields, write
from bench.tables import data_file_urls, stored_bytes
from bench.workload import CLUSTERED_KINDS, STEP_MS, T0_MS, Shape, Workload, clustered_kind, clustered_name
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion

SCHEMA = "bench"
DEFAULT_CACHE = Path.home() / ".cache" / "records-destination-bench"


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Backend:
    """Where the server keeps its tables for one pass: a local directory or a SeaweedFS bucket on loopback."""

    def __init__(self, name: str, work: Path, extra: dict[str, str]) -> None:
        self.name = name
        self.s3: Any = None
        self.s3_access: duck.S3Access | None = None
        if name == "s3":
            from testbed.s3server import ACCESS_KEY, SECRET_KEY, start_seaweedfs

            self.s3 = start_seaweedfs()
            self.s3.create_bucket("bench")
            self.configuration = {"root": f"s3://bench/{uuid.uuid4().hex[:8]}", "s3_endpoint": self.s3.endpoint,
                                  "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
            self.s3_access = duck.S3Access(self.s3.endpoint, ACCESS_KEY, SECRET_KEY)
        elif name == "local":
            self.configuration = {"root": str(work / "store")}
        else:
            raise SystemExit(f"unknown backend {name!r}: local or s3")
        spec = StorageSpec(root=self.configuration["root"], s3_endpoint=self.configuration.get("s3_endpoint", ""),
                           access_key_id=self.configuration.get("aws_access_key_id", ""),
                           secret_access_key=self.configuration.get("aws_secret_access_key", ""))
        self.configuration.update(extra)  # fields the server may not know yet are ignored by it, with a warning
        self.store = TableStore(open_storage(spec))
        self.work = work

    def place(self, name: str) -> baselines.Place:
        """Where a baseline keeps its Parquet files: this backend's storage."""
        if self.s3 is None:
            return baselines.Place(pafs.LocalFileSystem(), str(self.work / name))
        c = self.configuration
        fs = pafs.S3FileSystem(access_key=c["aws_access_key_id"], secret_key=c["aws_secret_access_key"],
                               endpoint_override=c["s3_endpoint"].split("://")[-1], scheme="http", region="us-east-1")
        return baselines.Place(fs, f"bench/baselines/{name}")

    def stop(self) -> None:
        if self.s3 is not None:
            self.s3.stop()


@dataclass
class Pass:
    """One scale on one backend: the workload, the server, the DuckDB connection and what to measure."""

    run: Run
    w: Workload
    backend: Backend
    groups: set[str]
    duckdb: duck.Connection
    scratch: Path
    extra: dict[str, str]  # configuration fields the run passes on (--layout, --target-file-size)
    server: Server | None = None

    @property
    def scale(self) -> int:
        return self.w.shape.rows

    @property
    def baseline_key(self) -> str:
        return pass_key(self.backend.name, self.scale)

    def version(self, table: str) -> TableVersion | None:
        return self.backend.store.load(SCHEMA, table)

    def urls(self, table: str) -> list[str]:
        version = self.version(table)
        assert version is not None, table
        return [duck.readable(u) for u in data_file_urls(self.backend.store.storage, version)]

    def duckdb_merge(self, table: str, files_key: str, kind: str) -> Callable[[], float]:
        """DuckDB's merge of the batch into the table's current version, for `measure` to run before the server's."""
        return lambda: duck.merge(self.duckdb, self.urls(table), self.w.files[files_key], kind,
                                  self.backend.place("duckdb-out"), self.scratch)


def measure(p: Pass, group: str, scenario: str, table: str, files_key: str, action: Callable[[], None],
            baseline: str = "", target: str = "", duckdb: Callable[[], float] | None = None, stored: bool = False,
            server_work: bool = True) -> Measurement:
    """Time `action` (one or more RPCs, or a read); the table's files before and after give what was written and
    rewritten. `duckdb`, when given, runs first on the same version; `server_work` False: the action is the
    benchmark's own (a read), so the server's memory is not reported for it."""
    backend, server = p.backend, p.server
    assert server is not None
    before = p.version(table)
    before_files = {f.name: f.bytes for f in before.files} if before else {}
    duckdb_seconds = None
    if duckdb is not None and before is not None and before.table.stored_format != "parquet":
        duckdb = None  # DuckDB's merge reads the stored files as Parquet: no baseline for the other records formats
    if duckdb is not None:
        log(f"{backend.name}: {scenario}: DuckDB merge")
        duckdb_seconds = duckdb()
        log(f"{backend.name}: {scenario}: DuckDB {duckdb_seconds:.1f} s")
    server.memory.reset()
    rows = p.w.batch_rows(files_key) if files_key else 0
    log(f"{backend.name} {p.scale:,}: {scenario} ({rows:,} rows)")
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    time.sleep(0.3)  # one more memory sample
    after = p.version(table)
    assert after is not None
    after_names = {f.name for f in after.files}
    new = [f for f in after.files if f.name not in before_files]
    rewritten = [name for name in before_files if name not in after_names]
    peak = server.memory.peak
    m = Measurement(scenario, backend.name, table, rows, p.w.plain_bytes(files_key) if files_key else 0, seconds,
                    peak.total if server_work else 0, peak.jvm if server_work else 0,
                    peak.python if server_work else 0, sum(f.bytes for f in new), len(new), len(rewritten),
                    baseline, p.run.baselines.get(p.baseline_key, {}).get(baseline), target, p.scale, group,
                    duckdb_seconds, sum(before_files.values()), sum(before_files[n] for n in rewritten),
                    sum(f.bytes for f in after.files), len(after.files),
                    stored_bytes(backend.store.storage, backend.store.table_prefix(SCHEMA, table)) if stored else 0,
                    sum(f.rows for f in after.files))
    log(f"{backend.name} {p.scale:,}: {scenario}: {seconds:.1f} s, {m.rows_per_second:,.0f} rows/s, "
        f"peak {peak.total / 2**30:.2f} GiB, rewrote {len(rewritten)} files ({m.bytes_rewritten / 1e6:,.1f} MB)")
    p.run.measurements.append(m)
    return m


def run_baselines(p: Pass) -> None:
    """The raw decode limit per format, then the in-process merges in the order the server applies them, on the
    backend's storage (only those the selected groups compare with)."""
    times = p.run.baselines.setdefault(p.baseline_key, {})
    w, name, groups = p.w, p.backend.name, p.groups
    big, small, hist = p.backend.place("state-big"), p.backend.place("state-small"), p.backend.place("state-hist")
    if "load" in groups:
        log(f"{name}: baseline (a): raw decode of the CSV initial load")
        times["decode_csv"] = baselines.raw_decode(w.files["load"], False, big)
    if "parquet" in groups:
        log(f"{name}: baseline (a): raw decode of the Parquet initial load")
        times["decode_parquet"] = baselines.raw_decode(w.files["small_load"], False, small)
    if "parquet_full" in groups:
        full = p.backend.place("state-parquet")
        log(f"{name}: baseline (a): raw decode of the full-size Parquet initial load")
        times["decode_parquet_full"] = baselines.raw_decode(w.files["parquet_load"], False, full)
        full.remove()
    if "history" in groups:
        log(f"{name}: baseline (a): raw decode of the history initial load")
        times["decode_history"] = baselines.raw_decode(w.files["hist_load"], True, hist)
    if "uniform" in groups:  # the in-process merges hold the whole table in memory: run them where uniform runs
        for merge, kind in (("upsert", "replace"), ("update", "update"), ("delete", "delete")):
            log(f"{name}: baseline (b): in-process merge, {merge}")
            times[f"merge_{merge}"] = baselines.plain_merge(big, w.files[merge], kind)
        if "new_keys" in groups:
            log(f"{name}: baseline (b): in-process merge, new keys")
            times["merge_new_keys"] = baselines.plain_merge(big, w.files["new_keys"], "replace")
            log(f"{name}: baseline (b): in-process merge, new keys into the small table")
            times["merge_new_keys_small"] = baselines.plain_merge(small, w.files["new_keys"], "replace")
    if "truncate" in groups:
        log(f"{name}: baseline (b): in-process soft truncate")
        times["soft_truncate"] = baselines.soft_truncate(small, T0_MS + STEP_MS // 2)
    if "history" in groups:
        for merge, kind in (("hist_upsert", "replace"), ("hist_update", "update"), ("hist_delete", "delete")):
            log(f"{name}: baseline (b): in-process history merge, {merge}")
            times[f"merge_{merge}"] = baselines.history_merge(hist, w.files[merge], kind)
    for place in (big, small, hist):
        place.remove()


def load_table(p: Pass, group: str, scenario: str, table: str, files_key: str, baseline: str) -> None:
    assert p.server is not None
    create_table(p.server.stub, p.backend.configuration, SCHEMA, table, False)
    measure(p, group, scenario, table, files_key, writes(p, table, files_key), baseline, "load")


def writes(p: Pass, table: str, files_key: str, history: bool = False) -> Callable[[], None]:
    assert p.server is not None
    stub, conf = p.server.stub, p.backend.configuration
    return lambda: write(stub, conf, SCHEMA, table, p.w.files[files_key], history)


def run_clustered(p: Pass, table: str) -> None:
    """The clustered syncs in turn; DuckDB merges the first sync of each kind; the last sync also measures the
    bytes stored under the table's folder."""
    syncs = p.w.shape.clustered_syncs
    for i in range(syncs):
        kind, name = clustered_kind(i), clustered_name(i)
        batch_kind = "replace" if kind in ("append", "upsert") else kind
        measure(p, "clustered", f"clustered {kind} (sync {i + 1} of {syncs})", table, name, writes(p, table, name),
                duckdb=p.duckdb_merge(table, name, batch_kind) if i < len(CLUSTERED_KINDS) else None,
                stored=i == syncs - 1)


def run_small_syncs(p: Pass) -> None:
    """A table built by many small syncs against the same rows loaded at once: a full read and an upsert of each."""
    assert p.server is not None
    stub, conf = p.server.stub, p.backend.configuration
    files = p.w.files["small_syncs"]
    count = len(files)

    def one_by_one() -> None:
        for i, f in enumerate(files):
            write(stub, conf, SCHEMA, "many", [f], False)
            if (i + 1) % 100 == 0:
                log(f"{p.backend.name}: {i + 1} of {count} small syncs")

    for table in ("many", "once"):
        create_table(stub, conf, SCHEMA, table, False)
    measure(p, "small_syncs", f"{count:,} small syncs", "many", "small_syncs", one_by_one)
    measure(p, "small_syncs", f"the same rows loaded at once ({count:,} files)", "once", "small_syncs",
            writes(p, "once", "small_syncs"))
    for table, label in (("many", f"built by {count:,} syncs"), ("once", "loaded at once")):
        urls = p.urls(table)
        rows = p.version(table).rows  # type: ignore[union-attr]  # written just above
        m = measure(p, "small_syncs", f"full read, table {label}", table, "", partial(_read, p, urls, rows),
                    server_work=False)
        m.rows = rows
    for table, label in (("many", f"built by {count:,} syncs"), ("once", "loaded at once")):
        measure(p, "small_syncs", f"upsert into the table {label}", table, "small_syncs_upsert",
                writes(p, table, "small_syncs_upsert"))


def _read(p: Pass, urls: list[str], rows: int) -> None:
    read = duck.read_rows(p.duckdb, urls)
    assert read == rows, f"read {read} rows, the version holds {rows}"


def run_server(p: Pass, work: Path, profile: bool) -> None:
    work.mkdir(parents=True, exist_ok=True)
    # the server's own --root is a local folder on both backends: its health check writes a probe there, and `serve`
    # takes no S3 endpoint or credentials (with an S3 --root it never answers SERVING); each request's configuration
    # names the backend's root
    p.server = Server(str(work / "server-root"), work / f"server-{p.backend.name}.log")
    profiler = _start_profiler(p.server, work, p.backend.name) if profile else None
    stub, conf, g = p.server.stub, p.backend.configuration, p.groups
    passed = {k: conf[k] for k in p.extra}
    ignored = unknown_fields(stub, passed)
    if ignored:
        log(f"the server does not know the configuration field(s) {sorted(ignored)}: it ignores them")
    p.run.settings[p.baseline_key] = {"configuration": passed, "ignored": sorted(ignored), **origin(p.run)}
    own_clustered = "uniform" in g  # uniform changes scatter over the big table: the clustered syncs get their own
    try:
        if "load" in g:
            load_table(p, "load", "initial load, CSV", "big", "load", "decode_csv")
        if "parquet" in g:
            load_table(p, "parquet", "initial load, Parquet", "small", "small_load", "decode_parquet")
        if "clustered" in g and not own_clustered:
            run_clustered(p, "big")
        if "uniform" in g:
            for name, kind in (("upsert", "replace"), ("update", "update"), ("delete", "delete")):
                measure(p, "uniform", f"incremental {name}", "big", name, writes(p, "big", name), f"merge_{name}",
                        "merge", duckdb=p.duckdb_merge("big", name, kind))
        if "new_keys" in g:
            measure(p, "new_keys", "new keys into the big table", "big", "new_keys", writes(p, "big", "new_keys"),
                    "merge_new_keys", "merge")
            measure(p, "new_keys", "new keys into the small table", "small", "new_keys", writes(p, "small", "new_keys"),
                    "merge_new_keys_small", "merge")
        if "truncate" in g:
            truncated = p.w.batch_rows("small_load")
            m = measure(p, "truncate", "soft truncate", "small", "",
                        lambda: soft_truncate(stub, conf, SCHEMA, "small", T0_MS + STEP_MS // 2), "soft_truncate",
                        "merge")
            m.rows = truncated
        if "history" in g:
            create_table(stub, conf, SCHEMA, "hist", True)
            measure(p, "history", "history initial load", "hist", "hist_load", writes(p, "hist", "hist_load", True),
                    "decode_history", "load")
            for name in ("upsert", "update", "delete"):
                measure(p, "history", f"history {name}", "hist", f"hist_{name}", writes(p, "hist", f"hist_{name}", True),
                        f"merge_hist_{name}", "merge")
        if "clustered" in g and own_clustered:
            load_table(p, "clustered", "initial load, CSV (clustered table)", "clustered", "load", "decode_csv")
            run_clustered(p, "clustered")
            p.backend.store.drop(SCHEMA, "clustered")  # its disk, at 100M rows
        if "parquet_full" in g:
            load_table(p, "parquet_full", "initial load, Parquet (full size)", "big_parquet", "parquet_load",
                       "decode_parquet_full")
            p.backend.store.drop(SCHEMA, "big_parquet")
        if "small_syncs" in g:
            run_small_syncs(p)
    finally:
        if profiler is not None:
            _stop_profiler(profiler)
        p.server.stop()


def run_fleet(args: argparse.Namespace, extra: dict[str, str], work: Path) -> dict[str, Any]:
    """The fleet group on every backend (bench/fleet.py): its own tables and server per backend."""
    shape = fleet.FleetShape(args.fleet_tables, args.fleet_rows, args.fleet_rounds, args.fleet_sync_rows,
                             tuple(int(n) for n in args.fleet_levels.split(",")))
    tables = fleet.prepare(shape, Path(args.cache) / "fleet", log)
    return _per_backend(args, extra, work / "fleet", lambda backend, directory: fleet.run_backend(
        backend, shape, tables, directory, args.duckdb_memory, log))


def run_soak(args: argparse.Namespace, extra: dict[str, str], work: Path) -> dict[str, Any]:
    """The soak group on every backend (bench/soak.py): the fleet's tables and syncs, its own server per backend."""
    if args.soak_syncs % args.soak_tables or args.soak_syncs < args.soak_tables:
        raise SystemExit(f"--soak-syncs {args.soak_syncs} must be a multiple of --soak-tables {args.soak_tables} "
                         "(one sync per table per round)")
    shape = soak.SoakShape(args.soak_tables, args.soak_syncs, args.soak_in_flight, args.soak_rows, args.soak_sync_rows,
                           args.soak_sample_every)
    tables = fleet.prepare(shape.fleet(), Path(args.cache) / "fleet", log)
    return _per_backend(args, extra, work / "soak", lambda backend, directory: soak.run_backend(
        backend, shape, tables, directory, args.duckdb_memory, log))


def run_steady(args: argparse.Namespace, extra: dict[str, str], work: Path) -> dict[str, Any]:
    """The steady group on every backend (bench/steady.py): its three tables and its own server per backend."""
    shape = steady.SteadyShape(args.steady_small_rows, args.steady_large_rows, args.steady_size_syncs,
                               args.steady_sync_rows, args.steady_commits, args.steady_small_rows,
                               args.steady_history_sync_rows, args.steady_phase)
    tables = steady.prepare(shape, Path(args.cache) / "steady", log)
    return _per_backend(args, extra, work / "steady", lambda backend, directory: steady.run_backend(
        backend, shape, tables, directory, args.duckdb_memory, log), args.steady_backends or args.backends)


def _per_backend(args: argparse.Namespace, extra: dict[str, str], work: Path,
                 run_one: Callable[[Backend, Path], dict[str, Any]], backends: str | None = None) -> dict[str, Any]:
    """`run_one` on each backend of `backends` (default --backends), in a folder of its own; backend name → its
    figures."""
    out = {}
    for name in (n.strip() for n in (backends or args.backends).split(",")):
        backend = Backend(name, work / name, extra)
        try:
            out[name] = run_one(backend, work / name)
        finally:
            backend.stop()
    return out


def _start_profiler(server: Server, work: Path, name: str) -> Any:
    import subprocess
    import sys

    out = work / f"profile-{name}.svg"
    log(f"profiling the server's driver with py-spy into {out}")
    return subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(server.process.pid),
                             "--subprocesses", "--rate", "50", "--output", str(out), "--format", "flamegraph"])


def _stop_profiler(profiler: Any) -> None:
    import signal

    profiler.send_signal(signal.SIGINT)
    profiler.wait(timeout=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=rows_option, default=[10_000_000],
                        help="the scales: rows of the big, clustered and history tables, e.g. 10M,30M,100M")
    parser.add_argument("--backends", default="local,s3", help="comma-separated: local, s3 (SeaweedFS on loopback)")
    parser.add_argument("--scenarios", default="all",
                        help=f"comma-separated groups ({', '.join(GROUPS)}), or all; a group brings the ones it needs")
    parser.add_argument("--small-rows", type=rows_option, default=[1_000_000],
                        help="rows of the small table (Parquet load; new keys go into it too)")
    parser.add_argument("--change-fraction", type=float, default=0.01, help="rows of each change, share of the table")
    parser.add_argument("--clustered-syncs", type=int, default=20)
    parser.add_argument("--small-syncs", type=int, default=1000, help="syncs that build the small-syncs table")
    parser.add_argument("--small-sync-rows", type=int, default=10_000, help="rows of each small sync")
    parser.add_argument("--fleet-tables", type=int, default=40, help="fleet: tables")
    parser.add_argument("--fleet-rows", type=lambda t: rows_option(t)[0], default=20_000,
                        help="fleet: rows of each table's initial load")
    parser.add_argument("--fleet-rounds", type=int, default=10, help="fleet: rounds of one sync per table, per level")
    parser.add_argument("--fleet-sync-rows", type=int, default=500, help="fleet: rows of each sync")
    parser.add_argument("--fleet-levels", default="1,4,8", help="fleet: WriteBatch calls in flight, per level")
    parser.add_argument("--soak-tables", type=int, default=200, help="soak: tables")
    parser.add_argument("--soak-syncs", type=int, default=10_000, help="soak: syncs in all (one per table per round)")
    parser.add_argument("--soak-in-flight", type=int, default=4, help="soak: WriteBatch calls in flight")
    parser.add_argument("--soak-rows", type=lambda t: rows_option(t)[0], default=2_000,
                        help="soak: rows of each table's initial load")
    parser.add_argument("--soak-sync-rows", type=int, default=100, help="soak: rows of each sync")
    parser.add_argument("--soak-sample-every", type=int, default=1_000, help="soak: syncs between samples")
    parser.add_argument("--steady-small-rows", type=lambda t: rows_option(t)[0], default=5_000,
                        help="steady: rows of the small table and of the history table")
    parser.add_argument("--steady-large-rows", type=lambda t: rows_option(t)[0], default=200_000,
                        help="steady: rows of the large table")
    parser.add_argument("--steady-size-syncs", type=int, default=100, help="steady: syncs of each table of the sizes")
    parser.add_argument("--steady-sync-rows", type=int, default=200, help="steady: rows of each sync of the sizes")
    parser.add_argument("--steady-commits", type=int, default=3_000, help="steady: syncs of the history table")
    parser.add_argument("--steady-history-sync-rows", type=int, default=50, help="steady: rows of each history sync")
    parser.add_argument("--steady-phase", type=int, default=500, help="steady: history commits per phase")
    parser.add_argument("--steady-backends", help="steady: its backends when not --backends' (its thousands of "
                                                  "commits take about 35 minutes on S3)")
    parser.add_argument("--layout", help="the `layout` configuration field passed to the server (complete | referencing)")
    parser.add_argument("--target-file-size", help="the `target_file_size` configuration field, e.g. 128MiB")
    parser.add_argument("--catalog", choices=["sql"],
                        help="register every table in a catalog (sql: a SQLite JDBC catalog in the work folder)")
    parser.add_argument("--records-format", help="the `records_format` configuration field (parquet | avro | delimited)")
    parser.add_argument("--records-variant", help="the `records_variant` configuration field (delimited: bluelabs, ...)")
    parser.add_argument("--retention-min-age-seconds",
                        help="the `retention_min_age_seconds` configuration field (stored bytes depend on it)")
    parser.add_argument("--duckdb-memory", default="8GB", help="DuckDB's memory limit (it spills beyond it)")
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help="generated batch files, kept between runs")
    parser.add_argument("--work", help="working directory (default: a temporary one, removed at the end)")
    parser.add_argument("--report", default="docs/BENCHMARKS.md", help="where the report goes ('' for none)")
    parser.add_argument("--profile", action="store_true", help="record py-spy flame graphs of the server")
    parser.add_argument("--from-results", metavar="PATHS",
                        help="measure nothing: write the report again from runs' results.json files (comma-separated; "
                             "the report's hand-written parts kept); from fleet, soak or uniform runs alone, only their sections")
    args = parser.parse_args(argv)
    if args.from_results:
        loaded = load_results([Path(p) for p in args.from_results.split(",")])
        measured = {m.group for m in loaded.measurements} | {g for g, r in ((FLEET, loaded.fleet),
                                                                             (SOAK, loaded.soak), (STEADY, loaded.steady)) if r}
        log(write_into(loaded, requested_groups(measured), Path(args.report or "docs/BENCHMARKS.md")))
        return 0
    groups = selected_groups(args.scenarios)
    extra = {k: v for k, v in (("layout", args.layout), ("target_file_size", args.target_file_size),
                               ("retention_min_age_seconds", args.retention_min_age_seconds),
                               ("records_format", args.records_format), ("records_variant", args.records_variant)) if v}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="records-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.catalog == "sql":  # every table registered in a SQLite JDBC catalog: the catalog step's cost is its phase
        extra.update({"catalog": "sql", "catalog_uri": f"sqlite:///{work / 'catalog.db'}"})
    run = Run(args.rows, shape={"groups": sorted(groups), "code": code_version(), "small_rows": args.small_rows[0],
                                                     "change_fraction": args.change_fraction,
                                                     "clustered_syncs": args.clustered_syncs,
                                                     "small_syncs": args.small_syncs,
                                                     "small_sync_rows": args.small_sync_rows})
    try:
        if FLEET in groups:
            begun = origin(run)
            run.fleet.update({backend: {**r, **begun} for backend, r in run_fleet(args, extra, work).items()})
            save(run, work / "results.json")
        if SOAK in groups:
            begun = origin(run)
            run.soak.update({backend: {**r, **begun} for backend, r in run_soak(args, extra, work).items()})
            save(run, work / "results.json")
        if STEADY in groups:
            begun = origin(run)
            run.steady.update({backend: {**r, **begun} for backend, r in run_steady(args, extra, work).items()})
            save(run, work / "results.json")
        for rows in (args.rows if groups - SECTIONS else []):
            shape = Shape(rows, args.small_rows[0], args.change_fraction, args.clustered_syncs, args.small_syncs,
                          args.small_sync_rows)
            w = Workload(shape, Path(args.cache), log)
            w.prepare(name for g in sorted(groups - SECTIONS) for name in w.set_names(g))
            for name in (n.strip() for n in args.backends.split(",")):
                directory = work / f"{rows}" / name
                backend = Backend(name, directory, extra)
                try:
                    p = Pass(run, w, backend, groups, duck.connect(backend.s3_access, directory / "duckdb",
                                                                    args.duckdb_memory), directory / "duckdb", extra)
                    run_baselines(p)
                    run_server(p, directory, args.profile)
                    p.duckdb.close()
                    backend.place("duckdb-out").remove()  # a whole table at this scale
                    shutil.rmtree(p.scratch, ignore_errors=True)
                finally:
                    backend.stop()
                save(run, work / "results.json")  # after every pass: a long run keeps what it measured
        log(f"results in {work / 'results.json'}")
        if args.report:
            log(write_into(run, selected_groups(args.scenarios, with_needs=False), Path(args.report)))
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
