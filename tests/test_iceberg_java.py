"""Apache Iceberg's own Java library (1.10) inside real Spark 3.5, the reference reader of Iceberg (tests/iceberg_spark.py),
reads the tables by path: every table the public tester inputs write equals its records version row for row, the
previous snapshot too (time travel by snapshot id); and a table whose files' column order differs from the field id
order (a column added, the key changed) reads every value in its column, mapping the files' columns by field id.
Through the `sql` catalog too (SQLite and PostgreSQL): Spark's Iceberg JdbcCatalog finds every tester table at its
latest version, the previous one by `VERSION AS OF`, and its catalog view follows drops, renames and ALTERs.
Avro tables (`records_format` avro) read back the same way. Local disk only: Spark 3.5 from PyPI has no S3 filesystem
(hadoop-aws is not on PyPI)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from destination.model.table_model import DESTINATION_META, ColumnDef
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.tester.harness import Harness
from tests.conftest import spec_of
from tests.iceberg_spark import jdbc_catalog
from tests.lake_readers import iceberg_duckdb, iceberg_pyiceberg, rows
from tests.test_conformance import ALL_INPUTS, RECORDS_INPUTS
from tests.test_iceberg_format import BASE, KEYED, WITH_NOTE, Lake, _rows, assign
from tests.test_table_formats import check_field_ids, columns_in, records_rows
from tests.tester_inputs import present

Reader = Callable[..., list[dict[str, Any]]]


def metadata_path(root: Path, prefix: str, version: int) -> str:
    return str(root / prefix / "metadata" / f"v{version}.metadata.json")


Check = tuple[str, Storage, TableVersion, dict[str, Any]]  # label, storage, records version, the reader's request


def snapshot_reads(root: Path, storage: Storage, label: str) -> list[Check]:
    """Each table of the root's `tester` schema: its latest snapshot and the one before it as requests to the Java
    reader, with the records versions they must equal (each latest version's data files' field ids checked)."""
    store = TableStore(storage)
    checks: list[Check] = []
    for name in store.list_tables("tester"):
        latest = store.load("tester", name)
        assert latest is not None
        check_field_ids(storage, latest)
        location = metadata_path(root, latest.prefix, latest.version)
        checks.append((f"{label} {name}", storage, latest, {"path": location}))
        if latest.version > 1:
            before = store.load("tester", name, latest.version - 1)
            assert before is not None
            checks.append((f"{label} {name} version {before.version}", storage, before,
                           {"path": location, "snapshot_id": before.version}))
    return checks


def test_every_tester_table_reads_back_in_spark_with_iceberg_java(grpc_server, through_spark_tasks,  # type: ignore[no-untyped-def]
                                                                  iceberg_java: Reader, tmp_path: Path) -> None:
    """Each public tester input into a root of its own, its files written in Spark tasks, every data file carrying
    the field ids of the Iceberg schema; then one Spark session reads every table's latest snapshot and the one
    before it, compared with the records versions (read by pyarrow). A NAIVE_TIME column is not in the
    Iceberg schema (Spark refuses a `time` field; docs/reference/types.md): the table comment names it."""
    checks: list[Check] = []
    for index, path in enumerate(present(ALL_INPUTS)):
        root = tmp_path / f"root{index}"
        configuration = {"root": str(root)}
        (tmp_path / f"work{index}").mkdir()
        harness = Harness(grpc_server, "tester", configuration, plain_text=False, batch_file_type="csv",
                          workdir=tmp_path / f"work{index}")
        harness.run_file(path)
        assert harness.failures == 0, path
        found = snapshot_reads(root, open_storage(spec_of(configuration)), f"{path.parent.name}/{path.name}")
        for label, _storage, latest, request in found:
            if "snapshot_id" not in request:
                times = [f"{c.name} NAIVE_TIME" for c in latest.table.columns if c.type == "NAIVE_TIME"]
                comment = json.loads(Path(request["path"]).read_text())["properties"].get("comment", "")
                assert all(t in comment for t in times), label
        checks += found
    assert any("input_all_data_types.json" in label for label, *_ in checks)
    answers = iceberg_java([request for *_, request in checks])
    for (label, storage, version, _), answer in zip(checks, answers, strict=True):
        assert "error" not in answer, f"{label}: {answer.get('error')}"
        columns = columns_in(version.table, "iceberg")
        assert answer["columns"] == columns, label
        assert rows(answer["rows"], columns) == rows(records_rows(storage, version), columns), label


def test_avro_tables_read_back_in_spark_with_iceberg_java(grpc_server, iceberg_java: Reader, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The records formats' representative tester inputs in `records_format` avro, and the every-type input without
    its NAIVE_TIME column: every Avro data file carries the Iceberg schema's field ids, and Iceberg's Java library
    in Spark reads each table's latest snapshot and the one before it (the snapshots list the Avro files) as the
    records versions hold them. A table with a NAIVE_TIME column it refuses (Spark has no time type, and its Avro
    reader refuses a `time-micros` field even when not selected), and pyiceberg and DuckDB refuse Avro data files:
    each with the error docs/reference/records-formats.md quotes."""
    every_type = json.loads(present(RECORDS_INPUTS)[0].read_text())
    assert RECORDS_INPUTS[0].name == "input_all_data_types.json"
    every_type["create_table"]["all_data_types"]["columns"].pop("nt")
    for op in every_type["ops"]:
        for rows_of_op in op.values():
            for row in (r for table_rows in rows_of_op.values() for r in table_rows):
                row.pop("nt", None)
    without_time = tmp_path / "input_all_data_types_but_time.json"
    without_time.write_text(json.dumps(every_type))
    checks: list[Check] = []
    for index, path in enumerate([*RECORDS_INPUTS, without_time]):
        root = tmp_path / f"root{index}"
        configuration = {"root": str(root), "records_format": "avro"}
        (tmp_path / f"work{index}").mkdir()
        harness = Harness(grpc_server, "tester", configuration, plain_text=False, batch_file_type="csv",
                          workdir=tmp_path / f"work{index}")
        harness.run_file(path)
        assert harness.failures == 0, path
        found = snapshot_reads(root, open_storage(spec_of(configuration)), path.name)
        assert found and all(version.table.stored_format == "avro" for _, _, version, _ in found)
        checks += found
    assert any("but_time.json all_data_types" in label for label, *_ in checks)
    answers = iceberg_java([request for *_, request in checks])
    for (label, storage, version, _), answer in zip(checks, answers, strict=True):
        if any(c.type == "NAIVE_TIME" for c in version.table.columns):
            assert "Unknown logical type" in answer.get("error", "") and "TimeMicros" in answer["error"], label
            continue
        assert "error" not in answer, f"{label}: {answer.get('error')}"
        columns = columns_in(version.table, "iceberg")
        assert answer["columns"] == columns, label
        assert rows(answer["rows"], columns) == rows(records_rows(storage, version), columns), label
    _label, storage, version, _request = checks[-1]
    url = storage.url(version.prefix)
    with pytest.raises(ValueError, match=r"Unsupported file format: FileFormat\.AVRO"):
        iceberg_pyiceberg(storage.spec, url)
    with pytest.raises(duckdb.NotImplementedException, match=r"File format 'AVRO' not supported"):
        iceberg_duckdb(storage.spec, url)


