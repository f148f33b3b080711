"""The benchmark's own parts that its figures rest on: the clustered key pattern, the workload cache, and the DuckDB
baseline's merge (checked against the in-process pyarrow merge on the same files)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bench import baselines, duck
from bench.batches import write_batch_file
from bench.report import targets
from bench.results import Measurement, Run
from bench.scenarios import rows_option, selected_groups
from bench.tables import stored_bytes
from bench.workload import NEW_SHARE, RECENT, Shape, Workload, clustered_keys
from destination.storage.base import StorageSpec
from destination.storage.opening import open_storage
from destination.tester.batchgen import UNMODIFIED_STRING

SHAPE = Shape(rows=3_000, small_rows=200, change_fraction=0.01, clustered_syncs=8, small_syncs=3, small_sync_rows=50)


def test_clustered_syncs_append_above_the_maximum_and_change_only_recent_live_keys() -> None:
    shape = Shape(rows=100_000, change_fraction=0.01, clustered_syncs=12)
    top, live, deleted = shape.rows, set(range(shape.rows)), set()
    kinds = []
    for kind, ids in clustered_keys(shape):
        kinds.append(kind)
        assert len(np.unique(ids)) == len(ids) == shape.change_rows
        recent = sorted(live)[-int(len(live) * RECENT):]
        if kind == "append":
            assert ids.min() == top
        else:
            existing = ids[ids < top]
            assert set(existing.tolist()) <= set(recent), kind
            expected_existing = shape.change_rows - int(shape.change_rows * NEW_SHARE) if kind == "upsert" else len(ids)
            assert len(existing) == expected_existing, kind
        if kind in ("append", "upsert"):
            new = ids[ids >= top]
            assert new.tolist() == list(range(top, top + len(new)))
            top += len(new)
            live |= set(new.tolist())
        if kind == "delete":
            live -= set(ids.tolist())
            deleted |= set(ids.tolist())
    assert kinds == ["append", "upsert", "update", "delete"] * 3
    assert deleted and not deleted & live


def test_generated_sets_are_reused_from_the_cache_and_regenerated_when_their_keys_change(tmp_path: Path) -> None:
    messages: list[str] = []
    first = Workload(SHAPE, tmp_path, messages.append)
    first.prepare(["update", "small_syncs"])
    assert len(first.files["small_syncs"]) == 3 and first.batch_rows("small_syncs") == 150
    again = Workload(SHAPE, tmp_path, messages.append)
    again.prepare(["update"])
    assert messages[-1] == "workload: update from the cache (1 files)"
    assert again.files["update"] == first.files["update"]  # same paths, rows, sizes and derived keys
    assert baselines.plaintext(again.files["update"][0]) == baselines.plaintext(first.files["update"][0])
    other = Workload(Shape(rows=3_000, change_fraction=0.02), tmp_path, messages.append)
    other.prepare(["update"])
    assert messages[-1].startswith("workload: generating update")
    assert other.batch_rows("update") == 60


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


@pytest.mark.parametrize("kind", ["replace", "update", "delete"])
def test_duckdb_merge_gives_the_in_process_merges_table(tmp_path: Path, kind: str) -> None:
    w = Workload(SHAPE, tmp_path / "cache", lambda _m: None)
    name = {"replace": "upsert", "update": "update", "delete": "delete"}[kind]
    w.prepare(["load", name])
    local = pafs.LocalFileSystem()
    state = baselines.Place(local, str(tmp_path / "state"))
    baselines.raw_decode(w.files["load"], False, state)
    stored = sorted(str(p) for p in (tmp_path / "state").glob("*.parquet"))
    before = pq.read_table(stored)
    out = baselines.Place(local, str(tmp_path / "duck"))
    con = duck.connect(None, tmp_path / "scratch", "1GB")
    seconds = duck.merge(con, stored, w.files[name], kind, out, tmp_path / "scratch")
    assert seconds > 0
    merged = _sorted(pq.read_table(str(tmp_path / "duck")))
    baselines.plain_merge(state, w.files[name], kind)
    expected = _sorted(pq.read_table(str(tmp_path / "state")))
    assert merged.num_rows == expected.num_rows
    assert merged.num_rows == {"replace": 3_000 + 15, "update": 3_000, "delete": 3_000 - 30}[kind]
    for column in expected.column_names:  # the raw decode keeps BINARY as its base64 text, so both do here
        assert merged.column(column).combine_chunks().cast(expected.schema.field(column).type).equals(
            expected.column(column).combine_chunks()), column
    if kind == "update":  # unmodified columns kept their stored values, updated ones changed
        changed = pc.not_equal(merged.column("score"), before.sort_by("id").column("score"))
        assert pc.sum(changed.cast(pa.int64())).as_py() == 30
        assert merged.column("big").equals(before.sort_by("id").column("big"))


def test_duckdb_merge_decodes_base64_into_binary_columns_and_keeps_unmodified_values(tmp_path: Path) -> None:
    stored = str(tmp_path / "stored.parquet")
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "payload": pa.array([b"\x00old", b"\x01old"]),
                             "_destination_meta": pa.array(["v1", "v1"])}), stored)
    batch = pa.table({"id": ["1", "2", "3"], "payload": ["AAEC", UNMODIFIED_STRING, UNMODIFIED_STRING]})
    files = [write_batch_file(tmp_path, "b", batch, "replace", "csv")]
    con = duck.connect(None, tmp_path / "scratch", "1GB")
    duck.merge(con, [stored], files, "replace", baselines.Place(pafs.LocalFileSystem(), str(tmp_path / "out")),
               tmp_path / "scratch")
    rows = pq.read_table(str(tmp_path / "out")).sort_by("id").to_pylist()
    assert rows == [{"id": 1, "payload": b"\x00\x01\x02", "_destination_meta": None},
                    {"id": 2, "payload": b"\x01old", "_destination_meta": None},
                    {"id": 3, "payload": None, "_destination_meta": None}]


def _measurement(scenario: str, group: str, seconds: float, scale: int = 100_000, **figures: Any) -> Measurement:
    return Measurement(scenario, "local", "t", 1_000, 0, seconds, 10**9, 0, 0, 0, 0, 0, scale=scale, group=group,
                       **figures)


def test_report_states_each_clustered_and_small_sync_target_as_met_or_missed() -> None:
    big = 100_000_000  # the clustered targets are set for this size
    run = Run([big], measurements=[
        _measurement("clustered append (sync 1 of 2)", "clustered", 1.0, big, duckdb_seconds=10.0,
                     table_bytes_before=1000),
        _measurement("clustered update (sync 2 of 2)", "clustered", 3.0, big, duckdb_seconds=10.0,
                     table_bytes_before=1000, bytes_rewritten=60, table_bytes_after=1000, stored_bytes=1200),
        _measurement("full read, table built by 9 syncs", "small_syncs", 2.0, big),
        _measurement("full read, table loaded at once", "small_syncs", 1.0, big),
    ], settings={"local, 100,000,000 rows": {"configuration": {"layout": "referencing"}, "ignored": []}})
    lines = targets(run)
    assert "- local, 100,000,000 rows: clustered appends rewrote 0 files (target: none): met ✅." in lines
    assert any("clustered updates rewrote 6.0% of the table's bytes (target ≤ 5%): missed ❌" in line for line in lines)
    assert any("clustered append (sync 1 of 2): 1.0 s, 0.10× DuckDB's full-rewrite merge" in line and "met ✅" in line
               for line in lines)
    assert any("clustered update (sync 2 of 2): 3.0 s, 0.30× DuckDB" in line and "missed ❌" in line for line in lines)
    assert any("1.20× the latest version's" in line and "(layout: referencing;" in line and "met ✅" in line
               for line in lines)
    assert any("a full read of the table built by small syncs: 2.0 s, 2.00×" in line and "missed ❌" in line
               for line in lines)


def test_clustered_shares_and_times_are_judged_at_the_size_their_targets_are_set_for() -> None:
    run = Run([10_000_000], measurements=[
        _measurement("clustered update (sync 1 of 1)", "clustered", 3.0, 10_000_000, duckdb_seconds=10.0,
                     table_bytes_before=1000, bytes_rewritten=60)])
    lines = [line for line in targets(run) if "clustered update" in line and "memory" not in line]
    assert len(lines) == 2 and all("the target is set at 100,000,000 rows (above it here)" in line for line in lines)


def test_the_stored_bytes_target_is_judged_only_for_the_referencing_layout() -> None:
    """Local disk's default (complete) layout keeps a copy per retained version by design: no verdict there."""
    run = Run([100_000], measurements=[
        _measurement("clustered update (sync 1 of 1)", "clustered", 3.0, table_bytes_before=1000,
                     bytes_rewritten=60, table_bytes_after=1000, stored_bytes=2200)])
    [line] = [line for line in targets(run) if "bytes stored" in line]
    assert "(layout: the server default;" in line and line.endswith("no target here.")


def test_stored_bytes_count_a_hard_linked_file_once_on_local_disk(tmp_path: Path) -> None:
    storage = open_storage(StorageSpec(root=str(tmp_path)))
    (tmp_path / "t" / "v1").mkdir(parents=True)
    (tmp_path / "t" / "v2").mkdir()
    (tmp_path / "t" / "v1" / "a.parquet").write_bytes(b"x" * 100)
    os.link(tmp_path / "t" / "v1" / "a.parquet", tmp_path / "t" / "v2" / "a.parquet")
    (tmp_path / "t" / "v2" / "b.parquet").write_bytes(b"y" * 10)
    assert stored_bytes(storage, "t") == 110


def test_scales_and_scenario_groups_from_the_command_line() -> None:
    assert rows_option("200K,10M,1.5G") == [200_000, 10_000_000, 1_500_000_000]
    assert selected_groups("clustered,new_keys") == {"clustered", "new_keys", "load", "parquet"}
    with pytest.raises(SystemExit, match="unknown scenario group"):
        selected_groups("clusterd")
