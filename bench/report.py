"""docs/BENCHMARKS.md and its chart from a run's measurements (bench/notes.md is the hand-written analysis)."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.run import Measurement, Run

GIB = 2**30
MEMORY_LIMIT = 4 * 10**9
LOAD_TARGET, MERGE_TARGET, GROWTH_TARGET = 0.60, 1.5, 1.5
NOTES = Path(__file__).with_name("notes.md")


def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = "unknown"
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("pyspark", "pyarrow", "grpcio", "zstandard", "cryptography"))
    return [f"- CPU: {os.cpu_count()} × {cpu}; memory {memory:.0f} GiB; {platform.platform()}",
            f"- Python {platform.python_version()}; {java}; {versions}"]


def ratio(m: Measurement, run: Run) -> tuple[float | None, str, bool | None]:
    """(value, what it is, target met) for a measurement's comparison with its baseline."""
    if m.baseline_seconds is None or not m.seconds:
        return None, "", None
    if m.target == "load":
        value = m.baseline_seconds / m.seconds  # same rows: rows/s ratio
        return value, f"{value:.2f} of the raw decode's rows/s (target ≥ {LOAD_TARGET:.2f})", value >= LOAD_TARGET
    value = m.seconds / m.baseline_seconds
    return value, f"{value:.2f}× the in-process merge's time (target ≤ {MERGE_TARGET}×)", value <= MERGE_TARGET


def _table(run: Run, backend: str) -> list[str]:
    rows = ["| scenario | rows | plaintext MB | seconds | rows/s | MB/s | peak memory GiB (JVM / Python) | written MB "
            "| files written / rewritten | baseline s | ratio to baseline |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---|"]
    for m in run.measurements:
        if m.backend != backend:
            continue
        _value, text, met = ratio(m, run)
        mark = "" if met is None else (" ✅" if met else " ❌")
        rows.append(f"| {m.scenario} | {m.rows:,} | {m.plain_bytes / 1e6:,.0f} | {m.seconds:.1f} | "
                    f"{m.rows_per_second:,.0f} | {m.mb_per_second:.1f} | {m.peak_total / GIB:.2f} "
                    f"({m.peak_jvm / GIB:.2f} / {m.peak_python / GIB:.2f}) | {m.bytes_written / 1e6:,.0f} | "
                    f"{m.files_written} / {m.files_rewritten} | "
                    f"{'' if m.baseline_seconds is None else f'{m.baseline_seconds:.1f}'} | {text}{mark} |")
    return rows


def targets(run: Run) -> list[str]:
    out = []
    for backend in sorted({m.backend for m in run.measurements}):
        ms = [m for m in run.measurements if m.backend == backend]
        for m in ms:
            _value, text, met = ratio(m, run)
            if met is False:
                out.append(f"- {backend}, {m.scenario}: missed — {text}.")
        big = next((m for m in ms if m.scenario == "new keys into the big table"), None)
        small = next((m for m in ms if m.scenario == "new keys into the small table"), None)
        if big and small and small.seconds:
            growth = big.seconds / small.seconds
            verdict = "met" if growth <= GROWTH_TARGET else f"missed by {growth / GROWTH_TARGET - 1:.0%}"
            out.append(f"- {backend}: new keys into the {run.rows:,}-row table took {growth:.2f}× the time of the "
                       f"same rows into the {run.rows // 10:,}-row table (target ≤ {GROWTH_TARGET}×): {verdict}.")
        worst = max(ms, key=lambda m: m.peak_total)
        verdict = "met" if worst.peak_total < MEMORY_LIMIT else f"missed by {worst.peak_total / MEMORY_LIMIT - 1:.0%}"
        out.append(f"- {backend}: peak server memory {worst.peak_total / 1e9:.2f} GB ({worst.scenario}); "
                   f"target < 4 GB: {verdict}.")
    return out


