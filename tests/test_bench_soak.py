"""The soak benchmark's parts its figures rest on (bench/soak.py, bench/soak_report.py): the order syncs go in,
the JVM heap read from `jcmd`, the sampled counts of a real process and the report's verdicts. No timing is
asserted."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench import fleet, soak
from bench.report import FLEET_START, merge_sections
from bench.results import Run
from bench.soak_report import SOAK_END, SOAK_START, soak_targets

pytestmark = pytest.mark.unit

G1 = """12345:
 garbage-first heap   total 262144K, used 23456K [0x0000000700000000, 0x0000000800000000)
  region size 1024K, 21 young (21504K), 3 survivors (3072K)
 Metaspace       used 45678K, committed 46080K, reserved 1114112K
  class space    used 5678K, committed 5888K, reserved 1048576K
"""
PARALLEL = """678:
 PSYoungGen      total 76288K, used 2621K [0x00000007ab000000, 0x00000007b0500000, 0x0000000800000000)
  eden space 65536K, 4% used [0x00000007ab000000,0x00000007ab28f5c8,0x00000007af000000)
  from space 10752K, 0% used [0x00000007afa80000,0x00000007afa80000,0x00000007b0500000)
 ParOldGen       total 175104K, used 1000K [0x0000000701000000, 0x000000070bb00000, 0x00000007ab000000)
  object space 175104K, 0% used [0x0000000701000000,0x0000000701000000,0x000000070bb00000)
 Metaspace       used 3200K, committed 3456K, reserved 1056768K
  class space    used 290K, committed 384K, reserved 1048576K
