"""The steady-state benchmark's verdicts and report section (bench/steady.py, bench/steady_report.py), from figures
written here; no timing is asserted."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.report import ALONGSIDE_END, ALONGSIDE_START, FLEET_START, RESULTS_END, RESULTS_START, merge_sections, write_into
from bench.results import Measurement, Run
from bench.steady import Sync, summary
from bench.steady_report import STEADY_END, STEADY_START, steady_targets

pytestmark = pytest.mark.unit
MIB = 2**20


def _syncs(seconds: float, written: int, rows: int = 100, table_rows: int = 10_000, table_bytes: int = 10**6,
           count: int = 10) -> list[Sync]:
    return [Sync(seconds, rows, written, table_bytes, table_rows, None) for _ in range(count)]


def _result(small_p50: float, large_p50: float, first_p50: float, last_p50: float, entries: tuple[int, int],
            written: int = MIB) -> dict[str, Any]:
    phases = []
    for i, (p50, n) in enumerate(((first_p50, entries[0]), (last_p50, entries[1]))):
        phases.append({**summary(_syncs(p50, written)), "first_commit": 1 + 500 * i, "entries": n,
                       "log_entries": 3, "server_phases": {"delta": {"mean": 0.01, "median": 0.01}}})
    return {"shape": {"small_rows": 5_000, "large_rows": 200_000, "size_syncs": 10, "sync_rows": 200,
                      "commits": 1_000, "history_rows": 5_000, "history_sync_rows": 50, "phase": 500},
            "sizes": {"steady_small": summary(_syncs(small_p50, written, table_rows=5_000)),
                      "steady_large": summary(_syncs(large_p50, written, table_rows=200_000))},
            "phases": phases, "tables_exact": 3}


def test_write_amplification_is_the_bytes_written_over_the_rows_at_the_tables_bytes_per_row() -> None:
    sync = Sync(0.1, rows=50, bytes_written=50_000, table_bytes=1_000_000, table_rows=10_000, error=None)
    assert sync.write_amplification == pytest.approx(10.0)  # 50 rows are 5,000 bytes of this table


def test_targets_are_met_or_missed_at_their_bounds() -> None:
    met = steady_targets("local", _result(0.10, 0.129, 0.2, 0.229, (40, 50)))
    assert [v.rsplit(": ", 1)[-1] for v in met] == ["met ✅."] * 5, met
    missed = steady_targets("local", _result(0.10, 0.131, 0.2, 0.231, (40, 51), written=2 * MIB + 1))
    assert [v.rsplit(": ", 1)[-1] for v in missed] == ["missed ❌."] * 4 + ["met ✅."], missed
    assert "1.31×" in missed[0] and "+15.5%" in missed[2] and "after each phase 40, 51" in missed[3]


def test_the_section_merges_into_a_report_beside_the_others(tmp_path: Path) -> None:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(f"# Benchmarks\n\n{FLEET_START}\nfleet\n<!-- fleet:end -->\n\n## Analysis\n\nnotes\n")
    run = Run([0], steady={"local": {**_result(0.1, 0.11, 0.2, 0.2, (40, 40)), "code": "abc1234"}})
    merge_sections(run, report)
    merge_sections(run, report)
    text = report.read_text()
    assert text.count(STEADY_START) == 1 and text.count(STEADY_END) == 1
    assert text.index("fleet") < text.index(STEADY_START) < text.index("## Analysis")
    assert "### Steady state: local (`abc1234`" in text and "| steady_large | 200,000 |" in text


def test_a_tables_first_sync_splitting_its_loaded_file_is_named_apart_from_the_bound() -> None:
    result = _result(0.1, 0.1, 0.2, 0.2, (40, 40))
    first = [Sync(0.1, 200, 20 * MIB, 20 * MIB, 200_000, None), *_syncs(0.1, MIB, table_rows=200_000)]
    result["sizes"]["steady_large"] = summary(first)
    verdict = steady_targets("local", result)[1]
    assert verdict.endswith("met ✅.") and "1.00 MiB" in verdict and "20.00" in verdict, verdict
    result["sizes"]["steady_large"] = summary([*first, Sync(0.1, 200, 3 * MIB, 20 * MIB, 200_000, None)])
    assert steady_targets("local", result)[1].endswith("missed ❌.")


def test_large_changes_measured_beside_it_get_a_section_and_keep_the_full_runs_tables(tmp_path: Path) -> None:
    """A steady run that also measured the 10M-row groups (to show the large changes as fast as before) writes its
    section and theirs, leaving the full run's tables and the analysis as they are."""
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(f"# Benchmarks\n\n{RESULTS_START}\nfull run's table\n{RESULTS_END}\n\n## Analysis\n\nnotes\n")
    load = Measurement(scenario="initial load, CSV", backend="local", table="big", rows=10_000_000,
                       plain_bytes=4_286 * 10**6, seconds=25.0, peak_total=2**31, peak_jvm=2**29, peak_python=3 * 2**29,
                       bytes_written=944 * 10**6, files_written=14, files_rewritten=0, baseline="decode_csv",
                       baseline_seconds=16.0, target="load", scale=10_000_000, group="load", files_after=14)
    run = Run([10_000_000], measurements=[load], shape={"code": "abc1234"},
              steady={"local": {**_result(0.1, 0.11, 0.2, 0.2, (40, 40)), "code": "abc1234"}})
    assert "large changes" in write_into(run, {"steady", "load"}, report)
    write_into(run, {"steady", "load"}, report)  # once, in place
    text = report.read_text()
    assert text.count(ALONGSIDE_START) == 1 and text.count(STEADY_START) == 1 and "full run's table" in text
    assert text.endswith("## Analysis\n\nnotes\n")
    section = text[text.index(ALONGSIDE_START):text.index(ALONGSIDE_END)]
    assert "`abc1234`" in section and "### Large changes: local, 10,000,000 rows" in section
    assert "| initial load, CSV | 10,000,000 | 4,286 | 25.0 | 400,000 |" in section
