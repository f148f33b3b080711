"""A benchmark run of the uniform group alone writes its own section of docs/BENCHMARKS.md (`uniform_section` in
bench/report.py), leaving the last full run's tables and the hand-written analysis as they are; a full run's results
replace it."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import report as report_module
from bench.report import RESULTS_END, RESULTS_START, UNIFORM_END, UNIFORM_START, write_into
from bench.results import Measurement, Run, code_version
from bench.scenarios import requested_groups, selected_groups


def _change(scenario: str, seconds: float, duckdb: float) -> Measurement:
    return Measurement(scenario=scenario, backend="local", table="big", rows=100_000, plain_bytes=40 * 10**6,
                       seconds=seconds, peak_total=2 * 2**30, peak_jvm=2**29, peak_python=3 * 2**29,
                       bytes_written=900 * 10**6, files_written=14, files_rewritten=14, baseline="merge_upsert",
                       baseline_seconds=12.0, target="merge", scale=10_000_000, group="uniform",
                       duckdb_seconds=duckdb, table_bytes_before=944 * 10**6, bytes_rewritten=944 * 10**6,
                       files_after=14)


def _report(tmp_path: Path) -> Path:
    report = tmp_path / "BENCHMARKS.md"
    report.write_text(f"# Benchmarks\n\nintro\n\n{RESULTS_START}\n## Results: local, 10,000,000 rows\n\nfull run's "
                      f"table\n{RESULTS_END}\n\n## Analysis\n\nnotes\n")
    return report


def test_a_uniform_run_writes_its_section_and_keeps_the_full_runs_tables(tmp_path: Path) -> None:
    run = Run([10_000_000], measurements=[_change("incremental upsert", 6.0, 5.0),
                                          _change("incremental delete", 4.0, 5.0)],
              shape={"groups": ["load", "uniform"], "code": "abc1234"})
    report = _report(tmp_path)
    assert "uniform section" in write_into(run, {"uniform"}, report)
    write_into(run, {"uniform"}, report)  # once, in place
    text = report.read_text()
    assert text.count(UNIFORM_START) == 1 and "full run's table" in text and text.endswith("## Analysis\n\nnotes\n")
    section = text[text.index(UNIFORM_START):text.index(UNIFORM_END)]
    assert "`abc1234`" in section and "### Uniform changes: local, 10,000,000 rows" in section
    assert "Configuration fields passed to the server: none (the server's defaults)." in section
    assert "| incremental upsert | 100,000 | 6.0 | 5.0 | 1.20× ❌ | 12.0 | 14 / 14 | 944.0 | 2.00 |" in section
    assert "| incremental delete | 100,000 | 4.0 | 5.0 | 0.80× ✅ |" in section
    assert text.index(RESULTS_START) < text.index(UNIFORM_START) < text.index(RESULTS_END)


def test_a_full_run_replaces_the_uniform_section_with_its_own_tables(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_module, "chart", lambda run, path: None)  # the chart needs matplotlib (bench extra)
    report = _report(tmp_path)
    uniform = Run([10_000_000], measurements=[_change("incremental upsert", 6.0, 5.0)], shape={})
    write_into(uniform, {"uniform"}, report)
    full = Run([10_000_000], measurements=[_change("incremental upsert", 7.0, 5.0)], shape={})
    assert "report written" in write_into(full, {"load", "uniform"}, report)  # the load asked for too: all of it
    text = report.read_text()
    assert UNIFORM_START not in text and "full run's table" not in text and "| incremental upsert | 100,000 |" in text


def test_the_code_version_names_this_checkout() -> None:
    """The commit of this checkout, or nothing outside a git checkout (an unpacked archive)."""
    head = subprocess.run(["git", "log", "-1", "--format=%H"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    version = code_version().removesuffix("-dirty")
    assert (len(version) >= 7 and head.startswith(version)) if head else version == ""


def test_a_results_file_of_the_uniform_group_is_its_section_and_one_asking_for_the_load_is_a_full_report() -> None:
    assert requested_groups({"load", "uniform"}) == {"uniform"}  # a uniform run's results: the load it brought
    assert requested_groups({"load", "uniform", "parquet"}) == {"uniform", "parquet"}
    assert selected_groups("load,uniform", with_needs=False) == {"load", "uniform"}  # asked for: kept
    assert selected_groups("uniform") == {"load", "uniform"}