"""


def test_heap_info_gives_the_heap_and_metaspace_used_for_one_heap_or_generations() -> None:
    assert soak.parse_heap_info(G1) == (23456 * 1024, 45678 * 1024)
    assert soak.parse_heap_info(PARALLEL) == ((2621 + 1000) * 1024, 3200 * 1024)
    assert soak.parse_heap_info("678:\nCommand failed\n") == (0, 0)


def test_syncs_go_round_after_round_in_chunks_and_a_tables_syncs_stay_in_order() -> None:
    shape = soak.SoakShape(tables=3, syncs=12, in_flight=2, rows=100, sync_rows=10, sample_every=5)
    assert shape.rounds == 4 and shape.fleet().total_rounds == 4 and shape.fleet().levels == (2,)
    tables = [fleet.TableSyncs(f"t{i}", None, [[r] for r in range(shape.rounds)])  # type: ignore[arg-type, misc]
              for i in range(3)]
    order = soak.calls(tables, shape.rounds)
    assert [(t.name, r) for t, r in order[:4]] == [("t0", 0), ("t1", 0), ("t2", 0), ("t0", 1)]
    parts = soak.chunks(order, shape.sample_every)
    assert [len(c) for c in parts] == [5, 5, 2] and [c for part in parts for c in part] == order
    sent: list[tuple[str, int]] = []
    active: set[str] = set()
    lock = threading.Lock()

    def send(t: fleet.TableSyncs, files: list[Any]) -> str | None:
        with lock:
            assert t.name not in active  # never two syncs of one table at once
            active.add(t.name)
        time.sleep(0.01)
        with lock:
            active.discard(t.name)
            sent.append((t.name, files[0]))
        return None

    for part in parts:
        latencies, errors, _ = fleet.run_calls(shape.in_flight, part, send)
        assert len(latencies) == len(part) and not errors
    for t in tables:  # each table's syncs in order
        assert [r for name, r in sent if name == t.name] == list(range(shape.rounds))


def test_a_processes_threads_and_open_files_are_counted_from_proc() -> None:
    """A child that starts 3 more threads and opens 5 more files is counted with them (the oracle: what it did)."""
    script = ("import threading, time, sys\n"
              "files = [open('/dev/null') for _ in range(5)]\n"
              "stop = threading.Event()\n"
              "ts = [threading.Thread(target=stop.wait) for _ in range(3)]\n"
              "[t.start() for t in ts]\n"
              "print('ready', flush=True)\n"
              "sys.stdin.readline(); stop.set()\n")
    base = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.readline()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    busy = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for p in (base, busy):
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        a, b = soak.Tree.of(base.pid), soak.Tree.of(busy.pid)
        assert soak._count(b.server, "task") - soak._count(a.server, "task") == 3
        assert soak._count(b.server, "fd") - soak._count(a.server, "fd") == 5
        assert soak._count(None, "fd") == 0 and a.jvm is None and a.workers == []
        assert soak._rss(a.server) > 0
    finally:
        for p in (base, busy):
            p.communicate("\n", timeout=30)


def _sample(syncs: int, rss: int, threads: int = 40, heap: int = 100 * 10**6) -> dict[str, Any]:
    return {"syncs": syncs, "seconds": syncs / 10, "server_rss": rss, "jvm_rss": 2 * rss, "workers_rss": rss,
            "workers": 2, "server_threads": threads, "jvm_threads": 90, "server_fds": 30, "jvm_fds": 400,
            "jvm_heap_used": heap, "jvm_metaspace_used": 80 * 10**6, "errors": 0, "p50": 0.3, "p95": 0.5}


def test_soak_targets_compare_the_last_sample_with_the_first() -> None:
    flat = {"samples": [_sample(1000, 100 * 10**6), _sample(2000, 120 * 10**6), _sample(3000, 108 * 10**6)]}
    verdicts = soak_targets(flat)
    assert all(met for _, met in verdicts), verdicts  # +8 % RSS; counts and heap unchanged
    assert "+8.0%" in verdicts[0][0] and "after the last 1,000 syncs" in verdicts[0][0]
    grown = {"samples": [_sample(1000, 100 * 10**6), _sample(2000, 111 * 10**6, threads=43, heap=115 * 10**6)]}
    verdicts = soak_targets(grown)  # RSS +11 %, the server's threads +3, the heap +15 %: missed; the rest flat
    prefixes = ["RSS of", "the server's threads 40 → 43", "the JVM's threads 90 → 90", "the server's open files 30",
                "the JVM's open files 400", "Python workers 2 → 2", "the driver JVM's heap used after a full GC 100 → 115"]
    assert all(text.startswith(p) for (text, _), p in zip(verdicts, prefixes, strict=True)), verdicts
    assert [met for _, met in verdicts] == [False, False, True, True, True, True, False]
    noisy = {"samples": [_sample(1000, 100 * 10**6), {**_sample(2000, 100 * 10**6), "jvm_threads": 94}]}
    assert soak_targets(noisy)[2][1] is True  # the JVM's 90 threads may vary by 4 (5 %)
    noisy["samples"][1]["jvm_threads"] = 95
    assert soak_targets(noisy)[2][1] is False
    assert [ok for _, ok in soak_targets({"samples": [_sample(1000, 10)]})] == [None]
    failed = {**flat, "errors": {"gRPC UNAVAILABLE": 2}, "tables_exact": 199, "shape": {"tables": 200}}
    assert [met for _, met in soak_targets(failed)][-2:] == [False, False]
    clean = {**flat, "errors": {}, "tables_exact": 200, "shape": {"tables": 200}}
    assert all(met for _, met in soak_targets(clean))


def test_a_soak_run_writes_its_section_and_leaves_the_fleets_and_the_rest(tmp_path: Path) -> None:
    shape = {"tables": 2, "syncs": 4, "in_flight": 1, "rows": 10, "sync_rows": 5, "sample_every": 2}
    run = Run([0], soak={"local": {"shape": shape, "before": _sample(0, 90 * 10**6),
                                   "samples": [_sample(2, 100 * 10**6), _sample(4, 101 * 10**6)],
                                   "errors": {}, "tables_exact": 2, "seconds": 1.0, "load_seconds": 1.0}})
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(f"# Benchmarks\n\nkept\n\n{FLEET_START}\nfleet figures\n<!-- fleet:end -->\n\n## Analysis\n\nnotes\n")
    merge_sections(run, report)
    merge_sections(run, report)  # once, in place
    text = report.read_text()
    assert text.count(SOAK_START) == 1 and "fleet figures" in text and text.endswith("## Analysis\n\nnotes\n")
    section = text[text.index(SOAK_START):text.index(SOAK_END)]
    assert "| 0 (loaded) |" in section and "| 4 |" in section and "2 of 2" in section and "met ✅" in section
    assert os.linesep not in section.replace("\n", "") and "missed" not in section
