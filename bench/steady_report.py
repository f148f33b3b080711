"""The steady-state section of docs/BENCHMARKS.md (bench/steady.py): the sizes' and the phases' tables, and the
targets' verdicts."""
from __future__ import annotations

from typing import Any

from bench.results import Run, ran_on
from bench.steady import p50_ratio

STEADY_START, STEADY_END = "<!-- steady:start -->", "<!-- steady:end -->"
SIZE_TARGET = 1.3  # the large table's small-sync p50 within this × the small table's
BYTES_TARGET = 2 * 2**20  # data bytes written by any small sync, at any table size up to the file target
HISTORY_TARGET = 0.15  # the last phase's p50 within this share of the first phase's
# entries under the table's folder rise and fall with its data files (compaction merges them in steps): bounded when
# the second half's phases end with no more than the first half's most, by this share, and `_log` holds as many
ENTRIES_TOLERANCE = 0.25
STEPS = ("commit", "metadata", "delta", "iceberg", "catalog", "retention", "seconds")


def _verdict(met: bool) -> str:
    return "met ✅" if met else "missed ❌"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def steady_targets(backend: str, result: dict[str, Any]) -> list[str]:
    """The issue's targets for one backend, each met or missed from the figures measured."""
    out = []
    sizes = result.get("sizes", {})
    ratio = p50_ratio(result)
    if ratio is not None:
        small, large = sizes["steady_small"], sizes["steady_large"]
        out.append(f"- {backend}: small sync p50 on the {large['table_rows']:,}-row table {_ms(large['p50'])} ms, "
                   f"{ratio:.2f}× the {small['table_rows']:,}-row table's {_ms(small['p50'])} ms (target ≤ "
                   f"{SIZE_TARGET}×): {_verdict(ratio <= SIZE_TARGET)}.")
    phases = result.get("phases", [])
    # a table's first sync moves its recent keys out of the file its load wrote (once: docs/design/write-path.md)
    firsts = [s["bytes_written_first"] for s in sizes.values()] + [p["bytes_written_first"] for p in phases[:1]]
    later = [s["bytes_written_max_after_first"] for s in sizes.values()] + \
        [p["bytes_written_max_after_first"] for p in phases[:1]] + [p["bytes_written_max"] for p in phases[1:]]
    if later:
        most = max(later)
        out.append(f"- {backend}: the most data bytes a small sync wrote {most / 2**20:,.2f} MiB, after each table's "
                   f"first sync (which wrote {', '.join(f'{b / 2**20:,.2f}' for b in firsts)} MiB: the loaded "
                   f"file's rows split once from its recent keys) (target ≤ {BYTES_TARGET / 2**20:.0f} MiB): "
                   f"{_verdict(most <= BYTES_TARGET)}.")
    if len(phases) >= 2:
        first, last = phases[0], phases[-1]
        change = last["p50"] / first["p50"] - 1
        out.append(f"- {backend}: p50 of commits {last['first_commit']:,}-{last['first_commit'] + last['syncs'] - 1:,} "
                   f"{_ms(last['p50'])} ms against {_ms(first['p50'])} ms for the first {first['syncs']:,} "
                   f"({change:+.1%}; target within ±{HISTORY_TARGET:.0%}): {_verdict(abs(change) <= HISTORY_TARGET)}.")
        half = (len(phases) + 1) // 2
        early, late = phases[:half], phases[half:]
        most = max(p["entries"] for p in early)
        bounded = max(p["entries"] for p in late) <= most * (1 + ENTRIES_TOLERANCE) and \
            max(p["log_entries"] for p in late) <= max(p["log_entries"] for p in early)
        entries = ", ".join(f"{p['entries']:,}" for p in phases)
        log_entries = ", ".join(f"{p['log_entries']:,}" for p in phases)
        out.append(f"- {backend}: entries under the table's folder after each phase {entries} (`_log` "
                   f"{log_entries}; target: bounded, the second half's no more "
                   f"than the first half's most, {most:,}, by {ENTRIES_TOLERANCE:.0%}, `_log` no more at all): "
                   f"{_verdict(bounded)}.")
    errors = sum(sum(s["errors"].values()) for s in [*sizes.values(), *phases])
    out.append(f"- {backend}: calls that failed {errors:,}, tables equal to the model {result.get('tables_exact', 0)} "
               f"of 3 (target: none failed, all equal): {_verdict(not errors and result.get('tables_exact') == 3)}.")
    return out


