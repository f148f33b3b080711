"""A benchmark report merges runs of different days and code (`--from-results`, and the uniform, fleet and soak
sections each written by a run of that group alone): every section's heading names the commit and the date its own
figures were measured on, as recorded when its pass or group ran, so no section passes for newer than it is."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench import report as report_module
from bench.report import fleet_section, uniform_section, write_report
from bench.results import Run, load_results, save
from bench.soak_report import soak_section
from tests.test_bench_fleet import _level
from tests.test_bench_soak import _sample
from tests.test_bench_uniform import _change

NOV_24 = time.mktime((2026, 11, 24, 12, 0, 0, 0, 0, -1))  # local time, as the report writes dates
NOV_27 = time.mktime((2026, 11, 27, 3, 0, 0, 0, 0, -1))
FLEET_SHAPE = {"tables": 1, "rows": 10, "rounds": 1, "sync_rows": 5, "levels": [1]}
SOAK_SHAPE = {"tables": 2, "syncs": 4, "in_flight": 1, "rows": 10, "sync_rows": 5, "sample_every": 2}


def _runs(tmp_path: Path) -> Run:
    """Two results files as `scripts/bench --from-results` merges them: a full run's pass on one day and code, and a
    later run of the fleet and the soak; one pass of the first recorded no origin (a results file from before)."""
    full = Run([10_000_000], started=NOV_24, measurements=[_change("incremental upsert", 6.0, 5.0)],
               settings={"local, 10,000,000 rows": {"configuration": {}, "started": NOV_24, "code": "aaa1111"},
                         "s3, 10,000,000 rows": {"configuration": {}}},
               shape={"groups": ["load", "uniform"], "code": "aaa0000"})
    later = Run([0], started=NOV_27, shape={"groups": ["fleet", "soak"], "code": "bbb2222"},
                fleet={"local": {"shape": FLEET_SHAPE, "levels": [_level(1, 0.1, 0.1, 10.0)], "duckdb": {"p50": 0.2},
                                 "floor": {"p50": 0.01}, "started": NOV_27, "code": "bbb2222"}},
                soak={"s3": {"shape": SOAK_SHAPE, "before": _sample(0, 90 * 10**6),
                             "samples": [_sample(2, 100 * 10**6), _sample(4, 101 * 10**6)], "errors": {},
                             "tables_exact": 2, "seconds": 1.0, "load_seconds": 1.0, "started": NOV_27,
                             "code": "bbb2222"}})
    save(full, tmp_path / "full.json")
    save(later, tmp_path / "later.json")
    assert json.loads((tmp_path / "later.json").read_text())["fleet"]["local"]["code"] == "bbb2222"
    return load_results([tmp_path / "full.json", tmp_path / "later.json"])


def test_each_section_heading_names_the_code_and_date_of_its_own_figures(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "chart", lambda run, path: None)  # the chart needs matplotlib (bench extra)
    run = _runs(tmp_path)
    page = tmp_path / "BENCHMARKS.md"
    write_report(run, page)
    headings = [line for line in page.read_text().splitlines() if line.startswith("#")]
    assert "## Results: local, 10,000,000 rows (`aaa1111`, 2026-11-24)" in headings
    assert "### Fleet targets (`bbb2222`, 2026-11-27)" in headings
    assert "### Fleet: local (`bbb2222`, 2026-11-27)" in headings
    assert "### Soak: s3 (`bbb2222`, 2026-11-27)" in headings
    assert "### Uniform changes: local, 10,000,000 rows (`aaa1111`, 2026-11-24)" in uniform_section(run)
    # a pass recorded before origins were: the run's own code and date (the first file's, which the merge keeps)
    unrecorded = run.settings["s3, 10,000,000 rows"]
    assert "started" not in unrecorded
    before = Run([10_000_000], started=NOV_24, shape={"code": "aaa0000"}, settings={"local, 10,000,000 rows": unrecorded},
                 measurements=[_change("incremental upsert", 6.0, 5.0)])
    assert "### Uniform changes: local, 10,000,000 rows (`aaa0000`, 2026-11-24)" in uniform_section(before)
    assert "### Fleet: local (`code not recorded`, 2026-11-27)" in fleet_section(Run([0], started=NOV_27, fleet={
        "local": {k: v for k, v in run.fleet["local"].items() if k not in ("code", "started")}}))
    assert "### Soak: s3 (`bbb2222`, 2026-11-27)" in soak_section(run)
