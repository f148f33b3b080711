"""Every tester input (plain and history tables), driven through the server by the harness, on both backends and in
CSV and Parquet batch-file modes, ends in the state the protocol implies (row by row, against the reference model),
history tables keep their invariants, and every committed version passes the records-directory validator."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from destination.commands.validator import validate_table
from destination.model.table_model import SYNCED
from destination.on_disk.datafiles import read_data_file
from destination.on_disk.locations import file_dir, file_path
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from destination.tester.harness import Harness
from tests.conftest import spec_of
from tests.reference_model import (
    ACTIVE,
    DELETED,
    END,
    FIRST_STAMP_MS,
    LATEST_SYNCED,
    START,
    Model,
    ModelTable,
    canon,
    history_violations,
)
from tests.rpc_helpers import describe, rows_of
from tests.test_records_formats import as_fastavro_reads, oracle_rows, same
from tests.tester_inputs import input_files

CLICKHOUSE_FILES = input_files("clickhouse/input_*.json")
SDK_FILES = input_files("fivetran_partner_sdk/input.json", "fivetran_partner_sdk/operations_on_nonexistent_records/*.json")
MIGRATION_FILES = input_files("*/schema_migrations_input_*.json")
ALL_INPUTS = [*CLICKHOUSE_FILES, *SDK_FILES, *MIGRATION_FILES]


class ModelClockHarness(Harness):
    """Stamps rows 1 ms apart from the model's first stamp, so the model knows every `_fivetran_synced`."""

    def stamp(self) -> int:
        self.last_ms = max(self.last_ms, FIRST_STAMP_MS - 1) + 1
        return self.last_ms


class InvariantHarness(ModelClockHarness):
    """After every WriteHistoryBatch and Migrate, every history table of the schema keeps its invariants."""

    def _answer(self, rpc: str, target: str, call: Any, request: Any) -> Any:
        response = super()._answer(rpc, target, call, request)
        if rpc in ("WriteHistoryBatch", "Migrate"):
            store = TableStore(open_storage(spec_of(self.configuration)))
            for name in store.list_tables(self.schema):
                current = store.load(self.schema, name)
                if current is not None and current.table.is_history:
                    entity = [k for k in current.table.key_columns if k != START]
                    rows = rows_of(self.configuration, self.schema, name)
                    assert history_violations(rows, entity) == [], f"{name} after {rpc} {target}"
        return response


def run_harness(address: str, configuration: dict[str, str], path: Path, tmp_path: Path, batch_type: str) -> Harness:
    harness = InvariantHarness(address, "tester", configuration, plain_text=False, batch_file_type=batch_type,
                               workdir=tmp_path)
    harness.run_file(path)
    return harness


def model_of(path: Path) -> Model:
    model = Model()
    model.run(json.loads(path.read_text()))
    return model


def check_against_model(configuration: dict[str, str], model: Model) -> None:
    storage = open_storage(spec_of(configuration))
    for name in model.tables:
        assert validate_table(storage, "tester", name) == [], f"{name}: a committed version is not valid"
    for name, table in model.tables.items():
        if table.history:
            check_history_table(configuration, name, table)
            continue
        stored = rows_of(configuration, "tester", name)
        got = {table.key(r): r for r in stored}
        assert len(got) == len(stored), f"{name}: duplicate keys stored"
        assert set(got) == set(table.rows), f"{name}: keys differ: stored {sorted(got)} expected {sorted(table.rows)}"
        for key, expected in table.rows.items():
            for column, ftype in [*table.types.items(), ("_fivetran_deleted", "BOOLEAN"), (SYNCED, "UTC_DATETIME")]:
                assert canon(got[key].get(column), ftype) == canon(expected.get(column), ftype), \
                    f"{name} {key} column {column}: stored {got[key].get(column)!r}, expected {expected.get(column)!r}"


