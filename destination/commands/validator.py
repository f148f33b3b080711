"""Checks a committed version (or its change directory) is a valid records directory (used by our tests).

- `_manifest` lists exactly the directory's data files, once each, absolute URLs, true sizes, mandatory;
- exactly one `_format_*` file, of the expected format; a `_format_delimited` holds all 13 hints;
- `_schema.json` == `_schema`, valid against records schema v1, `index` 1..n in key order,
  `known_representations` present;
- data file names have no `_`/`.` prefix and no `=`, and no other folder is left in the directory;
- Parquet: every file's columns equal the schema fields in order, in types that match;
  delimited with a header row: every file's header names the schema fields in order.
"""
from __future__ import annotations

import csv
import json
from importlib import resources

import pyarrow.parquet as pq

from destination.storage.base import Storage
from destination.table_store import records

_TYPES = {"integer": ("int",), "decimal": ("decimal", "float", "double"), "string": ("string", "binary"),
          "boolean": ("bool",), "date": ("date",), "time": ("time",), "datetime": ("timestamp",),
          "datetimetz": ("timestamp",)}


METADATA_FILES = {records.MANIFEST, *records.METADATA_FILES, "_changes.json"}
HINTS = ("header-row", "field-delimiter", "record-terminator", "compression", "quoting", "quotechar", "doublequote",
         "escape", "encoding", "dateformat", "timeonlyformat", "datetimeformattz", "datetimeformat")


def validate_version(storage: Storage, directory: str) -> list[str]:
    return validate_directory(storage, directory, "parquet")


def validate_directory(storage: Storage, directory: str, fmt: str) -> list[str]:
    """Problems of the records directory at `directory`, whose data files should be in `fmt` (parquet | delimited)."""
    import jsonschema

    problems: list[str] = []
    names = storage.list_children(directory)
    data_files = [n for n in names if not n.startswith(("_", "."))]
    formats = [n for n in names if n.startswith("_format_")]
    if formats != [f"_format_{fmt}"]:
        problems.append(f"expected exactly one _format_{fmt}, found {formats}")
    hints: dict[str, object] = {}
    if fmt == "delimited" and formats == ["_format_delimited"]:
        hints = json.loads(storage.read_bytes(f"{directory}/_format_delimited")).get("hints", {})
        if sorted(hints) != sorted(HINTS):
            problems.append(f"_format_delimited hints {sorted(hints)} are not the 13 of the records spec")
    unknown = [n for n in names if n.startswith("_") and n not in METADATA_FILES and not n.startswith("_format_")]
    if unknown:
        problems.append(f"unexpected metadata names (leftovers?) in the directory: {unknown}")
    for n in data_files:
        if "=" in n:
            problems.append(f"data file name {n!r} contains '='")
    try:
        manifest = json.loads(storage.read_bytes(f"{directory}/{records.MANIFEST}"))
    except FileNotFoundError:
        return problems + ["no _manifest"]
    entries = manifest.get("entries", [])
    if not entries:
        problems.append("the manifest has no entries (an empty table needs one zero-row file)")
    listed = []
    for e in entries:
        name = e["url"].rsplit("/", 1)[-1]
        listed.append(name)
        if e.get("url") != storage.url(f"{directory}/{name}"):
            problems.append(f"manifest URL {e.get('url')!r} is not the absolute URL of {name}")
        if e.get("mandatory") is not True:
            problems.append(f"manifest entry {name} is not mandatory")
        size = e.get("meta", {}).get("content_length")
        if name in data_files and size != storage.size(f"{directory}/{name}"):
            problems.append(f"manifest content_length of {name} is {size}, the file has {storage.size(f'{directory}/{name}')}")
    if sorted(listed) != sorted(data_files) or len(set(listed)) != len(listed):
        problems.append(f"manifest lists {sorted(listed)} but the directory holds data files {sorted(data_files)}")
    schema_doc = json.loads(storage.read_bytes(f"{directory}/{records.SCHEMA_JSON}"))
    if storage.read_bytes(f"{directory}/{records.SCHEMA_LEGACY}") != storage.read_bytes(f"{directory}/{records.SCHEMA_JSON}"):
        problems.append("_schema differs from _schema.json")
    meta_schema = json.loads(resources.files("destination").joinpath("records_schema_v1.json").read_text())
    try:
        jsonschema.validate(schema_doc, meta_schema)
    except jsonschema.ValidationError as exc:
        problems.append(f"_schema.json is not valid records schema v1: {exc.message}")
    fields = schema_doc.get("fields", {})
    if [f["index"] for f in fields.values()] != list(range(1, len(fields) + 1)):
        problems.append("_schema.json field indexes are not 1..n in order")
    if fmt == "delimited":
        return problems + _check_headers(storage, directory, data_files, list(fields), hints)
    for name in data_files:
        with storage.open_input(f"{directory}/{name}") as src:
            arrow_schema = pq.read_schema(src)
        if arrow_schema.names != list(fields):
            problems.append(f"{name}: Parquet columns {arrow_schema.names} differ from the schema fields {list(fields)}")
            continue
        for f in arrow_schema:
            expected = _TYPES[fields[f.name]["type"]]
            if not str(f.type).startswith(expected):
                problems.append(f"{name}: column {f.name!r} is {f.type}, not a {fields[f.name]['type']}")
    return problems


def _check_headers(storage: Storage, directory: str, data_files: list[str], fields: list[str],
                   hints: dict[str, object]) -> list[str]:
    if not hints.get("header-row"):
        return []
    problems = []
    for name in data_files:
        first = storage.read_bytes(f"{directory}/{name}").split(b"\n", 1)[0].decode("utf-8")
        header = next(csv.reader([first]), [])
        if header != fields:
            problems.append(f"{name}: header {header[:6]}… differs from the schema fields {fields[:6]}…")
    return problems
