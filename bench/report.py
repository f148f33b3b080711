"""docs/BENCHMARKS.md's results and its chart from a run's measurements: the part between the results markers;
the page's manual and analysis around it are hand-written and kept."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.results import Measurement, Run, pass_key, passed_fields, ran_on
from bench.scenarios import SECTIONS
from bench.soak_report import SOAK_END, SOAK_START, soak_section
from bench.steady_report import STEADY_END, STEADY_START, steady_section
from destination.on_disk.options import REFERENCING, default_layout

GIB = 2**30
MEMORY_LIMIT = 4 * 10**9
LOAD_TARGET, MERGE_TARGET, GROWTH_TARGET = 0.60, 1.5, 1.2  # ≥ of the raw decode; ≤ pyarrow merge; ≤ 1M-row table
DUCKDB_UNIFORM_TARGET, DUCKDB_CLUSTERED_TARGET = 1.0, 0.2  # ≤ DuckDB's full-rewrite merge time
REWRITE_TARGET, STORED_TARGET, SMALL_SYNCS_TARGET = 0.05, 1.3, 1.0
CLUSTERED_TARGET_ROWS = 100_000_000  # the clustered shares and times are targets for tables of this size
RESULTS_START, RESULTS_END = "<!-- results:start -->", "<!-- results:end -->"


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
    packages = ("pyspark", "pyarrow", "duckdb", "grpcio", "zstandard", "cryptography")
    versions = ", ".join(f"{p} {_version(p)}" for p in packages)
    return [f"- CPU: {os.cpu_count()} × {cpu}; memory {memory:.0f} GiB; {platform.platform()}",
            f"- Python {platform.python_version()}; {java}; {versions}"]


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _mark(met: bool | None) -> str:
    return "" if met is None else (" ✅" if met else " ❌")


def _verdict(met: bool) -> str:
    return "met ✅" if met else "missed ❌"


def ratio(m: Measurement, run: Run) -> tuple[float | None, str, bool | None]:
    """(value, what it is, target met) for a measurement's comparison with its pyarrow baseline."""
    if m.baseline_seconds is None or not m.seconds:
        return None, "", None
    if m.target == "load":
        value = m.baseline_seconds / m.seconds  # same rows: rows/s ratio
        return value, f"{value:.2f} of the raw decode's rows/s (target ≥ {LOAD_TARGET:.2f})", value >= LOAD_TARGET
    value = m.seconds / m.baseline_seconds
    return value, f"{value:.2f}× the in-process merge (target ≤ {MERGE_TARGET}×)", value <= MERGE_TARGET


def duckdb_ratio(m: Measurement) -> tuple[float | None, float]:
    """(server time ÷ DuckDB's, its target) where DuckDB merged the same change."""
    if m.duckdb_seconds is None or not m.duckdb_seconds:
        return None, 0.0
    target = DUCKDB_CLUSTERED_TARGET if m.group == "clustered" else DUCKDB_UNIFORM_TARGET
    return m.seconds / m.duckdb_seconds, target


def rewritten_share(m: Measurement) -> float:
    return m.bytes_rewritten / m.table_bytes_before if m.table_bytes_before else 0.0


def passes(run: Run) -> list[tuple[int, str]]:
    return sorted({(m.scale, m.backend) for m in run.measurements})