def check_history_table(configuration: dict[str, str], name: str, table: ModelTable) -> None:
    stored = rows_of(configuration, "tester", name)
    assert history_violations(stored, table.pk) == []
    latest = max((canon(r[SYNCED], "UTC_DATETIME") for r in stored if r[SYNCED] is not None), default=None)
    for key in [k for k, r in table.rows.items() if r[START] == LATEST_SYNCED]:  # the model cannot know it
        resolved = {**table.rows.pop(key), START: latest}
        table.rows[table.version_key(resolved)] = resolved
    got = {table.version_key(r): r for r in stored}
    assert len(got) == len(stored), f"{name}: two versions with one key and start"
    assert set(got) == set(table.rows), f"{name}: versions differ: stored {sorted(got)} expected {sorted(table.rows)}"
    columns = [*table.types.items(), (START, "UTC_DATETIME"), (END, "UTC_DATETIME"), (ACTIVE, "BOOLEAN"),
               (DELETED, "BOOLEAN"), (SYNCED, "UTC_DATETIME")]
    for key, expected in table.rows.items():
        for column, ftype in columns:
            assert canon(got[key].get(column), ftype) == canon(expected.get(column), ftype), \
                f"{name} {key} column {column}: stored {got[key].get(column)!r}, expected {expected.get(column)!r}"


def referenced_tables(path: Path) -> set[str]:
    """Every table an input file names: created, altered, written, truncated or described."""
    data = json.loads(path.read_text())
    names = {*(data.get("create_table") or {}), *(data.get("alter_table") or {}), *(data.get("describe_table") or [])}
    for op in data.get("ops") or []:
        ((_kind, body),) = op.items()
        names.update(body)
    return names


def check_missing_tables(stub, configuration: dict[str, str], path: Path, model: Model) -> None:  # type: ignore[no-untyped-def]
    """A table the input names but never creates (or drops) is still unknown to DescribeTable: `not_found`."""
    for name in sorted(referenced_tables(path) - set(model.tables)):
        answer = describe(stub, configuration, "tester", name)
        assert answer.WhichOneof("response") == "not_found" and answer.not_found, f"{name}: {answer}"


@pytest.mark.parametrize("batch_type", ["csv", "parquet"])
@pytest.mark.parametrize("path", CLICKHOUSE_FILES, ids=lambda p: p.stem)
def test_clickhouse_inputs(grpc_server, stub, configuration, tmp_path, path: Path, batch_type: str) -> None:  # type: ignore[no-untyped-def]
    harness = run_harness(grpc_server, configuration, path, tmp_path, batch_type)
    assert harness.failures == 0
    model = model_of(path)
    check_against_model(configuration, model)
    check_missing_tables(stub, configuration, path, model)


