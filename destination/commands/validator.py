"""Checks that a table's committed versions, and their change directories, are valid records directories
(the `validate` command; the tests use it too). Every problem is one line naming the file.

A records directory (a version `v<N>/` or a change directory `changes/v<N>/`):
- `_manifest` lists exactly the directory's data files, once each, absolute URLs, true sizes, mandatory; a version
  of the referencing layout also lists the files its `_files.json` places in earlier versions' directories;
- exactly one `_format_*` file, of the expected format; a `_format_delimited` holds all 13 hints;
- `_schema.json` == `_schema`, valid against records schema v1, `index` 1..n in key order,
  `known_representations` present;
- data file names have no `_`/`.` prefix and no `=`, and no other folder is left in the directory;
- Parquet: every file's columns equal the schema fields in order, in types that match;
  delimited with a header row: every file's header names the schema fields in order.
A table (`validate_table`): commit records 1..N without gaps, each naming its version; the directory of every
version that retention may not have removed yet (a retired version's directory may keep only data files that later
versions list); `_table.json` naming the version and `_files.json` the data files, where they are, with their row
counts; the change directory a commit record names, in the format its `_changes.json` gives.
"""
from __future__ import annotations

import csv
import json
import time
from importlib import resources
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from destination.model.key_order import count_bounds_below, first_and_last, key_columns_of, keys_from_json, sort_keys
from destination.model.table_model import TableDef
from destination.on_disk import layout, records
from destination.on_disk.datafiles import DataFile, read_data_file, written_under
from destination.on_disk.locations import file_dir, file_path
from destination.on_disk.options import Retention
from destination.on_disk.placement import in_key_order
from destination.records_formats.codec import format_of_name
from destination.storage.base import Storage
from destination.store.table_store import TableStore

_TYPES = {"integer": ("int",), "decimal": ("decimal", "float", "double"), "string": ("string", "binary"),
          "boolean": ("bool",), "date": ("date",), "time": ("time",), "datetime": ("timestamp",),
          "datetimetz": ("timestamp",)}


METADATA_FILES = {records.MANIFEST, *records.METADATA_FILES, "_changes.json"}
HINTS = ("header-row", "field-delimiter", "record-terminator", "compression", "quoting", "quotechar", "doublequote",
         "escape", "encoding", "dateformat", "timeonlyformat", "datetimeformattz", "datetimeformat")


def validate_version(storage: Storage, directory: str) -> list[str]:
    """A table version's records directory, in the records format its definition (`_table.json`) names."""
    try:
        fmt = written_under(storage, directory).stored_format
    except (FileNotFoundError, ValueError, KeyError):  # reported by _check_table_files
        fmt = "parquet"
    return validate_directory(storage, directory, fmt, _stored_elsewhere(storage, directory))


def _stored_elsewhere(storage: Storage, directory: str) -> dict[str, str]:
    """`v<K>/<name>` → path of each data file the version lists in another version's directory."""
    try:
        listed = json.loads(storage.read_bytes(f"{directory}/{records.FILES_JSON}"))["files"]
    except (FileNotFoundError, ValueError, KeyError):
        return {}  # reported by _check_table_files
    files = [DataFile.from_json(entry) for entry in listed]
    return {f"{f.stored_in}/{f.name}": file_path(directory, f) for f in files if f.stored_in is not None}


