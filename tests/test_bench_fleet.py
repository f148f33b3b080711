"""The fleet benchmark's parts its figures rest on (bench/fleet.py): the sync pattern, the model every table is
checked against (against DuckDB applying the same files), the floor baseline, the phase lines it reads and the
report's verdicts. No timing is asserted."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bench import baselines, duck, fleet
from bench.fleet import FleetModel, FleetShape
from bench.report import FLEET_END, FLEET_START, RESULTS_END, RESULTS_START, fleet_targets, merge_fleet_section, splice_results
from bench.results import Run

SHAPE = FleetShape(tables=2, rows=300, rounds=3, sync_rows=40, levels=(1, 2))


def test_syncs_add_new_keys_and_change_only_recent_live_keys_each_key_once_per_sync() -> None:
    shape = FleetShape(tables=1, rows=2_000, rounds=6, sync_rows=100, levels=(1,))
    top, deleted = shape.rows, set()
    for r, keys in enumerate(fleet.sync_keys(shape, 0)):
        assert set(keys) == {"replace", *(("update",) if r % 2 == 1 else ()), *(("delete",) if r % 3 == 2 else ())}
        every = np.concatenate(list(keys.values()))
        assert len(np.unique(every)) == len(every) == shape.sync_rows  # distinct across the sync's files
        existing = every[every < top]
        live = sorted(set(range(top)) - deleted)
        recent = set(live[-max(int(len(live) * fleet.RECENT), 4 * shape.sync_rows):])
        assert set(existing.tolist()) <= recent and not set(existing.tolist()) & deleted
        none = np.zeros(0, np.int64)
        changed = set(keys.get("update", none).tolist()) | set(keys.get("delete", none).tolist())
        assert changed <= set(existing.tolist())
        new = every[every >= top]
        assert new.tolist() == list(range(top, top + len(new)))  # new keys continue above the maximum
        replace_rows = shape.sync_rows - len(keys.get("update", [])) - len(keys.get("delete", []))
        assert len(new) == replace_rows - int(replace_rows * fleet.EXISTING_SHARE)
        top += len(new)
        deleted |= set(keys.get("delete", none).tolist())
    assert deleted


def _tables(tmp_path: Path) -> list[fleet.TableSyncs]:
    return fleet.prepare(SHAPE, tmp_path / "cache", lambda _m: None)


def test_model_and_duckdb_applying_the_same_syncs_end_with_the_same_table(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    assert [len(t.syncs) for t in tables] == [SHAPE.total_rounds] * SHAPE.tables
    con = duck.connect(None, tmp_path / "duck", "1GB")
    for t in tables:
        start = str(tmp_path / f"{t.name}-load.parquet")
        pq.write_table(baselines.decode(t.load, False).table, start)  # typed by pyarrow, not by the model
        schema = fleet.duck_schema(con, start)
        current = start
        model = FleetModel()
        model.apply(t.load)
        expected = set(range(SHAPE.rows))
        for r, files in enumerate(t.syncs):
            out = str(tmp_path / f"{t.name}-{r}.parquet")
            fleet.duckdb_sync(con, current, schema, out, files, tmp_path / "scratch")
            current = out
            for f in files:
                model.apply(f)
                keys = {int(k) for k in fleet.read_text(f).column("id").to_pylist()}
                expected = expected - keys if f.kind == "delete" else expected | (keys if f.kind == "replace" else set())
        stored = fleet.stored_rows(con, [current])
        assert set(model.rows) == expected  # the keys follow from the files alone
        assert fleet.differences(model.rows, stored) == 0
        changed: dict[int, dict[str, Any]] = {k: dict(v) for k, v in stored.items()}
        some = next(iter(changed))
        changed[some]["count"] = (changed[some]["count"] or 0) + 1
        assert fleet.differences(model.rows, changed) == 1
        del changed[some]
        assert fleet.differences(model.rows, changed) == 1
    con.close()


def test_floor_writes_one_parquet_file_of_the_syncs_rows_and_three_json_files(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    place = baselines.Place(pafs.LocalFileSystem(), str(tmp_path / "floor"))
    place.reset()
    files = tables[0].syncs[2]  # replace, delete (round 3)
    fleet.floor_sync(files, place, 7)
    written = sorted(p.name for p in (tmp_path / "floor").iterdir())
    assert written == ["000007-files.json", "000007-manifest.json", "000007-schema.json", "000007.parquet"]
    assert pq.read_table(tmp_path / "floor" / "000007.parquet").num_rows == sum(f.rows for f in files)


def test_phase_lines_are_read_from_the_server_log_and_summarised() -> None:
    lines = [json.dumps({"message": "[WriteBatch] fleet.t: 40 rows", "seconds": 0.5,
                         "phases": {"decode": 0.1, "tasks": 0.2}}),
             json.dumps({"message": "[CreateTable] fleet.t: created", "seconds": 0.1, "phases": {"commit": 0.05}}),
             "not json, with \"phases\"",
             json.dumps({"message": "[WriteBatch] fleet.u: 40 rows", "seconds": 0.3, "phases": {"tasks": 0.1}})]
    requests = fleet.log_phases(iter(lines))
    assert requests == [pytest.approx({"decode": 0.1, "tasks": 0.2, "seconds": 0.5, "other": 0.2}),
                        pytest.approx({"tasks": 0.1, "seconds": 0.3, "other": 0.2})]
    summary = fleet.phase_summary(requests)
    assert summary["decode"] == pytest.approx({"mean": 0.05, "median": 0.05})  # absent from one request: 0
    assert summary["tasks"] == pytest.approx({"mean": 0.15, "median": 0.15})


def _level(in_flight: int, p50: float, p95: float, calls_per_second: float) -> dict[str, Any]:
    return {"in_flight": in_flight, "calls": 10, "rows": 400, "seconds": 1.0, "p50": p50, "p95": p95, "p99": p95,
            "calls_per_second": calls_per_second, "rows_per_second": 400.0, "rss_before": 10**9,
            "rss_after": 2 * 10**9, "jvm_after": 10**9, "errors": {}, "phases": {"tasks": {"mean": 0.1, "median": 0.1}}}


def test_fleet_targets_are_judged_from_the_figures_and_the_section_merges_into_a_report(tmp_path: Path) -> None:
    shape = {"tables": 2, "rows": 300, "rounds": 3, "sync_rows": 40, "levels": [1, 8]}
    run = Run([0], fleet={
        "local": {"shape": shape, "levels": [_level(1, 0.09, 0.1, 11.0), _level(8, 0.5, 0.9, 16.0)],
                  "duckdb": {"p50": 0.14}, "floor": {"p50": 0.02}},
        "s3": {"shape": shape, "levels": [_level(1, 0.2, 0.3, 5.0), _level(8, 1.5, 2.0, 6.0)],
               "duckdb": {"p50": 0.15}, "floor": {"p50": 0.05}}})
    verdicts = fleet_targets(run.fleet)
    assert [v.rsplit(": ", 1)[-1] for v in verdicts] == ["met ✅.", "met ✅.", "missed ❌.", "missed ❌.",
                                                         "missed ❌."]  # 0.64×; 2.24× p95 0.9 s; 1.33×; 0.9×; 2.2×
    assert "0.64× DuckDB" in verdicts[0] and "2.24× DuckDB's 7.1 calls/s" in verdicts[1]
    assert "2.22× local's" in verdicts[-1]
    report = tmp_path / "BENCHMARKS.md"
    report.write_text("# Benchmarks\n\n## Results\n\nkept\n\n## Analysis\n\nnotes\n")
    merge_fleet_section(run, report)
    first = report.read_text()
    assert first.index("kept") < first.index(FLEET_START) < first.index(FLEET_END) < first.index("## Analysis")
    run.fleet["local"]["levels"][0]["p50"] = 0.5  # a new run replaces the section, once
    merge_fleet_section(run, report)
    second = report.read_text()
    assert second.count(FLEET_START) == 1 and "0.64× DuckDB" not in second and "3.57× DuckDB" in second
    assert "kept" in second and second.endswith("## Analysis\n\nnotes\n")


def test_a_report_run_rewrites_only_the_results_between_their_markers(tmp_path: Path) -> None:
    """docs/BENCHMARKS.md holds a hand-written manual before the results and the analysis after them: a run (and a
    fleet run) rewrites the results alone, once, and a page without markers gets them at its end."""
    page = f"# Benchmarks\n\nmanual\n\n{RESULTS_START}\nold results\n{RESULTS_END}\n\n## Analysis\n\nnotes\n"
    once = splice_results(page, ["new results"])
    assert once == f"# Benchmarks\n\nmanual\n\n{RESULTS_START}\nnew results\n{RESULTS_END}\n\n## Analysis\n\nnotes\n"
    assert splice_results(once, ["newer"]).count(RESULTS_START) == 1 and "new results" not in splice_results(once, ["newer"])
    assert splice_results("", ["r"]) == f"# Benchmarks\n\n{RESULTS_START}\nr\n{RESULTS_END}\n"
    assert splice_results("# B\n\nhand\n", ["r"]) == f"# B\n\nhand\n\n{RESULTS_START}\nr\n{RESULTS_END}\n"
    shape = {"tables": 1, "rows": 10, "rounds": 1, "sync_rows": 5, "levels": [1]}
    run = Run([0], fleet={"local": {"shape": shape, "levels": [_level(1, 0.1, 0.1, 10.0)],
                                    "duckdb": {"p50": 0.2}, "floor": {"p50": 0.01}}})
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(once)
    merge_fleet_section(run, report)
    text = report.read_text()
    assert text.index("new results") < text.index(FLEET_START) < text.index(FLEET_END) < text.index(RESULTS_END)
    assert text.startswith("# Benchmarks\n\nmanual\n\n") and text.endswith(f"{RESULTS_END}\n\n## Analysis\n\nnotes\n")