def chart(run: Run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(m.scenario for m in run.measurements))
    backends = sorted({m.backend for m in run.measurements})
    series: list[tuple[str, dict[str, float], str]] = []  # (label, rows/s by scenario, colour)
    for backend, (server_colour, baseline_colour) in zip(backends, (("tab:blue", "lightsteelblue"),
                                                                    ("tab:orange", "navajowhite")), strict=False):
        mine = [m for m in run.measurements if m.backend == backend]
        series.append((f"server, {backend}", {m.scenario: m.rows_per_second for m in mine}, server_colour))
        series.append((f"baseline, {backend} (raw decode / in-process merge)",
                       {m.scenario: m.rows / m.baseline_seconds for m in mine if m.baseline_seconds}, baseline_colour))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(12, 5.5))
    for i, (label, by, colour) in enumerate(series):
        ax.bar([x + i * width for x in range(len(scenarios))], [by.get(s, 0) for s in scenarios], width,
               label=label, color=colour)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(scenarios))])
    ax.set_xticklabels(scenarios, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")  # merges run at thousands of rows/s, loads at hundreds of thousands
    ax.set_ylabel("rows per second (log scale)")
    ax.set_title(f"records-destination, {run.rows:,}-row tables, {os.cpu_count()} cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(run: Run, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    png = path.with_name("benchmarks.png")
    chart(run, png)
    lines = ["# Benchmarks", "",
             "Generated by `scripts/bench` (`python -m bench.run`); do not edit by hand — the analysis comes from "
             "`bench/notes.md`.", "",
             f"Run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))}, "
             f"{run.rows:,}-row tables.", "", "## Machine", "", *machine(), "",
             "## Method", "",
             "- The workload is generated before anything is measured: a 20-column table mixing every Fivetran "
             "DataType (key `id` LONG), written as the tester writes batch files (text values, null and unmodified "
             "markers; Parquet with binary as bytes), zstd then AES-256-CBC, about 100 MB of plaintext per file.",
             "- The server is `records-destination serve` in its own process (Spark local mode on all cores), called "
             "over gRPC one request at a time; a scenario's time is its RPC's wall time. Memory is the RSS of the "
             "server and all its child processes (the JVM, and the Python driver and Spark's Python workers), sampled "
             "every 100 ms; the peak is per scenario.",
             "- Written MB and files come from the table's `_files.json` before and after the request; rewritten files "
             "are the earlier version's files that were not carried into the new one.",
             "- Baselines run in the same process run, before the server, on the same files, and read and write "
             "the backend's own storage (the local disk, or the same S3 server): (a) the raw decode "
             "limit — decrypt, decompress, parse and cast, write Parquet with pyarrow, one process per core, no merge; "
             "(b) the same merge in one process with pyarrow alone — the table in memory from Parquet, the batch "
             "applied with vectorized Arrow, the whole table written back (bench/baselines.py).",
             "- Ratios: initial loads compare rows/s with (a) (target ≥ 0.6); merges compare time with (b) (target "
             "≤ 1.5×); new keys into the big table compare with the same rows into the table a tenth its size "
             "(target ≤ 1.5×); memory must stay under 4 GB.", "",
             "![rows per second by scenario](benchmarks.png)", "", "## Targets", "", *targets(run), ""]
    for backend in sorted({m.backend for m in run.measurements}):
        lines += [f"## Results: {backend}", "", *_table(run, backend), ""]
    backends = sorted(run.baselines)
    lines += ["## Baselines (seconds)", "", "| baseline | " + " | ".join(backends) + " |",
              "|---|" + "---:|" * len(backends),
              *[f"| {k} | " + " | ".join(f"{run.baselines[b].get(k, 0):.1f}" for b in backends) + " |"
                for k in (run.baselines[backends[0]] if backends else {})], ""]
    if NOTES.exists():
        lines += [NOTES.read_text().rstrip(), ""]
    path.write_text("\n".join(lines))