def _table(run: Run, scale: int, backend: str) -> list[str]:
    rows = ["| scenario | rows | plaintext MB | seconds | rows/s | peak memory GiB (JVM / Python) | written MB "
            "| write amplification | files written / rewritten / in table | rewritten MB (share of table) | pyarrow s "
            "| ratio to pyarrow | DuckDB s | ratio to DuckDB |",
            "|---|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---|---:|---|"]
    for m in run.measurements:
        if (m.scale, m.backend) != (scale, backend):
            continue
        _value, text, met = ratio(m, run)
        duck, duck_target = duckdb_ratio(m)
        duck_text = "" if duck is None else f"{duck:.2f}× (target ≤ {duck_target}×){_mark(duck <= duck_target)}"
        memory = (f"{m.peak_total / GIB:.2f} ({m.peak_jvm / GIB:.2f} / {m.peak_python / GIB:.2f})" if m.peak_total
                  else "(the benchmark's read)")
        rows.append(f"| {m.scenario} | {m.rows:,} | {m.plain_bytes / 1e6:,.0f} | {m.seconds:.1f} | "
                    f"{m.rows_per_second:,.0f} | {memory} | {m.bytes_written / 1e6:,.0f} | {_amplification(m)} | "
                    f"{m.files_written} / {m.files_rewritten} / {m.files_after} | "
                    f"{m.bytes_rewritten / 1e6:,.1f}{'' if m.target == 'load' else f' ({rewritten_share(m):.1%})'} | "
                    f"{'' if m.baseline_seconds is None else f'{m.baseline_seconds:.1f}'} | {text}{_mark(met)} | "
                    f"{'' if m.duckdb_seconds is None else f'{m.duckdb_seconds:.1f}'} | {duck_text} |")
    return rows


def _amplification(m: Measurement) -> str:
    value = m.write_amplification
    return "" if value is None else f"{value:.1f}"


def _clustered(ms: list[Measurement], where: str, layout: str, judge_stored: bool) -> list[str]:
    out = []
    syncs = [m for m in ms if m.group == "clustered" and m.scenario.startswith("clustered ")]
    for kind in ("append", "upsert", "update", "delete"):
        mine = [m for m in syncs if m.scenario.startswith(f"clustered {kind} ")]
        if not mine:
            continue
        if kind == "append":
            rewritten = [m.files_rewritten for m in mine]
            out.append(f"- {where}: clustered appends rewrote {', '.join(map(str, rewritten))} files "
                       f"(target: none): {_verdict(max(rewritten) == 0)}.")
        else:
            shares = [rewritten_share(m) for m in mine]
            out.append(f"- {where}: clustered {kind}s rewrote {', '.join(f'{s:.1%}' for s in shares)} of the table's "
                       f"bytes (target ≤ {REWRITE_TARGET:.0%}): {_at_scale(max(shares) <= REWRITE_TARGET, mine[0])}.")
        for m in mine:
            duck, target = duckdb_ratio(m)
            if duck is not None:
                out.append(f"- {where}: {m.scenario}: {m.seconds:.1f} s, {duck:.2f}× DuckDB's full-rewrite merge "
                           f"({m.duckdb_seconds:.1f} s; target ≤ {target}×): {_at_scale(duck <= target, m)}.")
    stored = next((m for m in reversed(syncs) if m.stored_bytes), None)
    if stored is not None and stored.table_bytes_after:
        value = stored.stored_bytes / stored.table_bytes_after
        out.append(f"- {where}: bytes stored under the table's folder after {len(syncs)} clustered syncs: "
                   f"{stored.stored_bytes / 1e6:,.0f} MB, {value:.2f}× the latest version's "
                   f"{stored.table_bytes_after / 1e6:,.0f} MB of data ({layout}; target ≤ {STORED_TARGET}× "
                   f"in the referencing layout): "
                   f"{_verdict(value <= STORED_TARGET) if judge_stored else 'no target here'}.")
    return out


def _at_scale(met: bool, m: Measurement) -> str:
    """A clustered target's verdict, given at the size it is set for; below it the figure shows the trend."""
    if m.scale >= CLUSTERED_TARGET_ROWS:
        return _verdict(met)
    return f"the target is set at {CLUSTERED_TARGET_ROWS:,} rows ({'within it' if met else 'above it'} here)"


def _layout_used(run: Run, key: str, backend: str) -> str:
    """The layout the server wrote the pass's tables in: the one passed, unless it ignored it, else its default.
    The stored-bytes target is the referencing layout's; the complete layout stores a copy per retained version
    by design (on local disk as hard links)."""
    settings = run.settings.get(key, {})
    passed = settings.get("configuration", {}).get("layout")
    if passed is None or "layout" in settings.get("ignored", []):
        return default_layout(backend == "s3")
    return str(passed)