@pytest.mark.parametrize("path", SDK_FILES, ids=lambda p: p.stem)
def test_sdk_inputs(grpc_server, stub, configuration, tmp_path, path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The SDK's files mix plain and history tables; every call succeeds and every table ends right."""
    harness = run_harness(grpc_server, configuration, path, tmp_path, "csv")
    out = capsys.readouterr().out
    assert harness.failures == 0, [line for line in out.splitlines() if line.startswith("FAIL")]
    model = model_of(path)
    check_against_model(configuration, model)
    check_missing_tables(stub, configuration, path, model)


@pytest.mark.parametrize("path", MIGRATION_FILES, ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_schema_migration_inputs(grpc_server, stub, configuration, tmp_path, path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Every schema-migration input (DDL, DML, sync modes, history mode) succeeds and every table ends right."""
    harness = run_harness(grpc_server, configuration, path, tmp_path, "csv")
    out = capsys.readouterr().out
    assert harness.failures == 0, [line for line in out.splitlines() if line.startswith("FAIL")]
    model = model_of(path)
    check_against_model(configuration, model)
    check_missing_tables(stub, configuration, path, model)
    store = TableStore(open_storage(spec_of(configuration)))
    assert sorted(store.list_tables("tester")) == sorted(model.tables)


# ---- the records formats: representative inputs (every data type, a key change, history mode, the DDL and DML
# migrations) in Avro and two delimited variants on both backends end in the model's rows, as Parquet does; the
# full matrix runs for Parquet above
CSV_ISO = {"records_dateformat": "YYYY-MM-DD", "records_datetimeformat": "YYYY-MM-DD HH24:MI:SS",
           "records_datetimeformattz": "YYYY-MM-DD HH:MI:SSOF"}
RECORDS_FORMATS = {"avro": {"records_format": "avro"},
                   "bluelabs": {"records_format": "delimited", "records_variant": "bluelabs"},
                   "csv-iso": {"records_format": "delimited", "records_variant": "csv", **CSV_ISO}}
RECORDS_INPUTS = input_files("clickhouse/input_all_data_types.json", "clickhouse/input_change_pk.json",
                               "fivetran_partner_sdk/input.json", "clickhouse/schema_migrations_input_ddl.json",
                               "clickhouse/schema_migrations_input_dml.json")


@pytest.mark.parametrize("records", list(RECORDS_FORMATS))
@pytest.mark.parametrize("path", RECORDS_INPUTS, ids=lambda p: p.stem)
def test_records_formats(grpc_server, stub, configuration, tmp_path, path: Path, records: str, capsys) -> None:  # type: ignore[no-untyped-def]
    run_in_format(grpc_server, configuration, tmp_path, path, records, capsys)


@pytest.mark.parametrize("records", ["avro", "bluelabs"])
@pytest.mark.parametrize("path", input_files("fivetran_partner_sdk/input.json"), ids=lambda p: p.stem)
def test_records_formats_through_spark_tasks(grpc_server, through_spark_tasks, configuration, tmp_path, path: Path,  # type: ignore[no-untyped-def]
                                             records: str, capsys) -> None:
    """The same in Spark tasks (each request's files decoded and merged there, data files written by the tasks)."""
    run_in_format(grpc_server, configuration, tmp_path, path, records, capsys)


def run_in_format(grpc_server: str, configuration: dict[str, str], tmp_path: Path, path: Path, records: str,
                  capsys: pytest.CaptureFixture[str]) -> None:
    configuration = {**configuration, **RECORDS_FORMATS[records]}
    harness = run_harness(grpc_server, configuration, path, tmp_path, "csv")
    out = capsys.readouterr().out
    assert harness.failures == 0, [line for line in out.splitlines() if line.startswith("FAIL")]
    model = model_of(path)
    check_against_model(configuration, model)
    store = TableStore(open_storage(spec_of(configuration)))
    for name in model.tables:
        current = store.load("tester", name)
        assert current is not None and current.table.stored_format == configuration["records_format"]
        suffix = ".avro" if records == "avro" else ".csv.gz"
        assert current.files and all(f.name.endswith(suffix) for f in current.files), name
        check_with_oracle_readers(store.storage, current)


def check_with_oracle_readers(storage: Storage, current: TableVersion) -> None:
    """Every data file of the version read by a reader that is not the codec (fastavro; Python's `csv` module
    driven by the hints of `_format_delimited` alone) gives the rows the destination reads, value for value."""
    delimited = current.table.stored_format == "delimited"
    hints = json.loads(storage.read_bytes(f"{current.directory}/_format_delimited"))["hints"] if delimited else {}
    for f in current.files:
        stored = read_data_file(storage, file_dir(current.directory, f), f.name).to_pylist()
        raw = storage.read_bytes(file_path(current.directory, f))
        if delimited:
            got = oracle_rows(raw, hints, current.table)
        else:  # fastavro reads a timestamp without zone as that time in UTC
            got, stored = list(fastavro.reader(io.BytesIO(raw))), [as_fastavro_reads(r) for r in stored]
        assert len(got) == len(stored), f.name
        for g, want in zip(got, stored, strict=True):
            assert list(g) == list(want)
            assert all(same(g[k], want[k]) for k in want), (f.name, g, want)
