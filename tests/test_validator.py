"""The records-directory validator and the `validate` command: a table written through the server (with change
files) is valid on both backends, and each defect the validator claims to catch, made by hand in that table, is
reported as one line naming the version, the file and the defect (then undone, after which the table is valid again)."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from destination.commands.validator import validate_table
from destination.on_disk import layout, records
from destination.on_disk.datafiles import DataFile
from destination.on_disk.locations import file_dir
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from tests.conftest import spec_of
from tests.rpc_helpers import table
from tests.test_write_path import SYS, create, r, write

BIN = Path(sys.executable).parent / "records-destination"
SCHEMA, NAME = "checked", "t"
PREFIX = layout.table_prefix(SCHEMA, NAME)
LATEST = 3  # CreateTable, a load, an update
V3 = layout.version_dir_name(3)
Defect = Callable[[Storage], str]  # breaks the table; returns the text the validator must report


def build_table(stub, configuration: dict[str, str], tmp_path: Path) -> Storage:  # type: ignore[no-untyped-def]
    changes = {**configuration, "changes": "parquet"}
    t = table(NAME, [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, changes, SCHEMA, t)
    write(stub, changes, SCHEMA, t, tmp_path, replace=[r(i, f"v{i}") for i in range(40)])
    write(stub, changes, SCHEMA, t, tmp_path, update=[r(3, "new")])
    return open_storage(spec_of(configuration))


def data_files(storage: Storage, directory: str) -> list[str]:
    return [n for n in storage.list_children(directory) if not n.startswith("_")]


def edit_json(storage: Storage, path: str, change: Callable[[dict], None]) -> None:
    doc = json.loads(storage.read_bytes(path))
    change(doc)
    storage.write_bytes(path, records.dumps(doc))


def missing_data_file(storage: Storage) -> str:
    name = data_files(storage, f"{PREFIX}/{V3}")[0]
    storage.delete(f"{PREFIX}/{V3}/{name}")
    return f"{V3}/{name}: listed in _manifest but missing"


def manifest_length_wrong(storage: Storage) -> str:
    def grow(doc: dict) -> None:
        doc["entries"][0]["meta"]["content_length"] += 1
    edit_json(storage, f"{PREFIX}/{V3}/_manifest", grow)
    return f"{V3}/_manifest: content_length of"


def schema_files_differ(storage: Storage) -> str:
    edit_json(storage, f"{PREFIX}/{V3}/_schema", lambda doc: doc["fields"].pop("v"))
    return f"{V3}/_schema: missing or differs from _schema.json"


def schema_names_other_columns(storage: Storage) -> str:
    def rename(doc: dict) -> None:
        doc["fields"] = {("value" if k == "v" else k): f for k, f in doc["fields"].items()}
    for name in (records.SCHEMA_JSON, records.SCHEMA_LEGACY):
        edit_json(storage, f"{PREFIX}/{V3}/{name}", rename)
    return "differ from the schema fields"


def format_file_missing(storage: Storage) -> str:
    storage.delete(f"{PREFIX}/{V3}/_format_parquet")
    return f"{V3}/_format_parquet: expected exactly this format file, found []"


def parquet_column_type_wrong(storage: Storage) -> str:
    """A data file whose LONG column `n` holds strings (the manifest's length fixed to match)."""
    directory = f"{PREFIX}/{V3}"
    name = data_files(storage, directory)[0]
    rows = pq.read_table(io.BytesIO(storage.read_bytes(f"{directory}/{name}")))
    rows = rows.set_column(rows.column_names.index("n"), "n", rows.column("n").cast(pa.string()))
    out = io.BytesIO()
    pq.write_table(rows, out)
    storage.write_bytes(f"{directory}/{name}", out.getvalue())

    def resize(doc: dict) -> None:
        for entry in doc["entries"]:
            if entry["url"].endswith(name):
                entry["meta"]["content_length"] = len(out.getvalue())
    edit_json(storage, f"{directory}/_manifest", resize)
    return f"{V3}/{name}: column 'n' is string, not a integer"


def data_file_not_parquet(storage: Storage) -> str:
    directory = f"{PREFIX}/{V3}"
    name = data_files(storage, directory)[0]
    storage.write_bytes(f"{directory}/{name}", b"not parquet" * 10)
    return f"{V3}/{name}: not a readable Parquet file"


def row_count_wrong(storage: Storage) -> str:
    def miscount(doc: dict) -> None:
        doc["files"][0]["rows"] += 5
    edit_json(storage, f"{PREFIX}/{V3}/_files.json", miscount)
    return f"{V3}/_files.json: "


def key_range_wrong(storage: Storage) -> str:
    def widen(doc: dict) -> None:
        entry = next(f for f in doc["files"] if f["rows"])
        entry["last_key"] = [entry["last_key"][0] + 1_000_000]
    edit_json(storage, f"{PREFIX}/{V3}/_files.json", widen)
    return f"{V3}/_files.json: "


def leftover_metadata(storage: Storage) -> str:
    storage.write_bytes(f"{PREFIX}/{V3}/_staging", b"")
    return f"{V3}/_staging: unexpected metadata name"


def commit_record_without_directory(storage: Storage) -> str:
    storage.delete_prefix(f"{PREFIX}/{V3}")
    return f"{V3}: missing, but its commit record _log/{3:020d}.json exists"


def commit_record_names_another_version(storage: Storage) -> str:
    edit_json(storage, layout.log_path(PREFIX, 2), lambda doc: doc.update(version=7))
    return f"_log/{2:020d}.json: names version 7"


def commit_record_missing(storage: Storage) -> str:
    storage.delete(layout.log_path(PREFIX, 2))
    return f"_log/{2:020d}.json: commit record missing"


def change_directory_without_manifest(storage: Storage) -> str:
    storage.delete(f"{PREFIX}/changes/{V3}/_manifest")
    return f"changes/{V3}/_manifest: missing"


def change_file_missing(storage: Storage) -> str:
    name = data_files(storage, f"{PREFIX}/changes/{V3}")[0]
    storage.delete(f"{PREFIX}/changes/{V3}/{name}")
    return f"changes/{V3}/{name}: listed in _manifest but missing"


def change_directory_missing(storage: Storage) -> str:
    storage.delete_prefix(f"{PREFIX}/changes/{layout.version_dir_name(2)}")
    return f"changes/{layout.version_dir_name(2)}: the commit record names it but it has no _changes.json"


DEFECTS: list[Defect] = [
    missing_data_file, manifest_length_wrong, schema_files_differ, schema_names_other_columns, format_file_missing,
    parquet_column_type_wrong, data_file_not_parquet, row_count_wrong, key_range_wrong, leftover_metadata,
    commit_record_without_directory, commit_record_names_another_version, commit_record_missing,
    change_directory_without_manifest, change_file_missing, change_directory_missing,
]


def saved(storage: Storage) -> dict[str, bytes]:
    return {o.path: storage.read_bytes(o.path) for o in storage.list_recursive(PREFIX)}


def restore(storage: Storage, objects: dict[str, bytes]) -> None:
    storage.delete_prefix(PREFIX)
    for path, body in objects.items():
        storage.write_bytes(path, body)


def test_the_validator_reports_each_defect(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    storage = build_table(stub, configuration, tmp_path)
    assert validate_table(storage, SCHEMA, NAME) == []
    assert len(storage.list_children(f"{PREFIX}/_log")) == LATEST  # three commit records, no claims left
    original = saved(storage)
    for defect in DEFECTS:
        expected = defect(storage)
        problems = validate_table(storage, SCHEMA, NAME)
        assert any(expected in p for p in problems), f"{defect.__name__}: {expected!r} not in {problems}"
        restore(storage, original)
        assert validate_table(storage, SCHEMA, NAME) == [], defect.__name__


def test_an_old_version_may_be_gone_but_not_a_recent_one(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Retention removes version directories that are not among the last 2 and were superseded over an hour ago."""
    storage = build_table(stub, configuration, tmp_path)
    v1 = layout.version_dir_name(1)
    retire(storage, 1)
    assert [p for p in validate_table(storage, SCHEMA, NAME) if p.startswith(v1)] == \
        [f"{v1}: missing, but its commit record _log/{1:020d}.json exists"]  # superseded a moment ago: kept
    for n in (2, 3):
        edit_json(storage, layout.log_path(PREFIX, n), lambda doc: doc.update(committed_at=doc["committed_at"] - 3601))
    assert validate_table(storage, SCHEMA, NAME) == []
    v2 = layout.version_dir_name(2)
    retire(storage, 2)  # superseded long ago too, but among the last 2
    assert validate_table(storage, SCHEMA, NAME) == [f"{v2}: missing, but its commit record _log/{2:020d}.json exists"]


def retire(storage: Storage, n: int) -> None:
    """What retention removes of version n: its metadata, and its data files that the latest version does not list
    (in the complete layout, all of them; in the referencing layout, v<LATEST> lists some where v<n> holds them)."""
    directory = layout.version_dir(PREFIX, n)
    latest = layout.version_dir(PREFIX, LATEST)
    files = [DataFile.from_json(f) for f in json.loads(storage.read_bytes(f"{latest}/{records.FILES_JSON}"))["files"]]
    listed = {f"{file_dir(latest, f)}/{f.name}" for f in files}
    for name in storage.list_children(directory):
        if f"{directory}/{name}" not in listed:
            storage.delete(f"{directory}/{name}")


def run_validate(configuration: dict[str, str], *table_name: str) -> subprocess.CompletedProcess[str]:
    s3 = ["--s3-endpoint", configuration["s3_endpoint"]] if "s3_endpoint" in configuration else []
    env = {**os.environ, "AWS_ACCESS_KEY_ID": configuration.get("aws_access_key_id", ""),
           "AWS_SECRET_ACCESS_KEY": configuration.get("aws_secret_access_key", "")}
    return subprocess.run([str(BIN), "validate", *table_name, "--root", configuration["root"], *s3],
                          capture_output=True, text=True, timeout=120, env=env)


def test_validate_command(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    storage = build_table(stub, configuration, tmp_path)
    clean = run_validate(configuration, f"{SCHEMA}.{NAME}")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"{SCHEMA}.{NAME}: {LATEST} versions ok" in clean.stdout
    expected = [missing_data_file(storage), format_file_missing(storage)]
    broken = run_validate(configuration)  # no table: every table under the root
    assert broken.returncode == 1, broken.stdout + broken.stderr
    lines = broken.stdout.splitlines()
    for text in expected:
        assert any(line.startswith(f"{SCHEMA}.{NAME}: {text}") for line in lines), (text, lines)
    problem_lines = [line for line in lines if line.startswith(f"{SCHEMA}.{NAME}: ")]
    assert lines[-1] == f"1 tables checked, {len(problem_lines)} problems" and len(problem_lines) >= len(expected)
    absent = run_validate(configuration, f"{SCHEMA}.nothing")
    assert absent.returncode == 1 and f"{SCHEMA}.nothing: _log: no commit record" in absent.stdout