def _small_syncs(ms: list[Measurement], where: str) -> list[str]:
    mine = [m for m in ms if m.group == "small_syncs"]
    out = []
    built = next((m for m in mine if m.scenario.endswith("small syncs")), None)
    once = next((m for m in mine if m.scenario.startswith("the same rows loaded at once")), None)
    if built and once:
        out.append(f"- {where}: {built.scenario}: {built.seconds:.1f} s, {built.files_after} data files; the same "
                   f"rows loaded at once: {once.seconds:.1f} s, {once.files_after} data files.")
    for action, label in (("full read", "a full read"), ("upsert into", "an upsert")):
        pair = [m for m in mine if m.scenario.startswith(action)]
        if len(pair) == 2 and pair[1].seconds:
            value = pair[0].seconds / pair[1].seconds
            out.append(f"- {where}: {label} of the table built by small syncs: {pair[0].seconds:.1f} s, "
                       f"{value:.2f}× the table loaded at once ({pair[1].seconds:.1f} s; target ≤ "
                       f"{SMALL_SYNCS_TARGET}×): {_verdict(value <= SMALL_SYNCS_TARGET)}.")
    return out


def targets(run: Run) -> list[str]:
    """Every figure with a target, met or missed, per scale and backend."""
    out = []
    for scale, backend in passes(run):
        ms = [m for m in run.measurements if (m.scale, m.backend) == (scale, backend)]
        where = pass_key(backend, scale)
        worst = max(ms, key=lambda m: m.peak_total)
        out.append(f"- {where}: peak server memory {worst.peak_total / 1e9:.2f} GB ({worst.scenario}; target < 4 GB): "
                   f"{_verdict(worst.peak_total < MEMORY_LIMIT)}.")
        for m in ms:
            _value, text, met = ratio(m, run)
            if met is not None:
                out.append(f"- {where}: {m.scenario}: {text}: {_verdict(met)}.")
            duck, target = duckdb_ratio(m)
            if duck is not None and m.group == "uniform":
                out.append(f"- {where}: {m.scenario}: {m.seconds:.1f} s, {duck:.2f}× DuckDB's merge "
                           f"({m.duckdb_seconds:.1f} s; target ≤ {target}× at 10M rows): {_verdict(duck <= target)}.")
        big = next((m for m in ms if m.scenario == "new keys into the big table"), None)
        small = next((m for m in ms if m.scenario == "new keys into the small table"), None)
        if big and small and small.seconds:
            growth = big.seconds / small.seconds
            out.append(f"- {where}: new keys into the big table took {growth:.2f}× the time of the same rows into the "
                       f"{run.shape.get('small_rows', scale // 10):,}-row table ({big.seconds:.1f} s against "
                       f"{small.seconds:.1f} s; target ≤ {GROWTH_TARGET}×): {_verdict(growth <= GROWTH_TARGET)}.")
        out += _clustered(ms, where, _layout(run, where), _layout_used(run, where, backend) == REFERENCING)
        out += _small_syncs(ms, where)
    return out


