"""`python -m bench.run`: generate the workload, measure the baselines and the server, write docs/BENCHMARKS.md.

Every scenario goes through the real server over gRPC (a subprocess with its own Spark), one RPC at a time, and is
compared with its baseline measured in the same run (bench/baselines.py). See docs/BENCHMARKS.md for the method.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from bench import baselines
from bench.report import write_report
from bench.server import Server, create_table, soft_truncate, write
from bench.workload import STEP_MS, T0_MS, Workload, generate
from destination.storage.base import StorageSpec, open_storage
from destination.table_store.store import TableStore

SCHEMA = "bench"


@dataclass
class Measurement:
    scenario: str
    backend: str
    table: str
    rows: int
    plain_bytes: int
    seconds: float
    peak_total: int
    peak_jvm: int
    peak_python: int
    bytes_written: int
    files_written: int
    files_rewritten: int
    baseline: str = ""
    baseline_seconds: float | None = None
    target: str = ""

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.plain_bytes / 1e6 / self.seconds if self.seconds else 0.0


@dataclass
class Run:
    rows: int
    started: float = field(default_factory=time.time)
    measurements: list[Measurement] = field(default_factory=list)
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)  # backend -> baseline name -> seconds
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Backend:
    """Where the server keeps its tables for one pass: a local directory or a SeaweedFS bucket on loopback."""

    def __init__(self, name: str, work: Path) -> None:
        self.name = name
        self.s3: Any = None
        if name == "s3":
            from tests.s3server import start_seaweedfs

            self.s3 = start_seaweedfs()
            self.s3.create_bucket("bench")
            from tests.s3server import ACCESS_KEY, SECRET_KEY

            self.configuration = {"root": f"s3://bench/{uuid.uuid4().hex[:8]}", "s3_endpoint": self.s3.endpoint,
                                  "aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY}
        else:
            self.configuration = {"root": str(work / "store")}
        spec = StorageSpec(root=self.configuration["root"], s3_endpoint=self.configuration.get("s3_endpoint", ""),
                           access_key_id=self.configuration.get("aws_access_key_id", ""),
                           secret_access_key=self.configuration.get("aws_secret_access_key", ""))
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


def measure(run: Run, server: Server, backend: Backend, scenario: str, table: str, w: Workload, files_key: str,
            action: Callable[[], None], baseline: str = "", target: str = "") -> Measurement:
    before = backend.store.load(SCHEMA, table)
    before_files = {f.name for f in before.files} if before else set()
    server.memory.reset()
    log(f"{backend.name}: {scenario} ({w.batch_rows(files_key) if files_key else 0:,} rows)")
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    time.sleep(0.3)  # one more memory sample
    after = backend.store.load(SCHEMA, table)
    assert after is not None
    new = [f for f in after.files if f.name not in before_files]
    peak = server.memory.peak
    rows = w.batch_rows(files_key) if files_key else 0
    m = Measurement(scenario, backend.name, table, rows, w.plain_bytes(files_key) if files_key else 0, seconds,
                    peak.total, peak.jvm, peak.python, sum(f.bytes for f in new), len(new),
                    len(before_files - {f.name for f in after.files}), baseline,
                    run.baselines.get(backend.name, {}).get(baseline), target)
    log(f"{backend.name}: {scenario}: {seconds:.1f} s, {m.rows_per_second:,.0f} rows/s, peak {peak.total / 2**30:.2f} GiB")
    run.measurements.append(m)
    return m


def run_baselines(run: Run, w: Workload, backend: Backend) -> None:
    """The raw decode limit per format, then the in-process merges in the order the server applies them, on the
    backend's storage."""
    times = run.baselines.setdefault(backend.name, {})
    big, small, hist = backend.place("state-big"), backend.place("state-small"), backend.place("state-hist")
    log(f"{backend.name}: baseline (a): raw decode of the CSV initial load")
    times["decode_csv"] = baselines.raw_decode(w.files["load"], False, big)
    log(f"{backend.name}: baseline (a): raw decode of the Parquet initial load")
    times["decode_parquet"] = baselines.raw_decode(w.files["small_load"], False, small)
    log(f"{backend.name}: baseline (a): raw decode of the history initial load")
    times["decode_history"] = baselines.raw_decode(w.files["hist_load"], True, hist)
    for name, kind in (("upsert", "replace"), ("update", "update"), ("delete", "delete"), ("new_keys", "replace")):
        log(f"{backend.name}: baseline (b): in-process merge, {name}")
        times[f"merge_{name}"] = baselines.plain_merge(big, w.files[name], kind)
    log(f"{backend.name}: baseline (b): in-process merge, new keys into the small table")
    times["merge_new_keys_small"] = baselines.plain_merge(small, w.files["new_keys"], "replace")
    log(f"{backend.name}: baseline (b): in-process soft truncate")
    times["soft_truncate"] = baselines.soft_truncate(small, T0_MS + STEP_MS // 2)
    for name, kind in (("hist_upsert", "replace"), ("hist_update", "update"), ("hist_delete", "delete")):
        log(f"{backend.name}: baseline (b): in-process history merge, {name}")
        times[f"merge_{name}"] = baselines.history_merge(hist, w.files[name], kind)
    for place in (big, small, hist):
        place.fs.delete_dir(place.root)


def run_server(run: Run, w: Workload, backend: Backend, work: Path, profile: bool) -> None:
    work.mkdir(parents=True, exist_ok=True)
    server = Server(backend.configuration["root"], work / f"server-{backend.name}.log")
    profiler = _start_profiler(server, work, backend.name) if profile else None
    conf = backend.configuration
    stub = server.stub
    try:
        create_table(stub, conf, SCHEMA, "big", False)
        measure(run, server, backend, "initial load, CSV", "big", w, "load",
                lambda: write(stub, conf, SCHEMA, "big", w.files["load"], False), "decode_csv", "load")
        create_table(stub, conf, SCHEMA, "small", False)
        measure(run, server, backend, "initial load, Parquet", "small", w, "small_load",
                lambda: write(stub, conf, SCHEMA, "small", w.files["small_load"], False), "decode_parquet", "load")
        for name in ("upsert", "update", "delete"):
            measure(run, server, backend, f"incremental {name}", "big", w, name,
                    partial(write, stub, conf, SCHEMA, "big", w.files[name], False), f"merge_{name}", "merge")
        measure(run, server, backend, "new keys into the big table", "big", w, "new_keys",
                lambda: write(stub, conf, SCHEMA, "big", w.files["new_keys"], False), "merge_new_keys", "merge")
        measure(run, server, backend, "new keys into the small table", "small", w, "new_keys",
                lambda: write(stub, conf, SCHEMA, "small", w.files["new_keys"], False), "merge_new_keys_small", "merge")
        truncated = w.batch_rows("small_load")
        m = measure(run, server, backend, "soft truncate", "small", w, "",
                    lambda: soft_truncate(stub, conf, SCHEMA, "small", T0_MS + STEP_MS // 2), "soft_truncate", "merge")
        m.rows = truncated
        create_table(stub, conf, SCHEMA, "hist", True)
        measure(run, server, backend, "history initial load", "hist", w, "hist_load",
                lambda: write(stub, conf, SCHEMA, "hist", w.files["hist_load"], True), "decode_history", "load")
        for name in ("upsert", "update", "delete"):
            measure(run, server, backend, f"history {name}", "hist", w, f"hist_{name}",
                    partial(write, stub, conf, SCHEMA, "hist", w.files[f"hist_{name}"], True),
                    f"merge_hist_{name}", "merge")
    finally:
        if profiler is not None:
            _stop_profiler(profiler)
        server.stop()


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


def load_results(path: Path) -> Run:
    """A run as its results.json recorded it."""
    data = json.loads(path.read_text())
    return Run(data["rows"], data.get("started", path.stat().st_mtime),
               [Measurement(**m) for m in data["measurements"]], data["baselines"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the big and history tables")
    parser.add_argument("--backends", default="local,s3", help="comma-separated: local, s3 (SeaweedFS on loopback)")
    parser.add_argument("--work", help="working directory (default: a temporary one, removed at the end)")
    parser.add_argument("--report", default="docs/BENCHMARKS.md", help="where the report goes ('' for none)")
    parser.add_argument("--profile", action="store_true", help="record py-spy flame graphs of the server")
    parser.add_argument("--from-results", metavar="PATH",
                        help="measure nothing: write the report again from a run's results.json (after editing "
                             "bench/notes.md)")
    args = parser.parse_args(argv)
    if args.from_results:
        write_report(load_results(Path(args.from_results)), Path(args.report or "docs/BENCHMARKS.md"))
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="records-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    run = Run(args.rows)
    try:
        w = generate(args.rows, work / "batches", log)
        for name in args.backends.split(","):
            backend = Backend(name.strip(), work / name.strip())
            try:
                run_baselines(run, w, backend)
                run_server(run, w, backend, work / name.strip(), args.profile)
            finally:
                backend.stop()
        (work / "results.json").write_text(json.dumps({"rows": run.rows, "started": run.started,
                                                       "baselines": run.baselines,
                                                       "measurements": [asdict(m) for m in run.measurements]}, indent=1))
        log(f"results in {work / 'results.json'}")
        if args.report:
            write_report(run, Path(args.report))
            log(f"report written to {args.report}")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