def validate_directory(storage: Storage, directory: str, fmt: str, elsewhere: dict[str, str] | None = None) -> list[str]:
    """Problems of the records directory at `directory`, whose data files should be in `fmt` (parquet | delimited);
    each starts with the name of the file it concerns. `elsewhere`: the data files its manifest may list in other
    directories (shown name → path)."""
    elsewhere = elsewhere or {}
    names = storage.list_children(directory)
    if not names:
        return ["(directory): missing or empty"]
    data_files = [n for n in names if not n.startswith(("_", "."))]
    problems, hints = _check_format(storage, directory, names, fmt)
    unknown = [n for n in names if n.startswith("_") and n not in METADATA_FILES and not n.startswith("_format_")]
    problems += [f"{n}: unexpected metadata name (a leftover?)" for n in unknown]
    problems += [f"{n}: data file name contains '='" for n in data_files if "=" in n]
    problems += _check_manifest(storage, directory, data_files, elsewhere)
    fields, schema_problems = _check_schema(storage, directory)
    problems += schema_problems
    if fields is None:
        return problems
    located = [(directory, name) for name in data_files] + [tuple(p.rsplit("/", 1)) for p in elsewhere.values()]
    if fmt != "parquet" and storage.exists(f"{directory}/{records.TABLE_JSON}"):  # a table's version
        return problems + [p for folder, name in located for p in _check_codec_columns(storage, folder, name, fields)]
    if fmt == "delimited":
        return problems + _check_headers(storage, directory, data_files, list(fields), hints)
    return problems + [p for folder, name in located for p in _check_parquet_columns(storage, folder, name, fields)]


def _check_codec_columns(storage: Storage, directory: str, name: str, fields: dict[str, Any]) -> list[str]:
    """An Avro or delimited data file of a table version reads (with its hints) as the schema's columns."""
    try:
        names = read_data_file(storage, directory, name).column_names
    except Exception as exc:  # a truncated or foreign file: report it, check the others
        return [f"{name}: does not read as the table's records format ({exc})"]
    return [] if names == list(fields) else [f"{name}: columns {names} differ from the schema fields {list(fields)}"]


def _rows_in(storage: Storage, directory: str, name: str) -> int:
    if format_of_name(name) == "parquet":
        with storage.open_input(f"{directory}/{name}") as src:
            return int(pq.read_metadata(src).num_rows)
    return read_data_file(storage, directory, name).num_rows


def _check_format(storage: Storage, directory: str, names: list[str], fmt: str) -> tuple[list[str], dict[str, Any]]:
    formats = [n for n in names if n.startswith("_format_")]
    if formats != [f"_format_{fmt}"]:
        return [f"_format_{fmt}: expected exactly this format file, found {formats}"], {}
    if fmt != "delimited":
        return [], {}
    hints = json.loads(storage.read_bytes(f"{directory}/_format_delimited")).get("hints", {})
    if sorted(hints) != sorted(HINTS):
        return [f"_format_delimited: hints {sorted(hints)} are not the 13 of the records spec"], hints
    return [], hints


def _check_manifest(storage: Storage, directory: str, data_files: list[str], elsewhere: dict[str, str]) -> list[str]:
    try:
        manifest = json.loads(storage.read_bytes(f"{directory}/{records.MANIFEST}"))
    except FileNotFoundError:
        return [f"{records.MANIFEST}: missing"]
    except ValueError as exc:
        return [f"{records.MANIFEST}: not JSON ({exc})"]
    entries = manifest.get("entries", [])
    problems = [] if entries else [f"{records.MANIFEST}: no entries (an empty table needs one zero-row file)"]
    other = {storage.url(path): (shown, path) for shown, path in elsewhere.items()}
    problems += _check_entries_elsewhere(storage, [e for e in entries if e.get("url") in other], other)
    entries = [e for e in entries if e.get("url") not in other]
    listed = [str(e.get("url", "")).rsplit("/", 1)[-1] for e in entries]
    for name, entry in zip(listed, entries, strict=True):
        if entry.get("url") != storage.url(f"{directory}/{name}"):
            problems.append(f"{records.MANIFEST}: URL {entry.get('url')!r} is not the absolute URL of {name}")
        if entry.get("mandatory") is not True:
            problems.append(f"{records.MANIFEST}: entry {name} is not mandatory")
        size = entry.get("meta", {}).get("content_length")
        if name in data_files and size != storage.size(f"{directory}/{name}"):
            problems.append(f"{records.MANIFEST}: content_length of {name} is {size}, "
                            f"the file has {storage.size(f'{directory}/{name}')}")
    problems += [f"{n}: listed in {records.MANIFEST} but missing" for n in sorted(set(listed) - set(data_files))]
    problems += [f"{n}: data file not listed in {records.MANIFEST}" for n in sorted(set(data_files) - set(listed))]
    repeated = sorted({n for n in listed if listed.count(n) > 1})
    problems += [f"{records.MANIFEST}: lists {n} more than once" for n in repeated]
    return problems