def quoted(*names: str) -> str:
    return ".".join("`" + n.replace("`", "``") + "`" for n in names)


# The sql catalog in SQLite is read by the same JdbcCatalog as in PostgreSQL, over the same entries: the PostgreSQL
# case reads every input's tables; the SQLite case the inputs that drop, rename and ALTER tables, every type's table
# and an input that writes none
SQLITE_INPUTS = ("clickhouse/schema_migrations_input_dml.json", "clickhouse/schema_migrations_input_ddl.json",
                 "clickhouse/input_all_data_types.json", "clickhouse/input_table_not_found.json")


def inputs_for(catalog_uri: str) -> list[Path]:
    inputs = present(ALL_INPUTS)
    if not catalog_uri.startswith("sqlite"):
        return inputs
    chosen = [path for path in inputs if f"{path.parent.name}/{path.name}" in SQLITE_INPUTS]
    assert len(chosen) == len(SQLITE_INPUTS), chosen
    return chosen


def test_every_tester_table_is_found_through_the_sql_catalog_by_spark(  # type: ignore[no-untyped-def]
        grpc_server, iceberg_java: Reader, catalog_uri: str, tmp_path: Path) -> None:
    """Each public tester input (plain, history, every migration) into a root of its own with the `sql` catalog on
    (one catalog name per input, one database); then one Spark session with Iceberg's JdbcCatalog under each name
    (docs/guide/catalogs.md's configuration): SHOW TABLES lists exactly the tables the root holds (drops and renames
    followed), DESCRIBE gives each table's latest columns (ALTERs followed), `SELECT *` its latest records
    version's rows and `VERSION AS OF` the previous version's."""
    settings: dict[str, str] = {}
    requests: list[dict[str, Any]] = []
    expected: list[tuple[str, Callable[[dict[str, Any]], None]]] = []  # per request: its label and its check
    altered = []
    inputs = inputs_for(catalog_uri)
    for index, path in enumerate(inputs):
        name, root = f"in{index}", tmp_path / f"root{index}"
        configuration = {"root": str(root), "catalog": "sql", "catalog_uri": catalog_uri, "catalog_name": name}
        (tmp_path / f"work{index}").mkdir()
        harness = Harness(grpc_server, "tester", configuration, plain_text=False, batch_file_type="csv",
                          workdir=tmp_path / f"work{index}")
        harness.run_file(path)
        assert harness.failures == 0, path
        settings |= jdbc_catalog(name, catalog_uri, str(root))
        storage = open_storage(spec_of(configuration))
        store = TableStore(storage)
        names = store.list_tables("tester")
        if not names:  # an input that writes no table (input_table_not_found.json)
            continue
        requests.append({"sql": f"SHOW TABLES IN {quoted(name, 'tester')}"})
        expected.append((f"{path.name} SHOW TABLES", _listing(names)))
        for table in names:
            latest = store.load("tester", table)
            assert latest is not None
            label, columns, at = f"{path.name} {table}", columns_in(latest.table, "iceberg"), quoted(name, "tester", table)
            requests += [{"sql": f"DESCRIBE {at}"}, {"sql": f"SELECT * FROM {at}"}]
            expected += [(f"{label} DESCRIBE", _described(columns)),
                         (label, _rows_of(storage, latest, columns))]
            previous = store.load("tester", table, latest.version - 1) if latest.version > 1 else None
            if previous is not None:
                earlier = columns_in(previous.table, "iceberg")
                if earlier != columns:
                    altered.append(label)
                requests.append({"sql": f"SELECT * FROM {at} VERSION AS OF {previous.version}"})
                expected.append((f"{label} version {previous.version}",
                                 _rows_of(storage, previous, [c for c in earlier if c in columns])))
    assert altered, "no tester table changed its columns: the ALTER case is not covered"
    assert any("drop_table" in p.read_text() for p in inputs) and any("rename_table" in p.read_text() for p in inputs)
    answers = iceberg_java(requests, settings)
    for (label, check), answer in zip(expected, answers, strict=True):
        assert "error" not in answer, f"{label}: {answer.get('error')}"
        try:
            check(answer)
        except AssertionError as exc:
            raise AssertionError(f"{label}: {exc}") from exc


