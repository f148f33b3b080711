"""The `glue` catalog against moto's Glue server (the only Glue API that runs here; AWS itself is not reached):
every commit moves the table's ICEBERG entry (previous location kept, columns current), pyiceberg's GlueCatalog
reads the latest version and the one before by time travel, the DELTA entry (database `<schema>_delta`) names the
folder that delta-rs reads, a drop removes both entries; on local disk and S3."""
from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from destination.catalogs.catalog import catalog_name
from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.glue import EntryTaken, glue_keeps
from destination.catalogs.kinds import publisher_for
from destination.model.table_model import TableDef
from destination.on_disk.options import TABLE_FORMATS
from destination.runtime.errors import UserActionRequired
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.table_formats.iceberg import file_io_properties
from destination.write.one_step import commit_one_step
from tests.conftest import spec_of
from tests.lake_readers import delta_rs, rows
from tests.rpc_helpers import run_tester_input
from tests.rpc_helpers import table as table_named
from tests.test_catalogs import another_entry_survives, metadata_of, named_appender
from tests.test_table_formats import TESTER_INPUTS, columns_in, records_rows
from tests.test_table_store import SCHEMA, appender

KEY, SECRET = "glue-tests-key", "glue-tests-secret"
DATABASE = "my~20schema"  # "my schema": Glue holds lower-case letters, digits and `_` as they are


def glue_store(storage: Storage, endpoint: str) -> TableStore:
    settings = CatalogSettings(kind="glue", region="us-east-1", endpoint=endpoint, access_key_id=KEY,
                               secret_access_key=SECRET)
    return TableStore(storage, publish=publisher_for(TABLE_FORMATS, settings))


def pyiceberg_glue(storage: Storage, endpoint: str) -> Any:
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog("glue", **{"glue.endpoint": endpoint, "glue.region": "us-east-1",
                                  "glue.access-key-id": KEY, "glue.secret-access-key": SECRET},
                       **file_io_properties(storage.spec))


def glue_client(endpoint: str) -> Any:
    return boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET)


def delta_entry_rows(glue: Any, storage: Storage, database: str, name: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """The rows delta-rs reads at the folder the Glue DELTA entry names (as Athena and Spark find the table)."""
    entry = glue.get_table(DatabaseName=database, Name=name)["Table"]
    assert entry["Parameters"]["table_type"] == "DELTA"
    assert entry["Parameters"]["spark.sql.sources.provider"] == "delta"
    location = entry["StorageDescriptor"]["Location"]
    assert entry["StorageDescriptor"]["SerdeInfo"]["Parameters"]["path"] == location
    return rows(delta_rs(storage.spec, location), columns)


def test_the_glue_entry_follows_commits_and_drops(storage: Storage, glue_endpoint: str) -> None:
    store = glue_store(storage, glue_endpoint)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))
    glue = glue_client(glue_endpoint)
    first = glue.get_table(DatabaseName=DATABASE, Name="events")["Table"]
    glue.update_table(DatabaseName=DATABASE, TableInput={  # a parameter a user (or Lake Formation...) sets
        "Name": "events", "TableType": first["TableType"], "StorageDescriptor": first["StorageDescriptor"],
        "Parameters": {**first["Parameters"], "classification": "team-a"}})
    commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    commit_one_step(store, SCHEMA, "other", named_appender(storage, "other", 5))
    entry = glue.get_table(DatabaseName=DATABASE, Name="events")["Table"]
    assert entry["Parameters"]["classification"] == "team-a"  # the commit kept it
    assert entry["Parameters"]["table_type"] == "ICEBERG"
    assert entry["Parameters"]["metadata_location"] == metadata_of(storage, 2)
    assert entry["Parameters"]["previous_metadata_location"] == metadata_of(storage, 1)
    assert [c["Name"] for c in entry["StorageDescriptor"]["Columns"]] == ["id", "v", "_fivetran_synced", "_destination_meta"]
    table = pyiceberg_glue(storage, glue_endpoint).load_table((DATABASE, "events"))
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 10, 11, 12]
    assert sorted(table.scan(snapshot_id=1).to_arrow().column("id").to_pylist()) == [0, 1, 2]
    latest = store.load(SCHEMA, "events")
    assert latest is not None
    assert delta_entry_rows(glue, storage, DATABASE + "_delta", "events", ["id", "v"]) == rows(
        records_rows(storage, latest), ["id", "v"])
    store.drop(SCHEMA, "events")
    assert [t["Name"] for t in glue.get_tables(DatabaseName=DATABASE)["TableList"]] == ["other"]
    assert [t["Name"] for t in glue.get_tables(DatabaseName=DATABASE + "_delta")["TableList"]] == ["other"]
    store.drop(SCHEMA, "other")  # the moto server is shared: another root's table of the name would be refused


