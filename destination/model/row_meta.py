"""`_destination_meta`, the destination's own column: per row, the version that wrote it and the values that did
not convert, as Airbyte records them (fivetran-protocol §10.8):

    {"version": 7, "changes": [{"field": "amount", "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"}]}

The only module that builds or edits that text: the merges stamp the rows they write (`column`), history steps
restamp the versions they close (`restamp`), rewrites add the values they could not convert (`add_changes`).
Every text is written by `_text`, so `restamp` can rely on how it begins.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model.conversion import Failure

_HEAD = '{"version": '  # every text begins with it (_text); restamp replaces the number after it


def _text(version: int, changes: str) -> str:
    """The column's text for a row: `changes` is a JSON list."""
    return f'{_HEAD}{version}, "changes": {changes}}}'


def changes_json(failures: Sequence[Failure], num_rows: int) -> pa.Array:
    """Per row, the JSON list of its values that did not convert (NULL where the row converted cleanly): what a
    decoded batch file carries to the merge (the operations' CHANGES column)."""
    if not failures:
        return pa.nulls(num_rows, pa.string())
    per_row: dict[int, list[dict[str, str]]] = {}
    for f in failures:
        per_row.setdefault(f.row, []).append(f.to_json())
    return pa.array([json.dumps(per_row[i]) if i in per_row else None for i in range(num_rows)], pa.string())


def column(version: int, changes: pa.Array) -> pa.Array:
    """The column of rows written by `version`, with each row's changes (`changes_json`; NULL: none)."""
    plain = _text(version, "[]")
    if changes.null_count == len(changes):
        return pa.repeat(pa.scalar(plain, pa.string()), len(changes))
    return pa.array([plain if c is None else _text(version, c) for c in changes.to_pylist()], pa.string())


def restamp(meta: pa.Array, mask: np.ndarray, version: int) -> pa.Array:
    """Rows in `mask` were rewritten by `version` (a history step closed or opened them): their version becomes
    `version`, their changes stay. A NULL text counts as version 0 without changes."""
    filled = pc.fill_null(meta, _text(0, "[]"))
    restamped = pc.replace_substring_regex(filled, pattern=r'^\{"version": -?\d+', replacement=f"{_HEAD}{version}")
    return pc.if_else(pa.array(mask), restamped, meta)


def add_changes(meta: pa.Array, changes_by_row: Mapping[int, Sequence[Failure]], *, version: int | None,
                replace_field: bool = False) -> pa.Array:
    """Record values that did not convert: each listed row gets its failures appended to its changes (with
    `replace_field`, replacing an earlier change of the same field) and, unless `version` is None, the version."""
    if not changes_by_row:
        return meta
    texts = meta.to_pylist()
    for row, failures in changes_by_row.items():
        previous: dict[str, Any] = json.loads(texts[row]) if texts[row] else {"version": 0, "changes": []}
        fields = {f.field for f in failures} if replace_field else set()
        kept = [c for c in previous.get("changes", []) if c.get("field") not in fields]
        stamp = previous.get("version", 0) if version is None else version
        texts[row] = _text(int(stamp), json.dumps(kept + [f.to_json() for f in failures]))
    return pa.array(texts, pa.string())
