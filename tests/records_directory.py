"""A local records directory of one data file in a codec's format, for the records-mover and loader tests: what they
read (data file, `_schema.json`, `_format_*`, then `_manifest` last); the table store writes its versions' own
(destination/store/commit.py)."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from destination.model.table_model import TableDef
from destination.on_disk.records import MANIFEST, SCHEMA_JSON, dumps, manifest_json, schema_json
from destination.records_formats.codec import Codec


def write_directory(path: Path, codec: Codec, table: pa.Table, table_def: TableDef) -> pa.Table:
    """Write `table` into the records directory `path`; returns the rows as stored (Codec.write)."""
    path.mkdir(parents=True, exist_ok=True)
    data = path / f"data001{codec.suffix}"
    with data.open("wb") as out:
        stored = codec.write(table, table_def, out)
    (path / SCHEMA_JSON).write_bytes(dumps(schema_json(table_def)))
    (path / codec.format_file).write_bytes(codec.format_content())
    (path / MANIFEST).write_bytes(dumps(manifest_json([(data.resolve().as_uri(), data.stat().st_size)])))
    return stored
