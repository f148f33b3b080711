"""The benchmark's own parts that its figures rest on: the clustered key pattern, the workload cache, and the DuckDB
baseline's merge (checked against the in-process pyarrow merge on the same files)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from bench import baselines, duck
from bench.batches import write_batch_file
from bench.workload import NEW_SHARE, RECENT, Shape, Workload, clustered_keys
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