def _sizes(result: dict[str, Any]) -> list[str]:
    rows = ["| table | rows after | syncs | p50 ms | p95 ms | data bytes written per sync: p50 / max KB | write "
            "amplification p50 / max |", "|---|---:|---:|---:|---:|---|---|"]
    for name, s in sorted(result.get("sizes", {}).items(), key=lambda item: item[1]["table_rows"]):
        rows.append(f"| {name} | {s['table_rows']:,} | {s['syncs']:,} | {_ms(s['p50'])} | {_ms(s['p95'])} | "
                    f"{s['bytes_written_p50'] / 1024:,.0f} / {s['bytes_written_max'] / 1024:,.0f} | "
                    f"{s['write_amplification_p50']:.1f} / {s['write_amplification_max']:.1f} |")
    return rows


def _phases(result: dict[str, Any]) -> list[str]:
    phases = result.get("phases", [])
    rows = ["| commits | p50 ms | p95 ms | KB written p50 / max | write amplification p50 | table rows | entries "
            "(`_log`) | " + " | ".join(f"{step} ms" for step in STEPS) + " |",
            "|---|---:|---:|---|---:|---:|---|" + "---:|" * len(STEPS)]
    for p in phases:
        steps = [f"{p['server_phases'][step]['median'] * 1000:,.1f}" if step in p["server_phases"] else ""
                 for step in STEPS]
        rows.append(f"| {p['first_commit']:,}-{p['first_commit'] + p['syncs'] - 1:,} | {_ms(p['p50'])} | "
                    f"{_ms(p['p95'])} | {p['bytes_written_p50'] / 1024:,.0f} / {p['bytes_written_max'] / 1024:,.0f} | "
                    f"{p['write_amplification_p50']:.1f} | {p['table_rows']:,} | {p['entries']:,} "
                    f"({p['log_entries']:,}) | " + " | ".join(steps) + " |")
    return rows


def steady_section(run: Run) -> list[str]:
    """The steady-state section, between markers so a run of this group alone replaces it in an existing report."""
    if not run.steady:
        return []
    shape = next(iter(run.steady.values()))["shape"]
    lines = [STEADY_START, "## Steady state: small syncs at every table size and age", "",
             f"One `serve` process, one call in flight, retention retiring a version on every commit "
             f"(`retention_min_age_seconds` 0, two versions kept). Sizes: a {shape['small_rows']:,}-row and a "
             f"{shape['large_rows']:,}-row table take {shape['size_syncs']:,} syncs of {shape['sync_rows']:,} rows "
             "each, in turn (new keys above the largest, updates of recent keys by upsert; an update file every other "
             "sync, a delete file every third). History: one table of "
             f"{shape['history_rows']:,} rows takes {shape['commits']:,} syncs of {shape['history_sync_rows']:,} rows, "
             f"measured per {shape['phase']:,} commits. Data bytes written: the files new in the version a sync made; "
             "write amplification: those bytes over the sync's rows at the table's own bytes per row. Steps: the "
             "server's own `phases`, median per request; entries: every object under the table's folder at the "
             "phase's end (bench/steady.py).", "",
             f"### Steady-state targets {' '.join(sorted({ran_on(run, r) for r in run.steady.values()}))}", ""]
    for backend, result in sorted(run.steady.items()):
        lines += steady_targets(backend, result)
    lines.append("")
    for backend, result in sorted(run.steady.items()):
        lines += [f"### Steady state: {backend} {ran_on(run, result)}", "", *_sizes(result), "", *_phases(result), "",
                  f"Initial loads: {result.get('load_seconds', 0):.1f} s.", ""]
    return [*lines, STEADY_END]