def chart(run: Run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charted = [m for m in run.measurements if m.peak_total and not m.scenario.startswith("clustered ")]
    scenarios = list(dict.fromkeys(m.scenario for m in charted))
    series: list[tuple[str, dict[str, float], str]] = []  # (label, rows/s by scenario, colour)
    colours = (("tab:blue", "lightsteelblue"), ("tab:orange", "navajowhite"), ("tab:green", "palegreen"),
               ("tab:red", "mistyrose"), ("tab:purple", "thistle"))
    for (scale, backend), (server_colour, baseline_colour) in zip(passes(run), colours, strict=False):
        mine = [m for m in charted if (m.scale, m.backend) == (scale, backend)]
        series.append((f"server, {backend}, {scale:,}", {m.scenario: m.rows_per_second for m in mine}, server_colour))
        series.append((f"baseline, {backend}, {scale:,} (raw decode / in-process merge)",
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
    ax.set_title(f"records-destination, {', '.join(f'{n:,}' for n in run.scales)}-row tables, {os.cpu_count()} cores")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _layout(run: Run, key: str) -> str:
    settings = run.settings.get(key, {})
    layout = settings.get("configuration", {}).get("layout")
    if layout is None:
        return "layout: the server default"
    if "layout" in settings.get("ignored", []):
        return f"layout: the server default (it ignored `layout` = {layout}, unknown to it)"
    return f"layout: {layout}"


def _settings(run: Run) -> str:
    shape = run.shape
    return ("Scenario groups: "
            f"{', '.join(shape.get('groups', [])) or 'all'}; changes of {shape.get('change_fraction', 0.01):.0%} of the "
            f"table; {shape.get('clustered_syncs', 20)} clustered syncs; {shape.get('small_syncs', 1000):,} small syncs "
            f"of {shape.get('small_sync_rows', 10_000):,} rows.")


METHOD = [
    "- The workload is generated before anything is measured (and kept in a cache between runs, named by a digest of "
    "the generator and of every file's parameters): a 20-column table mixing every Fivetran DataType (key `id` LONG), "
    "written as the tester writes batch files (text values, null and unmodified markers; Parquet with binary as "
    "bytes), zstd then AES-256-CBC, about 100 MB of plaintext per file. The initial load's keys are increasing ids.",
    "- Uniform changes pick random keys across the table: an upsert (half new keys, half existing), an update that "
    "leaves most columns unmodified, a delete, each 1 % of the rows. Clustered syncs follow keys that grow: in turn an "
    "append (new keys above the maximum), an upsert (80 % new keys above the maximum, 20 % among the most recent 5 % "
    "of live keys), an update and a delete (among the most recent 5 %).",
    "- The server is `records-destination serve` in its own process (Spark local mode on all cores), called over "
    "gRPC one request at a time; a scenario's time is its RPC's wall time. Memory is the RSS of the server and all "
    "its child processes (the JVM, and the Python driver and Spark's Python workers), sampled every 100 ms; the peak "
    "is per scenario.",
    "- Written and rewritten files come from the table's `_files.json` before and after the request: rewritten files "
    "are the earlier version's files not carried into the new one, and their share is of the earlier version's data "
    "bytes. Bytes stored are everything under the table's folder (all versions, change files and metadata; on local "
    "disk a hard-linked file counts once) against the latest version's data bytes.",
    "- Baselines read and write the backend's own storage (the local disk, or the same S3 server): (a) the raw decode "
    "limit — decrypt, decompress, parse and cast, write Parquet with pyarrow, one process per core, no merge; "
    "(b) the same merge in one process with pyarrow alone — the table in memory from Parquet, the batch applied with "
    "vectorized Arrow, the whole table written back (bench/baselines.py; run before the server, at the scales where "
    "the uniform changes run); (c) DuckDB, just before the server's request: it reads the data files of the same "
    "version the request starts from (its `_manifest`), reads the batch files as CSV (decrypted and decompressed "
    "first, timed), applies the same change in one SQL statement and writes the whole table back as Parquet, on S3 "
    "through DuckDB's httpfs (bench/duck.py says where its semantics differ).",
    "- A full read is DuckDB reading every column of every data file of the version.",
    f"- Targets: memory under 4 GB; initial loads ≥ {LOAD_TARGET} of (a)'s rows/s; uniform upsert, update and "
    f"delete ≤ {DUCKDB_UNIFORM_TARGET}× (c) at 10M rows; clustered syncs rewrite no file for appends and at most "
    f"{REWRITE_TARGET:.0%} of the table's bytes otherwise, in ≤ {DUCKDB_CLUSTERED_TARGET}× (c), at "
    f"{CLUSTERED_TARGET_ROWS // 1_000_000}M rows; new keys into the "
    f"big table ≤ {GROWTH_TARGET}× the same keys into the small table; bytes stored after the clustered syncs ≤ "
    f"{STORED_TARGET}× the table's (referencing layout); a table built by small syncs reads and takes an upsert in "
    f"≤ {SMALL_SYNCS_TARGET}× the time of the same rows loaded at once; merges ≤ {MERGE_TARGET}× (b).",
]


def write_report(run: Run, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    png = path.with_name("benchmarks.png")
    chart(run, png)
    lines = ["Generated by `scripts/bench` (`python -m bench.run`): each run rewrites what lies between the results "
             "markers, each section's heading naming the code and the date of its figures; the rest of this page is "
             "hand-written.", "",
             f"Run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))}, "
             f"{', '.join(f'{n:,}' for n in run.scales)}-row tables. {_settings(run)}", "",
             "## Machine", "", *machine(), "", "## Method", "", *METHOD, "",
             "![rows per second by scenario](benchmarks.png)", "", "## Targets", "", *targets(run), ""]
    for scale, backend in passes(run):
        key = pass_key(backend, scale)
        lines += [f"## Results: {key} {ran_on(run, run.settings.get(key))}", "",
                  f"Configuration fields passed to the server: {passed_fields(run, key)}.", "",
                  *_table(run, scale, backend), ""]
    lines += [*fleet_section(run), ""] if run.fleet else []
    lines += [*soak_section(run), ""] if run.soak else []
    lines += [*steady_section(run), ""] if run.steady else []
    keys = sorted(run.baselines)
    names = list(dict.fromkeys(name for k in keys for name in run.baselines[k]))
    lines += ["## Baselines (seconds)", "", "| baseline | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys),
              *[f"| {name} | " + " | ".join(f"{run.baselines[k][name]:.1f}" if name in run.baselines[k] else ""
                                            for k in keys) + " |" for name in names], ""]
    path.write_text(splice_results(path.read_text() if path.exists() else "", lines))


def splice_results(text: str, lines: list[str]) -> str:
    """`text` with the results between its markers replaced by `lines` (the hand-written rest kept); a page without
    the markers gets them, with the results, at its end."""
    section = "\n".join([RESULTS_START, *lines, RESULTS_END])
    if RESULTS_START in text and RESULTS_END in text:
        before, rest = text.split(RESULTS_START, 1)
        return before + section + rest.split(RESULTS_END, 1)[1]
    return (text.rstrip("\n") + "\n\n" if text.strip() else "# Benchmarks\n\n") + section + "\n"


# ---- the fleet section (bench/fleet.py) ----------------------------------------------------------------------

FLEET_DUCKDB_TARGET = 1.0  # p50 at 1 in flight ≤ this × DuckDB's p50 for the same sync
# at 8 in flight: calls/s ≥ this × DuckDB's calls/s applying the same syncs one after another, with p95 ≤ seconds
FLEET_CALLS_TARGET, FLEET_P95_TARGET = 2.0, 1.0
FLEET_S3_TARGET = 2.0  # S3's p50 at 1 in flight ≤ this × local's
FLEET_START, FLEET_END = "<!-- fleet:start -->", "<!-- fleet:end -->"
FLEET_PHASE_ORDER = ("load", "decode", "spark_scheduling", "tasks", "spark_results", "commit", "metadata",
                     "change_files", "delta", "iceberg", "catalog", "retention", "other", "seconds")


def _level(result: dict[str, Any], in_flight: int) -> dict[str, Any] | None:
    return next((lv for lv in result.get("levels", []) if lv["in_flight"] == in_flight), None)


def fleet_targets(fleet: dict[str, Any]) -> list[str]:
    """The issue's targets, each met or missed from the measured figures (or not measured)."""
    out = []
    for backend, result in sorted(fleet.items()):
        one, eight, duck = _level(result, 1), _level(result, 8), result.get("duckdb", {}).get("p50")
        if one is not None and duck:
            value = one["p50"] / duck
            out.append(f"- {backend}: WriteBatch p50 at 1 in flight {one['p50'] * 1000:,.0f} ms, {value:.2f}× DuckDB's "
                       f"p50 for the same syncs ({duck * 1000:,.0f} ms; target ≤ {FLEET_DUCKDB_TARGET}×): "
                       f"{_verdict(value <= FLEET_DUCKDB_TARGET)}.")
        duck_rate = _sequential_rate(result.get("duckdb", {}))
        if eight is not None and duck_rate:
            met = eight["calls_per_second"] >= FLEET_CALLS_TARGET * duck_rate and eight["p95"] <= FLEET_P95_TARGET
            out.append(f"- {backend}: at 8 in flight {eight['calls_per_second']:.1f} calls/s, "
                       f"{eight['calls_per_second'] / duck_rate:.2f}× DuckDB's {duck_rate:.1f} calls/s one after "
                       f"another, with p95 {eight['p95'] * 1000:,.0f} ms (target ≥ {FLEET_CALLS_TARGET:.0f}× with p95 ≤ "
                       f"{FLEET_P95_TARGET * 1000:,.0f} ms): {_verdict(met)}.")
        else:
            out.append(f"- {backend}: 8 in flight: not measured in this run.")
    local, s3 = _level(fleet.get("local", {}), 1), _level(fleet.get("s3", {}), 1)
    if local is not None and s3 is not None and local["p50"]:
        value = s3["p50"] / local["p50"]
        out.append(f"- S3's p50 at 1 in flight {s3['p50'] * 1000:,.0f} ms, {value:.2f}× local's "
                   f"({local['p50'] * 1000:,.0f} ms; target ≤ {FLEET_S3_TARGET}×): {_verdict(value <= FLEET_S3_TARGET)}.")
    return out


def _written(level: dict[str, Any]) -> str:
    """A level's data bytes written and write amplification (not recorded by runs before they were measured)."""
    if not level.get("bytes_written"):
        return "not recorded"
    return f"{level['bytes_written'] / 1e6:,.1f} ({level['write_amplification']:.1f})"


def _sequential_rate(duck: dict[str, Any]) -> float:
    """DuckDB's calls/s applying the syncs one after another: its syncs over their summed seconds (runs that
    recorded only percentiles: one over the p50)."""
    if duck.get("seconds"):
        return float(duck["count"] / duck["seconds"])
    return 1 / duck["p50"] if duck.get("p50") else 0.0


def _fleet_backend(backend: str, result: dict[str, Any]) -> list[str]:
    tables = result["shape"]["tables"]
    rows = ["| calls in flight | calls | p50 ms | p95 ms | p99 ms | calls/s | rows/s | data MB written (write "
            "amplification) | server RSS before → after MB (JVM after) | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for lv in result.get("levels", []):
        errors = ", ".join(f"{k} {v}" for k, v in sorted(lv["errors"].items())) or "none"
        rows.append(f"| {lv['in_flight']} | {lv['calls']:,} | {lv['p50'] * 1000:,.0f} | {lv['p95'] * 1000:,.0f} | "
                    f"{lv['p99'] * 1000:,.0f} | {lv['calls_per_second']:.1f} | {lv['rows_per_second']:,.0f} | "
                    f"{_written(lv)} | {lv['rss_before'] / 1e6:,.0f} → {lv['rss_after'] / 1e6:,.0f} "
                    f"({lv['jvm_after'] / 1e6:,.0f}) | "
                    f"{errors} |")
    duck, floor = result.get("duckdb", {}), result.get("floor", {})
    rows += ["", f"Baselines, one sync at a time: DuckDB (merge and rewrite the whole table file) p50 "
             f"{duck.get('p50', 0) * 1000:,.0f} ms, p95 {duck.get('p95', 0) * 1000:,.0f} ms over {duck.get('count', 0):,} "
             f"syncs; the floor (decode, one Parquet and three small JSON files, each fsynced) p50 "
             f"{floor.get('p50', 0) * 1000:,.0f} ms, p95 {floor.get('p95', 0) * 1000:,.0f} ms. Tables equal to the "
             f"model at the end: the server's {result.get('server_tables_exact', 0)} of {tables}, DuckDB's "
             f"{result.get('duckdb_tables_exact', 0)} of {tables}. Initial loads: {result.get('load_seconds', 0):.1f} s.",
             "", "Where a WriteBatch's time goes (the server's own `phases`, mean / median ms per request; `other`: "
             "the request's time no phase covers; `seconds`: the request's whole time in the server):", ""]
    levels = result.get("levels", [])
    rows += ["| phase | " + " | ".join(f"{lv['in_flight']} in flight" for lv in levels) + " |",
             "|---|" + "---:|" * len(levels)]
    names = [n for n in FLEET_PHASE_ORDER if any(n in lv["phases"] for lv in levels)]
    names += sorted({n for lv in levels for n in lv["phases"]} - set(names))
    for name in names:
        cells = [f"{lv['phases'][name]['mean'] * 1000:,.1f} / {lv['phases'][name]['median'] * 1000:,.1f}"
                 if name in lv["phases"] else "" for lv in levels]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def fleet_section(run: Run) -> list[str]:
    """The fleet section, between markers so a fleet-only run can replace it in an existing report."""
    if not run.fleet:
        return []
    shape = next(iter(run.fleet.values()))["shape"]
    lines = [FLEET_START, "## Fleet: many small syncs across many tables", "",
             f"{shape['tables']} tables of {shape['rows']:,} rows (the 20-column table), {shape['rounds']} rounds per "
             f"level of one {shape['sync_rows']:,}-row WriteBatch per table (a replace file of mostly new keys and "
             "some updates of recent keys; an update file every other round, a delete file every third), at "
             f"{', '.join(str(n) for n in shape['levels'])} calls in flight (a table's syncs in order); the server "
             "is `serve` in its own process, with the configuration's defaults. Latency is each call's wall time at "
             "the client; RSS is the server's process and all its children (its Spark JVM and Python workers) after "
             "the level (bench/fleet.py).", "",
             f"### Fleet targets {' '.join(sorted({ran_on(run, r) for r in run.fleet.values()}))}", "",
             *fleet_targets(run.fleet), ""]
    for backend, result in sorted(run.fleet.items()):
        lines += [f"### Fleet: {backend} {ran_on(run, result)}", "", *_fleet_backend(backend, result), ""]
    return [*lines, FLEET_END]


def merge_fleet_section(run: Run, path: Path) -> None:
    """Write the fleet section into the report at `path`, leaving its other sections as they are (`merge_section`)."""
    merge_section(fleet_section(run), FLEET_START, FLEET_END, path)


def merge_sections(run: Run, path: Path) -> None:
    """The fleet, soak and steady-state sections of a run that measured them, each merged into the report at `path`."""
    if run.fleet:
        merge_fleet_section(run, path)
    if run.soak:
        merge_section(soak_section(run), SOAK_START, SOAK_END, path)
    if run.steady:
        merge_section(steady_section(run), STEADY_START, STEADY_END, path)


UNIFORM_START, UNIFORM_END = "<!-- uniform:start -->", "<!-- uniform:end -->"
UNIFORM_GROUP = "uniform"


def uniform_section(run: Run) -> list[str]:
    """The uniform changes' section, between markers, so a run of that group alone (the 1 % upsert, update and
    delete spread over the whole table) replaces it and leaves the last full run's tables as they are: per backend
    and scale, each change's time against DuckDB's and the in-process pyarrow merge, with the bytes it rewrote."""
    lines = [UNIFORM_START, "## Uniform changes: the latest run of this group", "",
             f"Run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))} on the code at "
             f"`{run.shape.get('code') or 'not recorded'}` (`scripts/bench --scenarios uniform`): a 1 % change spread "
             "uniformly over the big table, so every stored file is rewritten; DuckDB merged the same change just "
             f"before, in the same pass. Target: at most {DUCKDB_UNIFORM_TARGET}× DuckDB's time. These figures are newer "
             "than the full run's tables above.", ""]
    changes = [m for m in run.measurements if m.group == UNIFORM_GROUP]
    for scale, backend in sorted({(m.scale, m.backend) for m in changes}):
        lines += [f"### Uniform changes: {backend}, {scale:,} rows {ran_on(run, run.settings.get(pass_key(backend, scale)))}", "",
                  f"Configuration fields passed to the server: {passed_fields(run, pass_key(backend, scale))}.", "",
                  "| change | rows | seconds | DuckDB s | ratio to DuckDB | pyarrow s | files rewritten / in table "
                  "| rewritten MB | peak memory GiB |", "|---|---:|---:|---:|---|---:|---|---:|---:|"]
        for m in (m for m in changes if (m.scale, m.backend) == (scale, backend)):
            duck, target = duckdb_ratio(m)
            lines.append(f"| {m.scenario} | {m.rows:,} | {m.seconds:.1f} | "
                         f"{'' if m.duckdb_seconds is None else f'{m.duckdb_seconds:.1f}'} | "
                         f"{'' if duck is None else f'{duck:.2f}×{_mark(duck <= target)}'} | "
                         f"{'' if m.baseline_seconds is None else f'{m.baseline_seconds:.1f}'} | "
                         f"{m.files_rewritten} / {m.files_after} | {m.bytes_rewritten / 1e6:,.1f} | "
                         f"{m.peak_total / GIB:.2f} |")
        lines.append("")
    return [*lines, UNIFORM_END]


ALONGSIDE_START, ALONGSIDE_END = "<!-- alongside:start -->", "<!-- alongside:end -->"


def alongside_section(run: Run) -> list[str]:
    """The scale groups a run of the fleet, soak or steady groups measured beside them (to show a change of the small
    syncs' path left the large changes as fast as the full run's tables above), between markers: the full run's
    tables are kept."""
    lines = [ALONGSIDE_START, "## Large changes, measured beside the small syncs", "",
             f"Run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))} on the code at "
             f"`{run.shape.get('code') or 'not recorded'}`, in the same run as the "
             f"{' and '.join(sorted(g for g in SECTIONS if getattr(run, g)))} section(s): the scale groups "
             f"{', '.join(sorted({m.group for m in run.measurements}))}, each table as the full run's above.", ""]
    for scale, backend in passes(run):
        lines += [f"### Large changes: {backend}, {scale:,} rows {ran_on(run, run.settings.get(pass_key(backend, scale)))}",
                  "", f"Configuration fields passed to the server: {passed_fields(run, pass_key(backend, scale))}.", "",
                  *_table(run, scale, backend), ""]
    return [*lines, ALONGSIDE_END]


def write_into(run: Run, requested: set[str], path: Path) -> str:
    """Write what a run of the `requested` groups (as asked for, without the groups they bring) measured into the
    report at `path`, and say what was written: the fleet, soak and steady sections, or the uniform changes' section,
    alone (the report's other parts kept); scale groups measured beside those sections in a section of their own;
    else the whole results."""
    if requested <= SECTIONS:
        merge_sections(run, path)
        return f"{' and '.join(sorted(requested))} section(s) written into {path}"
    if requested & SECTIONS:
        merge_sections(run, path)
        merge_section(alongside_section(run), ALONGSIDE_START, ALONGSIDE_END, path)
        return f"{' and '.join(sorted(requested & SECTIONS))} section(s) and the large changes beside them written into {path}"
    if requested == {UNIFORM_GROUP}:
        merge_section(uniform_section(run), UNIFORM_START, UNIFORM_END, path)
        return f"uniform section written into {path}"
    write_report(run, path)
    return f"report written to {path}"


def merge_section(lines: list[str], start: str, end: str, path: Path) -> None:
    """Write a section (its lines start and end with its markers) into the report at `path`, leaving its other
    sections as they are: in place of the previous one, else at the end of the results (before their end marker),
    else before the hand-written analysis, else at the end."""
    section = "\n".join(lines)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + section + rest.split(end, 1)[1]
    elif RESULTS_END in text:
        before, after = text.split(RESULTS_END, 1)
        text = before.rstrip("\n") + f"\n\n{section}\n{RESULTS_END}{after}"
    elif "\n## Analysis\n" in text:
        before, after = text.split("\n## Analysis\n", 1)
        text = f"{before}\n{section}\n\n## Analysis\n{after}"
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