def test_a_glue_name_held_by_another_table_is_a_task_naming_it(storage: Storage, glue_endpoint: str) -> None:
    """A table of the Delta entry's name that is not a Delta table (someone's Iceberg table) is not taken over or
    passed over: the write's catalog step is a Task naming it, and the records version stands."""
    glue = glue_client(glue_endpoint)
    taken = f"taken_{uuid.uuid4().hex[:8]}"  # the moto server is shared by the tests
    try:
        glue.create_database(DatabaseInput={"Name": DATABASE + "_delta"})
    except glue.exceptions.AlreadyExistsException:
        pass
    glue.create_table(DatabaseName=DATABASE + "_delta", TableInput={
        "Name": taken, "TableType": "EXTERNAL_TABLE", "Parameters": {"table_type": "ICEBERG"}})
    store = glue_store(storage, glue_endpoint)
    with pytest.raises(EntryTaken) as refused:
        commit_one_step(store, SCHEMA, taken, named_appender(storage, taken, 0))
    assert isinstance(refused.value, UserActionRequired)
    assert f"{DATABASE}_delta.{taken} of table_type ICEBERG, not DELTA" in str(refused.value)
    assert store.load(SCHEMA, taken) is not None  # the records version is not lost to the catalog
    assert glue.get_table(DatabaseName=DATABASE + "_delta", Name=taken)["Table"]["Parameters"] == {
        "table_type": "ICEBERG"}
    with pytest.raises(glue.exceptions.EntityNotFoundException):  # no Iceberg entry without its Delta one
        glue.get_table(DatabaseName=DATABASE, Name=taken)


def test_a_glue_table_the_destination_did_not_make_is_never_moved_or_dropped(storage: Storage,
                                                                             glue_endpoint: str) -> None:
    """Another tool's Iceberg table of the table's name, and one naming this table's own metadata file without
    the destination's mark (registered by hand): both stay as they were, byte for byte, with their Delta
    namesake."""
    glue = glue_client(glue_endpoint)
    suffix = uuid.uuid4().hex[:8]  # the moto server is shared by the tests
    theirs, registered = f"theirs_{suffix}", f"registered_{suffix}"
    for database in (DATABASE, DATABASE + "_delta"):
        try:
            glue.create_database(DatabaseInput={"Name": database})
        except glue.exceptions.AlreadyExistsException:
            pass
    locations = {theirs: "s3://their-bucket/theirs/metadata/00001-ab.metadata.json",
                 registered: metadata_of(storage, 1, registered)}
    for name, location in locations.items():
        for database, kind in ((DATABASE, "ICEBERG"), (DATABASE + "_delta", "DELTA")):
            glue.create_table(DatabaseName=database, TableInput={
                "Name": name, "TableType": "EXTERNAL_TABLE",
                "Parameters": {"table_type": kind, "metadata_location": location, "owner": "someone"},
                "StorageDescriptor": {"Location": location.rsplit("/metadata/", 1)[0],
                                      "Columns": [{"Name": "id", "Type": "bigint"}]}})

    def tables_of(name: str) -> Any:
        return [glue.get_table(DatabaseName=d, Name=name)["Table"] for d in (DATABASE, DATABASE + "_delta")]
    store = glue_store(storage, glue_endpoint)
    for name in locations:
        another_entry_survives(storage, store, name, lambda name=name: tables_of(name), f"{DATABASE}.{name}")
        assert tables_of(name)[0]["Parameters"]["metadata_location"] == locations[name]
        for database in (DATABASE, DATABASE + "_delta"):
            glue.delete_table(DatabaseName=database, Name=name)


HIVE_TYPES = {"BOOLEAN": "boolean", "SHORT": "int", "INT": "int", "LONG": "bigint", "FLOAT": "float",
              "DOUBLE": "double", "NAIVE_DATE": "date", "NAIVE_DATETIME": "timestamp", "UTC_DATETIME": "timestamp",
              "STRING": "string", "JSON": "string", "XML": "string", "BINARY": "binary"}
"""Fivetran's types as Athena's DDL and pyiceberg's GlueCatalog name the Iceberg type each is stored as."""


def hive_columns(table: TableDef, schema: Any) -> list[tuple[str, str]]:
    """What Glue should list: every column of the Iceberg schema (`schema`, as pyiceberg reads the metadata file),
    `_destination_meta` too, typed by HIVE_TYPES from the Fivetran type (a decimal with the Iceberg field's
    precision and scale: how far a Fivetran decimal widens is the table format's choice)."""
    types = {c.name: c.type for c in table.columns} | {"_destination_meta": "STRING"}
    return [(f.name, f"decimal({f.field_type.precision},{f.field_type.scale})" if types[f.name] == "DECIMAL"
             else HIVE_TYPES[types[f.name]]) for f in schema.fields]


