"""The soak section of docs/BENCHMARKS.md (bench/soak.py): the samples' table and the target's verdicts."""
from __future__ import annotations

from typing import Any

from bench.results import Run, ran_on

SOAK_START, SOAK_END = "<!-- soak:start -->", "<!-- soak:end -->"
RSS_TARGET = 0.10  # the RSS after the last chunk of syncs within this share of the RSS after the first
HEAP_TOLERANCE = 0.10  # the JVM heap after a full GC: no growth beyond this share (one GC's leftovers vary)
# threads and open files: no growth beyond the larger of these (the JVM's ~300 threads vary by a dozen between
# samples as Spark's and the JIT's come and go)
COUNT_TOLERANCE, COUNT_SHARE = 2, 0.05


def _rss(s: dict[str, Any]) -> int:
    return int(s["server_rss"] + s["jvm_rss"] + s["workers_rss"])


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f}"


def soak_targets(result: dict[str, Any]) -> list[tuple[str, bool | None]]:
    """(figure, met) per target, the first sample against the last; met None: not measured."""
    samples = result.get("samples", [])
    if len(samples) < 2:
        return [("fewer than two samples: nothing to compare", None)]
    first, last = samples[0], samples[-1]
    out: list[tuple[str, bool | None]] = []
    change = _rss(last) / _rss(first) - 1
    out.append((f"RSS of the server's process tree after the last {last['syncs'] - samples[-2]['syncs']:,} syncs "
                f"{_mb(_rss(last))} MB against {_mb(_rss(first))} MB after the first {first['syncs']:,} "
                f"({change:+.1%}; server {_mb(first['server_rss'])} → {_mb(last['server_rss'])}, JVM "
                f"{_mb(first['jvm_rss'])} → {_mb(last['jvm_rss'])}, Python workers {_mb(first['workers_rss'])} → "
                f"{_mb(last['workers_rss'])} MB; target within ±{RSS_TARGET:.0%})", abs(change) <= RSS_TARGET))
    for key, what in (("server_threads", "the server's threads"), ("jvm_threads", "the JVM's threads"),
                      ("server_fds", "the server's open files"), ("jvm_fds", "the JVM's open files"),
                      ("workers", "Python workers")):
        allowed = max(COUNT_TOLERANCE, int(first[key] * COUNT_SHARE))
        out.append((f"{what} {first[key]} → {last[key]} (target: no growth beyond {allowed}, the larger of "
                    f"{COUNT_TOLERANCE} and {COUNT_SHARE:.0%})", last[key] <= first[key] + allowed))
    if first["jvm_heap_used"] and last["jvm_heap_used"]:
        change = last["jvm_heap_used"] / first["jvm_heap_used"] - 1
        out.append((f"the driver JVM's heap used after a full GC {_mb(first['jvm_heap_used'])} → "
                    f"{_mb(last['jvm_heap_used'])} MB ({change:+.1%}), metaspace "
                    f"{_mb(first['jvm_metaspace_used'])} → {_mb(last['jvm_metaspace_used'])} MB (target: no growth "
                    f"beyond {HEAP_TOLERANCE:.0%})", change <= HEAP_TOLERANCE))
    else:
        out.append(("the driver JVM's heap: not read (no `jcmd` for its JDK)", None))
    if "errors" in result:  # a soak whose calls failed or whose tables differ is no soak of a working server
        errors = result["errors"]
        out.append((f"calls that failed: {sum(errors.values()):,}"
                    f"{' (' + ', '.join(f'{k} {v}' for k, v in sorted(errors.items())) + ')' if errors else ''} "
                    "(target: none)", not errors))
    if "tables_exact" in result:
        out.append((f"tables equal to the model at the end: {result['tables_exact']:,} of "
                    f"{result.get('shape', {}).get('tables', '?')} (target: all)",
                    result["tables_exact"] == result.get("shape", {}).get("tables")))
    return out


def _verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("met ✅" if met else "missed ❌")


def _samples(result: dict[str, Any]) -> list[str]:
    rows = ["| syncs | minutes | RSS MB: all (server / JVM / workers) | workers | threads (server / JVM) "
            "| open files (server / JVM) | JVM heap after GC MB (metaspace) | p50 / p95 ms | errors so far |",
            "|---:|---:|---|---:|---|---|---|---|---:|"]
    before = result.get("before")
    for s in ([before] if before else []) + result.get("samples", []):
        label = f"{s['syncs']:,}" if s["syncs"] else "0 (loaded)"
        latency = f"{s['p50'] * 1000:,.0f} / {s['p95'] * 1000:,.0f}" if s["syncs"] else ""
        rows.append(f"| {label} | {s['seconds'] / 60:.1f} | {_mb(_rss(s))} ({_mb(s['server_rss'])} / "
                    f"{_mb(s['jvm_rss'])} / {_mb(s['workers_rss'])}) | {s['workers']} | {s['server_threads']} / "
                    f"{s['jvm_threads']} | {s['server_fds']} / {s['jvm_fds']} | {_mb(s['jvm_heap_used'])} "
                    f"({_mb(s['jvm_metaspace_used'])}) | {latency} | {s['errors']} |")
    return rows


def soak_section(run: Run) -> list[str]:
    """The soak section, between markers so a soak-only run can replace it in an existing report."""
    if not run.soak:
        return []
    shape = next(iter(run.soak.values()))["shape"]
    lines = [SOAK_START, "## Soak: a server that runs for weeks", "",
             f"{shape['syncs']:,} syncs of {shape['sync_rows']:,} rows over {shape['tables']} tables of "
             f"{shape['rows']:,} rows (the fleet's tables and syncs, round after round), {shape['in_flight']} calls "
             f"in flight, against one `serve` process with the configuration's defaults. Every "
             f"{shape['sample_every']:,} syncs (the calls in flight drained first) the server's process tree is "
             "sampled: RSS of the server's Python process, its Spark JVM and Spark's Python workers; threads "
             "(`/proc/<pid>/task`) and open files (`/proc/<pid>/fd`) of the server and the JVM; then the JVM's heap "
             "and metaspace used right after a full GC (`jcmd GC.run`, `GC.heap_info`). Minutes count from the first "
             "sync; p50 / p95 are the chunk's calls (bench/soak.py).", ""]
    for backend, result in sorted(run.soak.items()):
        errors = ", ".join(f"{k} {v}" for k, v in sorted(result.get("errors", {}).items())) or "none"
        lines += [f"### Soak: {backend} {ran_on(run, result)}", "", *_samples(result), "",
                  f"Tables equal to the model at the end: {result.get('tables_exact', 0)} of {shape['tables']}; "
                  f"errors by kind: {errors}; {result.get('seconds', 0) / 60:.1f} minutes of syncs after "
                  f"{result.get('load_seconds', 0):.0f} s of initial loads.", "", "Targets:", "",
                  *[f"- {text}: {_verdict(met)}." for text, met in soak_targets(result)], ""]
    return [*lines, SOAK_END]
