"""The uniform-changes section of docs/BENCHMARKS.md: a run of the uniform group alone (`--scenarios uniform`: the
1 % upsert, update and delete spread over a whole table, each against DuckDB's merge of the same change) writes its
figures here, between markers, and leaves the last full run's tables as they are."""
from __future__ import annotations

import time

from bench.results import Measurement, Run, pass_key, passed_fields

UNIFORM_START, UNIFORM_END = "<!-- uniform:start -->", "<!-- uniform:end -->"
UNIFORM_GROUP = "uniform"
GIB = 2**30


def _row(m: Measurement, target: float) -> str:
    duck = m.seconds / m.duckdb_seconds if m.duckdb_seconds else None
    verdict = "" if duck is None else f"{duck:.2f}× {'✅' if duck <= target else '❌'}"
    baseline = "" if m.baseline_seconds is None else f"{m.baseline_seconds:.1f}"
    duck_s = "" if m.duckdb_seconds is None else f"{m.duckdb_seconds:.1f}"
    return (f"| {m.scenario} | {m.rows:,} | {m.seconds:.1f} | {duck_s} | {verdict} | {baseline} | "
            f"{m.files_rewritten} / {m.files_after} | {m.bytes_rewritten / 1e6:,.1f} | {m.peak_total / GIB:.2f} |")


def uniform_section(run: Run, target: float) -> list[str]:
    """The section's lines, markers included: per backend and scale, each uniform change's time against DuckDB's
    (`target`: the ratio to meet) and the in-process pyarrow merge, with the bytes it rewrote."""
    code = run.shape.get("code") or "not recorded"
    lines = [UNIFORM_START, "## Uniform changes: the latest run of this group", "",
             f"Run of {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))} on the code at `{code}` "
             "(`scripts/bench --scenarios uniform`): a 1 % change spread uniformly over the big table, so every "
             "stored file is rewritten; DuckDB merged the same change just before, in the same pass. Target: at most "
             f"{target}× DuckDB's time. These figures are newer than the full run's tables above.", ""]
    for scale, backend in sorted({(m.scale, m.backend) for m in run.measurements if m.group == UNIFORM_GROUP}):
        lines += [f"### Uniform changes: {backend}, {scale:,} rows", "",
                  f"Configuration fields passed to the server: {passed_fields(run, pass_key(backend, scale))}.", "",
                  "| change | rows | seconds | DuckDB s | ratio to DuckDB | pyarrow s | files rewritten / in table "
                  "| rewritten MB | peak memory GiB |",
                  "|---|---:|---:|---:|---|---:|---|---:|---:|",
                  *[_row(m, target) for m in run.measurements
                    if m.group == UNIFORM_GROUP and (m.scale, m.backend) == (scale, backend)], ""]
    return [*lines, UNIFORM_END]