@pytest.mark.parametrize("path", TESTER_INPUTS, ids=lambda p: p.stem)
def test_every_tester_table_is_found_through_glue_at_its_latest_version(  # type: ignore[no-untyped-def]
        grpc_server, configuration, glue_endpoint: str, tmp_path: Path, path: Path) -> None:
    schema = f"tester_{uuid.uuid4().hex[:8]}"  # one Glue database per run: the moto server is shared
    configuration = {**configuration, "catalog": "glue", "glue_endpoint": glue_endpoint, "glue_region": "us-east-1",
                     "glue_access_key_id": KEY, "glue_secret_access_key": SECRET}
    run = run_tester_input(grpc_server, configuration, path, tmp_path, schema=schema)
    storage, store, names = run.storage, run.store, run.names
    catalog = pyiceberg_glue(storage, glue_endpoint)
    glue = glue_client(glue_endpoint)
    mapped = {catalog_name(n, glue_keeps, "table"): n for n in names}
    assert sorted(t for _, t in catalog.list_tables(schema)) == sorted(mapped)  # drops and renames followed
    for glue_name, name in mapped.items():
        latest = store.load(schema, name)
        assert latest is not None
        table = catalog.load_table((schema, glue_name))
        assert table.metadata_location == storage.url(f"{latest.prefix}/metadata/v{latest.version}.metadata.json")
        listed = glue.get_table(DatabaseName=schema, Name=glue_name)["Table"]["StorageDescriptor"]["Columns"]
        assert [(c["Name"], c["Type"]) for c in listed] == hive_columns(latest.table, table.schema()), name
        columns = columns_in(latest.table, "iceberg")
        assert rows(table.scan().to_arrow(), columns) == rows(records_rows(storage, latest), columns), name
        columns = columns_in(latest.table, "delta")
        assert delta_entry_rows(glue, storage, schema + "_delta", glue_name, columns) == rows(
            records_rows(storage, latest), columns), name
    assert sorted(t["Name"] for t in glue.get_tables(DatabaseName=schema + "_delta")["TableList"]) == sorted(mapped)


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_an_avro_table_has_an_iceberg_entry_only_and_moves_keep_the_delta_entry_right(  # type: ignore[no-untyped-def]
        grpc_server, stub, configuration, glue_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Delta Lake does not describe Avro files: with Delta among the table formats, an Avro table gets its ICEBERG
    entry (listing Avro files) and no DELTA entry. A Parquet table moved to Avro keeps its ICEBERG entry, moved to
    the move's version; its DELTA entry goes with its `_delta_log/`: by `reformat --catalog`, or, after a move
    without it, by `publish --catalog`. Moved back to Parquet with `--catalog`, it gets its DELTA entry again."""
    from tests.test_reformat import cli, latest, row
    from tests.test_write_path import SYS, create, write

    schema = f"avro_{uuid.uuid4().hex[:8]}"
    glue_fields = {"catalog": "glue", "glue_endpoint": glue_endpoint, "glue_region": "us-east-1",
                   "glue_access_key_id": KEY, "glue_secret_access_key": SECRET}
    config = {**configuration, **glue_fields}
    columns = [("id", "INT", True), ("v", "STRING"), *SYS]
    born_avro, moved = table_named("born_avro", columns), table_named("moved", columns)
    create(stub, {**config, "records_format": "avro"}, schema, born_avro)
    write(stub, config, schema, born_avro, tmp_path, replace=[row(1, "a"), row(2, "b")])
    create(stub, config, schema, moved)
    write(stub, config, schema, moved, tmp_path, replace=[row(3, "c")])
    glue = glue_client(glue_endpoint)
    delta_names = lambda: sorted(t["Name"] for t in glue.get_tables(DatabaseName=schema + "_delta")["TableList"])  # noqa: E731
    assert delta_names() == ["moved"]
    catalog_option = ("--catalog", str(tmp_path / "glue.json"))
    (tmp_path / "glue.json").write_text(json.dumps(glue_fields))
    storage = open_storage(spec_of(configuration))
    catalog = pyiceberg_glue(storage, glue_endpoint)

    def reformat(records_format: str, *options: str) -> None:
        code, _, err = cli(configuration, monkeypatch, capsys, "reformat", f"{schema}.moved", "--records-format",
                           records_format, *options)
        assert code == 0, err

    def entry_at_latest(name: str, file_format: str) -> None:
        version = latest(configuration, schema, name)
        entry = catalog.load_table((schema, name))
        assert entry.metadata_location.endswith(f"{version.prefix}/metadata/v{version.version}.metadata.json")
        assert {t.file.file_format.name for t in entry.scan().plan_files()} == {file_format}, name

    reformat("avro", "--drop-table-formats")  # without --catalog: the entries are left to `publish --catalog`
    assert delta_names() == ["moved"]
    code, _, err = cli(configuration, monkeypatch, capsys, "publish", *catalog_option)
    assert code == 0, err
    assert delta_names() == []
    entry_at_latest("born_avro", "AVRO")
    entry_at_latest("moved", "AVRO")
    reformat("parquet", *catalog_option)
    assert delta_names() == ["moved"]
    entry_at_latest("moved", "PARQUET")
    back = latest(configuration, schema, "moved")
    assert delta_entry_rows(glue, storage, schema + "_delta", "moved", ["id", "v"]) == rows(
        records_rows(storage, back), ["id", "v"])
    reformat("avro", "--drop-table-formats", *catalog_option)
    assert delta_names() == []
    entry_at_latest("moved", "AVRO")
