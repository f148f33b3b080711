"""`_destination_meta` is built and edited in one module (destination.model.row_meta): every text it writes is JSON with
the version first, so a restamp works on any of them, whoever wrote the row."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from destination.model import row_meta
from destination.model.conversion import NULLED, SERIALIZATION_ERROR, Failure


def _failure(row: int, field: str) -> Failure:
    return Failure(row, field, NULLED, SERIALIZATION_ERROR)


def _decoded(meta: pa.Array) -> list[dict | None]:
    return [None if text is None else json.loads(text) for text in meta.to_pylist()]


def test_a_merge_stamps_its_version_and_each_rows_failures() -> None:
    changes = row_meta.changes_json([_failure(1, "n"), _failure(1, "b")], 3)
    assert _decoded(row_meta.column(7, changes)) == [
        {"version": 7, "changes": []},
        {"version": 7, "changes": [{"field": "n", "change": NULLED, "reason": SERIALIZATION_ERROR},
                                   {"field": "b", "change": NULLED, "reason": SERIALIZATION_ERROR}]},
        {"version": 7, "changes": []}]
    assert row_meta.changes_json([], 2).null_count == 2


def test_restamp_changes_only_the_version_of_every_kind_of_text() -> None:
    written = row_meta.column(3, row_meta.changes_json([_failure(0, "n")], 2))
    converted = row_meta.add_changes(pa.array([None, None], pa.string()), {1: [_failure(1, "x")]}, version=4)
    meta = pa.concat_arrays([written, converted])
    restamped = _decoded(row_meta.restamp(meta, np.array([True, False, True, True]), 12))
    assert [m["version"] for m in restamped if m] == [12, 3, 12, 12]
    assert restamped[0]["changes"] == _decoded(written)[0]["changes"]  # the changes stay
    assert restamped[2] == {"version": 12, "changes": []}  # a row without text: version 0, no changes, restamped
    assert restamped[3]["changes"] == [{"field": "x", "change": NULLED, "reason": SERIALIZATION_ERROR}]


def test_add_changes_appends_or_replaces_a_fields_change() -> None:
    meta = row_meta.column(2, row_meta.changes_json([_failure(0, "n")], 2))
    appended = _decoded(row_meta.add_changes(meta, {0: [_failure(0, "n")]}, version=5))
    assert appended[0] == {"version": 5, "changes": [_failure(0, "n").to_json()] * 2}
    assert appended[1] == {"version": 2, "changes": []}  # rows without new failures keep their text
    replaced = _decoded(row_meta.add_changes(meta, {0: [_failure(0, "n")]}, version=None, replace_field=True))
    assert replaced[0] == {"version": 2, "changes": [_failure(0, "n").to_json()]}