def _check_entries_elsewhere(storage: Storage, entries: list[dict[str, Any]],
                             other: dict[str, tuple[str, str]]) -> list[str]:
    """The manifest's entries for files stored in earlier versions' directories: there, mandatory, true sizes."""
    problems = []
    for entry in entries:
        shown, path = other[entry["url"]]
        if entry.get("mandatory") is not True:
            problems.append(f"{records.MANIFEST}: entry {shown} is not mandatory")
        try:
            size = storage.size(path)
        except FileNotFoundError:
            problems.append(f"{shown}: listed in {records.MANIFEST} but missing")
            continue
        if entry.get("meta", {}).get("content_length") != size:
            problems.append(f"{records.MANIFEST}: content_length of {shown} is "
                            f"{entry.get('meta', {}).get('content_length')}, the file has {size}")
    return problems


def _check_schema(storage: Storage, directory: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The schema's fields (None when unreadable) and the schema files' problems."""
    import jsonschema

    try:
        text = storage.read_bytes(f"{directory}/{records.SCHEMA_JSON}")
        schema_doc = json.loads(text)
    except FileNotFoundError:
        return None, [f"{records.SCHEMA_JSON}: missing"]
    except ValueError as exc:
        return None, [f"{records.SCHEMA_JSON}: not JSON ({exc})"]
    problems = []
    if not storage.exists(f"{directory}/{records.SCHEMA_LEGACY}") \
            or storage.read_bytes(f"{directory}/{records.SCHEMA_LEGACY}") != text:
        problems.append(f"{records.SCHEMA_LEGACY}: missing or differs from {records.SCHEMA_JSON}")
    meta_schema = json.loads(resources.files("destination.on_disk").joinpath("records_schema_v1.json").read_text())
    try:
        jsonschema.validate(schema_doc, meta_schema)
    except jsonschema.ValidationError as exc:
        return None, problems + [f"{records.SCHEMA_JSON}: not valid records schema v1: {exc.message}"]
    fields = schema_doc.get("fields", {})
    if [f["index"] for f in fields.values()] != list(range(1, len(fields) + 1)):
        problems.append(f"{records.SCHEMA_JSON}: field indexes are not 1..n in order")
    return fields, problems


def _check_parquet_columns(storage: Storage, directory: str, name: str, fields: dict[str, Any]) -> list[str]:
    try:
        with storage.open_input(f"{directory}/{name}") as src:
            arrow_schema = pq.read_schema(src)
    except Exception as exc:  # a truncated or foreign file: report it, check the others
        return [f"{name}: not a readable Parquet file ({exc})"]
    if arrow_schema.names != list(fields):
        return [f"{name}: Parquet columns {arrow_schema.names} differ from the schema fields {list(fields)}"]
    return [f"{name}: column {f.name!r} is {f.type}, not a {fields[f.name]['type']}" for f in arrow_schema
            if not str(f.type).startswith(_TYPES[fields[f.name]["type"]])]


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


# ---- a whole table -----------------------------------------------------------------------------


def committed_versions(storage: Storage, prefix: str) -> list[int]:
    """The version numbers of the table's commit records (`_log/<N>.json`), ascending."""
    return sorted(int(n[:-len(".json")]) for n in storage.list_children(f"{prefix}/_log")
                  if n.endswith(".json") and n[:-len(".json")].isdigit())


def validate_table(storage: Storage, schema: str, table: str, retention: Retention | None = None) -> list[str]:
    """Problems of every committed version of the table, each as `<file below the table>: <problem>`.
    A version directory older than `retention` keeps is allowed to be gone (its commit record too, once pruned:
    `_log/_pruned.json`)."""
    prefix = layout.table_prefix(schema, table)
    versions = committed_versions(storage, prefix)
    if not versions:
        return ["_log: no commit record (not a table?)"]
    first_record, problems = _first_record(storage, prefix)
    gaps = sorted(set(range(first_record, versions[-1] + 1)) - set(versions))
    problems += [f"_log/{n:0{layout.VERSION_DIGITS}d}.json: commit record missing (versions skip it)" for n in gaps]
    for n in (v for v in versions if v >= first_record):  # a record before it: a pruning cut short, still retired
        problems += _validate_committed(storage, prefix, n, versions[-1], retention or Retention())
    return problems


def _first_record(storage: Storage, prefix: str) -> tuple[int, list[str]]:
    """The first version whose commit record `_log/` keeps: the ones before were retired and their records pruned
    (`_log/_pruned.json`, destination/store/log_pruning.py); 1 when none were, or when the summary is unreadable (a
    problem, with the records it stood for reported missing)."""
    try:
        return int(json.loads(storage.read_bytes(layout.pruned_log_path(prefix)))["first_record"]), []
    except FileNotFoundError:
        return 1, []
    except (ValueError, KeyError, TypeError) as exc:
        return 1, [f"_log/_pruned.json: unreadable summary of the pruned commit records ({exc!r})"]


def _validate_committed(storage: Storage, prefix: str, n: int, latest: int, retention: Retention) -> list[str]:
    log_name = f"_log/{n:0{layout.VERSION_DIGITS}d}.json"
    try:
        record = json.loads(storage.read_bytes(layout.log_path(prefix, n)))
    except ValueError as exc:
        return [f"{log_name}: not JSON ({exc})"]
    problems = []
    if record.get("version") != n or record.get("directory") != layout.version_dir_name(n):
        problems.append(f"{log_name}: names version {record.get('version')} in {record.get('directory')!r}, "
                        f"not {n} in {layout.version_dir_name(n)!r}")
    directory = layout.version_dir(prefix, n)
    # retired: no metadata left, at most data files that later versions list (referencing layout)
    retired = not any(name.startswith("_") for name in storage.list_children(directory))
    if not retired:
        problems += _within(layout.version_dir_name(n), validate_version(storage, directory)
                            + _check_table_files(storage, directory, n))
    elif not _may_be_retired(storage, prefix, n, latest, retention):
        problems.append(f"{layout.version_dir_name(n)}: missing, but its commit record {log_name} exists")
    if "changes" in record:
        problems += _check_change_directory(storage, prefix, n, record["changes"].get("directory"))
    return problems


def _may_be_retired(storage: Storage, prefix: str, n: int, latest: int, retention: Retention) -> bool:
    """Whether retention may have removed version n: not among the newest it keeps, superseded long enough ago."""
    if n > latest - retention.keep_versions:
        return False
    successor = json.loads(storage.read_bytes(layout.log_path(prefix, n + 1)))
    return time.time() - float(successor.get("committed_at", 0.0)) >= retention.min_age_seconds


def _check_table_files(storage: Storage, directory: str, n: int) -> list[str]:
    """`_table.json` names the version; `_files.json` lists the data files with their Parquet row counts."""
    try:
        about = json.loads(storage.read_bytes(f"{directory}/{records.TABLE_JSON}"))
        listed = json.loads(storage.read_bytes(f"{directory}/{records.FILES_JSON}"))["files"]
    except (FileNotFoundError, ValueError, KeyError) as exc:
        return [f"{records.TABLE_JSON}/{records.FILES_JSON}: missing or unreadable ({exc!r})"]
    problems = [] if about.get("version") == n else [f"{records.TABLE_JSON}: names version {about.get('version')}"]
    data_files = {name for name in storage.list_children(directory) if not name.startswith(("_", "."))}
    for entry in listed:
        name = entry.get("name")
        folder = file_dir(directory, DataFile.from_json(entry))
        if folder == directory and name not in data_files:
            problems.append(f"{records.FILES_JSON}: lists {name}, which is not in the directory")
            continue
        if folder != directory and not storage.exists(f"{folder}/{name}"):
            problems.append(f"{records.FILES_JSON}: lists {entry.get('stored_in')}/{name}, which is not there")
            continue
        try:
            rows = _rows_in(storage, folder, name)
        except Exception:  # reported as unreadable by the directory check
            continue
        if rows != entry.get("rows"):
            problems.append(f"{records.FILES_JSON}: {name} has {rows} rows, not {entry.get('rows')}")
    if not problems:
        problems += _check_placement(storage, directory, TableDef.from_json(about["table"]),
                                     [DataFile.from_json(entry) for entry in listed])
    return problems


def _check_placement(storage: Storage, directory: str, table: TableDef, files: list[DataFile]) -> list[str]:
    """A table in key ranges: each file's rows in key order, its first and last key as `_files.json` says, and no
    two files' ranges overlapping (a write routes each key to the one file whose range holds it)."""
    if not table.in_key_ranges:
        return []
    problems: list[str] = []
    for f in files:
        if not f.rows:
            continue
        try:
            stored = read_data_file(storage, file_dir(directory, f), f.name, [c.name for c in table.entity_key])
        except Exception:  # reported as unreadable by the directory check
            continue
        keys = key_columns_of(stored, table)
        order = pc.sort_indices(keys, sort_keys=sort_keys(table, with_start=False)).to_numpy()
        if not np.array_equal(order, np.arange(len(order))):
            problems.append(f"{f.name}: rows are not in primary-key order")
        ends = first_and_last(keys, table, in_key_order=True)
        if ends != (f.first_key, f.last_key):
            problems.append(f"{records.FILES_JSON}: {f.name} says its keys run from {f.first_key} to {f.last_key}, "
                            f"the file from {ends[0] if ends else None} to {ends[1] if ends else None}")
    ordered = in_key_order(files, table)
    if len(ordered) > 1:
        lasts = keys_from_json([f.last_key for f in ordered[:-1] if f.last_key is not None], table)
        firsts = keys_from_json([f.first_key for f in ordered[1:] if f.first_key is not None], table)
        for i in range(len(ordered) - 1):
            if count_bounds_below(firsts.slice(i, 1), lasts.slice(i, 1), inclusive=False)[0] == 0:  # not last < next
                problems.append(f"{ordered[i].name} and {ordered[i + 1].name}: their key ranges overlap")
    return problems


def _check_change_directory(storage: Storage, prefix: str, n: int, named: str | None) -> list[str]:
    expected = f"changes/{layout.version_dir_name(n)}"
    if named != expected:
        return [f"_log/{n:0{layout.VERSION_DIGITS}d}.json: names the change directory {named!r}, not {expected!r}"]
    directory = layout.changes_dir(prefix, n)
    try:
        about = json.loads(storage.read_bytes(f"{directory}/_changes.json"))
    except FileNotFoundError:
        return [f"{expected}: the commit record names it but it has no _changes.json"]
    except ValueError as exc:
        return [f"{expected}/_changes.json: not JSON ({exc})"]
    fmt = "parquet" if about.get("format") == "parquet" else "delimited"
    return _within(expected, validate_directory(storage, directory, fmt))


def _within(folder: str, problems: list[str]) -> list[str]:
    return [f"{folder}/{p}" for p in problems]


# ---- the command -------------------------------------------------------------------------------


def validate_command(storage: Storage, name: str | None) -> int:
    """`records-destination validate [SCHEMA.TABLE]`: one line per problem; 0 when every table is valid,
    1 when anything is wrong, 2 for a table argument that is not SCHEMA.TABLE."""
    if name is not None and "." not in name:
        print("give the table as SCHEMA.TABLE")
        return 2
    tables = _tables_named(TableStore(storage), name)
    defects = 0
    for schema, table in tables:
        problems = validate_table(storage, schema, table)
        for problem in problems:
            print(f"{schema}.{table}: {problem}")
        defects += len(problems)
        if not problems:
            versions = committed_versions(storage, layout.table_prefix(schema, table))
            print(f"{schema}.{table}: {len(versions)} versions ok")
    print(f"{len(tables)} tables checked, {defects} problems")
    return 1 if defects else 0


def _tables_named(store: TableStore, name: str | None) -> list[tuple[str, str]]:
    """(schema, table) of `name` (SCHEMA.TABLE), or of every table under the root."""
    if name is not None:
        schema, table = name.split(".", 1)
        return [(schema, table)]
    return [(schema, table) for schema in store.list_schemas() for table in store.list_tables(schema)]