def _listing(names: list[str]) -> Callable[[dict[str, Any]], None]:
    def check(answer: dict[str, Any]) -> None:
        assert sorted(r["tableName"] for r in answer["rows"]) == sorted(names)
    return check


def _described(columns: list[str]) -> Callable[[dict[str, Any]], None]:
    def check(answer: dict[str, Any]) -> None:
        described = [r["col_name"] for r in answer["rows"]]
        assert described[:len(columns)] == columns
        assert all(c == "" or c.startswith("#") for c in described[len(columns):])  # partitioning lines only
    return check


def _rows_of(storage: Storage, version: TableVersion, columns: list[str]) -> Callable[[dict[str, Any]], None]:
    def check(answer: dict[str, Any]) -> None:
        assert rows(answer["rows"], columns) == rows(records_rows(storage, version), columns)
    return check


def test_a_table_whose_file_order_differs_from_the_id_order_reads_right(iceberg_java: Reader, tmp_path: Path) -> None:
    """Spark's Iceberg reader maps the files' columns by their field ids (it would use the name mapping for files
    without: this checks the ids agree with the schema; tests/test_iceberg_format.py's by-id reader is the one that
    fails on files without ids)."""
    storage = open_storage(StorageSpec(root=str(tmp_path / "root")))
    lake = Lake(storage)
    a = lake.write(1, BASE, _rows(range(0, 4)))
    lake.commit(1, BASE, [a])
    b = lake.write(2, WITH_NOTE, _rows(range(4, 8), note=True))
    lake.commit(2, WITH_NOTE, [a, b], operation="alter_table")
    rekeyed = assign(WITH_NOTE.with_columns([ColumnDef("id", "INT"), KEYED[1], ColumnDef("note", "STRING", True),
                                             KEYED[2]]))
    c = lake.write(3, rekeyed, _rows(range(8, 12), note=True))
    lake.commit(3, rekeyed, [a, b, c], operation="alter_table")
    ids = {name: field_id for name, field_id, _ in rekeyed.field_ids}
    order = [ids[name] for name in [*rekeyed.column_names, DESTINATION_META]]
    assert order != sorted(order)
    (answer,) = iceberg_java([{"path": metadata_path(tmp_path / "root", lake.prefix, 3)}])
    assert "error" not in answer, answer.get("error")
    columns = [*rekeyed.column_names, DESTINATION_META]
    expected = []  # the files read by name (pyarrow), a column a file lacks as null
    for f in lake.versions[3].files:
        expected += [{name: row.get(name) for name in columns} for row in _read(storage, f"{lake.prefix}/{f.path}")]
    assert rows(answer["rows"], columns) == rows(expected, columns)


def _read(storage: Storage, path: str) -> list[dict[str, Any]]:
    with storage.open_input(path) as source:
        return pq.read_table(source).to_pylist()
