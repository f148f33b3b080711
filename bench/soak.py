"""The soak scenario: a server that runs for weeks (docs/BENCHMARKS.md, "Soak").

Many small syncs over many small tables, the fleet's tables and syncs (bench/fleet.py: same generation, same model
check), a few calls in flight, against one `serve` process. Every `sample_every` syncs (the calls in flight drained
first) the server's process tree is sampled: RSS of the server's Python process, its Spark JVM and Spark's Python
workers apart; threads and open file descriptors of the server and of the JVM; the JVM's heap and metaspace used
right after a full GC (`jcmd`); the count of Python workers. At the end every table is checked against the model.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from bench import duck, fleet
from bench.fleet import FleetBackend, FleetShape, TableSyncs


@dataclass(frozen=True)
class SoakShape:
    tables: int = 200
    syncs: int = 10_000  # in all; a multiple of `tables` (one sync per table per round)
    in_flight: int = 4
    rows: int = 2_000  # per table, at its initial load
    sync_rows: int = 100
    sample_every: int = 1_000

    @property
    def rounds(self) -> int:
        return max(1, self.syncs // self.tables)

    def fleet(self) -> FleetShape:
        """The fleet shape whose tables and syncs the soak sends: one level of `rounds` rounds."""
        return FleetShape(self.tables, self.rows, self.rounds, self.sync_rows, (self.in_flight,))


def calls(tables: list[TableSyncs], rounds: int) -> list[tuple[TableSyncs, int]]:
    """Every sync in the order sent: round-major, table after table."""
    return [(t, r) for r in range(rounds) for t in tables]


def chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# ---- the samples ---------------------------------------------------------------------------------------------

@dataclass
class Sample:
    syncs: int  # syncs sent so far
    seconds: float  # since the first sync
    server_rss: int
    jvm_rss: int
    workers_rss: int
    workers: int
    server_threads: int
    jvm_threads: int
    server_fds: int
    jvm_fds: int
    jvm_heap_used: int  # bytes, after a full GC; 0 when it could not be read
    jvm_metaspace_used: int
    errors: int  # failed calls so far
    p50: float  # latency of this chunk's calls, seconds
    p95: float


_USED = re.compile(r"used (\d+)K")


def heap_after_gc(pid: int) -> tuple[int, int]:
    """(heap used, metaspace used) in bytes of JVM `pid` right after a full GC, with the `jcmd` beside its own
    `java` (the JDK the JVM runs on); (0, 0) when there is none or it fails."""
    try:
        jcmd = Path(os.readlink(f"/proc/{pid}/exe")).with_name("jcmd")
    except OSError:
        return 0, 0
    command = str(jcmd) if jcmd.exists() else "jcmd"
    try:
        subprocess.run([command, str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run([command, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0, 0
    return parse_heap_info(info)


def parse_heap_info(text: str) -> tuple[int, int]:
    """(heap used, metaspace used) in bytes from `jcmd GC.heap_info`: the heap's `used NK` figures are on the lines
    indented by one space before `Metaspace` (one line for G1, one per generation for the others; deeper lines are
    regions or spaces within them), the metaspace's on the `Metaspace` line."""
    heap = meta = 0
    for line in text.splitlines():
        found = _USED.search(line)
        if found is None or line.startswith("  "):
            continue
        used = int(found.group(1)) * 1024
        if line.strip().startswith("Metaspace"):
            meta = used
        elif not meta:
            heap += used
    return heap, meta


@dataclass
class Tree:
    """The server's process tree: its own Python process, the Spark JVM, Spark's Python workers."""

    server: psutil.Process
    jvm: psutil.Process | None
    workers: list[psutil.Process]

    @classmethod
    def of(cls, pid: int) -> Tree:
        root = psutil.Process(pid)
        jvm: psutil.Process | None = None
        workers = []
        for p in root.children(recursive=True):
            try:
                name = p.name()
            except psutil.Error:
                continue
            if "java" in name and jvm is None:
                jvm = p
            else:
                workers.append(p)
        return cls(root, jvm, workers)


def _rss(p: psutil.Process | None) -> int:
    try:
        return p.memory_info().rss if p is not None else 0
    except psutil.Error:
        return 0


def _count(p: psutil.Process | None, what: str) -> int:
    """Entries of /proc/<pid>/task (threads) or /proc/<pid>/fd (open file descriptors)."""
    if p is None:
        return 0
    try:
        return len(os.listdir(f"/proc/{p.pid}/{what}"))
    except OSError:
        return 0


def sample(pid: int, syncs: int, seconds: float, errors: int, latencies: list[float]) -> Sample:
    """The tree's figures now; the JVM's full GC last, so that the RSS is the running server's (G1 gives the regions
    a full GC frees back in the background, and an RSS read just after one catches the JVM midway)."""
    tree = Tree.of(pid)
    rss = (_rss(tree.server), _rss(tree.jvm), sum(_rss(w) for w in tree.workers))
    counts = (len(tree.workers), _count(tree.server, "task"), _count(tree.jvm, "task"), _count(tree.server, "fd"),
              _count(tree.jvm, "fd"))
    heap, meta = heap_after_gc(tree.jvm.pid) if tree.jvm is not None else (0, 0)
    return Sample(syncs, seconds, *rss, *counts, heap, meta, errors, fleet.percentile(latencies, 50),
                  fleet.percentile(latencies, 95))


# ---- the pass ------------------------------------------------------------------------------------------------

def run_backend(backend: FleetBackend, shape: SoakShape, tables: list[TableSyncs], work: Path, duckdb_memory: str,
                log: Callable[[str], None]) -> dict[str, Any]:
    """Load the tables, send every sync sampling the server every `sample_every`, then check every table."""
    from bench.server import Server

    work.mkdir(parents=True, exist_ok=True)
    server = Server(str(work / "server-root"), work / f"server-soak-{backend.name}.log")
    conf, stub = backend.configuration, server.stub
    result: dict[str, Any] = {"shape": asdict(shape), "samples": []}
    errors: Counter[str] = Counter()
    try:
        log(f"{backend.name}: soak: creating and loading {shape.tables} tables of {shape.rows:,} rows")
        result["load_seconds"] = fleet.load_tables(stub, conf, tables)
        result["before"] = asdict(sample(server.process.pid, 0, 0.0, 0, []))
        send = fleet.sender(stub, conf)
        sent, started = 0, time.perf_counter()
        for chunk in chunks(calls(tables, shape.rounds), shape.sample_every):
            latencies, chunk_errors, _seconds = fleet.run_calls(shape.in_flight, chunk, send)
            errors.update(chunk_errors)
            sent += len(chunk)
            s = sample(server.process.pid, sent, time.perf_counter() - started, sum(errors.values()), latencies)
            result["samples"].append(asdict(s))
            log(f"{backend.name}: soak: {sent:,} syncs, {s.seconds:,.0f} s: RSS server {s.server_rss / 1e6:,.0f} MB, "
                f"JVM {s.jvm_rss / 1e6:,.0f} MB, workers {s.workers_rss / 1e6:,.0f} MB ({s.workers}); threads "
                f"{s.server_threads} / {s.jvm_threads}; fds {s.server_fds} / {s.jvm_fds}; heap after GC "
                f"{s.jvm_heap_used / 1e6:,.0f} MB, metaspace {s.jvm_metaspace_used / 1e6:,.0f} MB; p50 "
                f"{s.p50 * 1000:,.0f} ms; errors {dict(errors) or 'none'}")
        result["errors"] = dict(errors)
        result["seconds"] = time.perf_counter() - started
    finally:
        server.stop()
    con = duck.connect(backend.s3_access, work / "duckdb-soak", duckdb_memory)
    try:
        exact = 0
        for t in tables:
            diff = fleet.server_differences(backend, con, t, fleet.table_model(t, shape.rounds))
            exact += diff == 0
            if diff:
                log(f"{backend.name}: soak: {t.name}: {diff} keys differ from the model")
        result["tables_exact"] = exact
        log(f"{backend.name}: soak: tables equal to the model: {exact} of {len(tables)}")
    finally:
        con.close()
    return result
