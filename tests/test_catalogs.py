"""Every table registered in a `sql` catalog (Iceberg's JDBC catalog tables, in SQLite and in a real PostgreSQL),
on local disk and on S3, read back through pyiceberg's SqlCatalog: the entry follows each commit, drops and
renames; a crash between the records commit and the entry's move, and a catalog outage, leave the entry at the
previous committed version (never lost records, never deleted metadata) and the next write catches it up."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from destination.catalogs.catalog import CatalogRefused, CatalogUnavailable, ForeignEntry
from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.kinds import publisher_for
from destination.model.table_model import ColumnDef
from destination.on_disk import layout
from destination.on_disk.options import TABLE_FORMATS
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import Retention, TableStore
from destination.store.versions import PendingVersion
from destination.table_formats.iceberg import file_io_properties
from destination.write.one_step import commit_one_step
from tests.conftest import spec_of
from tests.lake_readers import rows
from tests.rpc_helpers import run_tester_input
from tests.test_table_formats import TESTER_INPUTS, columns_in, records_rows
from tests.test_table_store import SCHEMA, SimulatedCrash, appender

CATALOG = "fivetran"
NAMESPACE = SCHEMA  # "my schema": held as it is (only `.` and `~` are mapped)


def sql_store(storage: Storage, uri: str, **options: Any) -> TableStore:
    return TableStore(storage, publish=publisher_for(TABLE_FORMATS, CatalogSettings(kind="sql", uri=uri, name=CATALOG)),
                      **options)


def named_appender(storage: Storage, table: str, first_id: int) -> Any:
    """tests/test_table_store.py's appender, its table definition named `table` (as a real write's is)."""
    from dataclasses import replace

    produce = appender(storage, first_id)
    return lambda base, target: (lambda p: replace(p, table=replace(p.table, name=table)))(produce(base, target))


def reader(storage: Storage, uri: str) -> Any:
    """pyiceberg's own SqlCatalog over the same database: what Spark's JDBC catalog reads too."""
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(CATALOG, uri=uri, **file_io_properties(storage.spec))


def catalog_ids(storage: Storage, uri: str, table: str = "events", snapshot: int | None = None) -> list[int]:
    scanned = reader(storage, uri).load_table((NAMESPACE, table)).scan(snapshot_id=snapshot).to_arrow()
    return sorted(scanned.column("id").to_pylist())


def entry(storage: Storage, uri: str, table: str = "events") -> str:
    return str(reader(storage, uri).load_table((NAMESPACE, table)).metadata_location)


def metadata_of(storage: Storage, version: int, table: str = "events") -> str:
    return storage.url(f"{layout.table_prefix(SCHEMA, table)}/metadata/v{version}.metadata.json")


def test_every_commit_moves_the_entry_and_time_travel_reads_the_previous_version(storage: Storage,
                                                                                   catalog_uri: str) -> None:
    store = sql_store(storage, catalog_uri)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))
    assert entry(storage, catalog_uri) == metadata_of(storage, 1)
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2]
    commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    assert entry(storage, catalog_uri) == metadata_of(storage, 2)
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2, 10, 11, 12]
    assert catalog_ids(storage, catalog_uri, snapshot=1) == [0, 1, 2]  # time travel through the entry
    table = reader(storage, catalog_uri).load_table((NAMESPACE, "events"))
    assert table.metadata_location.endswith("v2.metadata.json")
    from sqlalchemy import create_engine, text

    with create_engine(catalog_uri).connect() as conn:  # the JDBC catalog's row, as Spark's JdbcCatalog reads it
        row = conn.execute(text("SELECT catalog_name, table_namespace, table_name, metadata_location, "
                                "previous_metadata_location FROM iceberg_tables")).one()
    assert tuple(row) == (CATALOG, NAMESPACE, "events", metadata_of(storage, 2), metadata_of(storage, 1))


def test_a_name_the_catalog_cannot_hold_is_mapped_reversibly(storage: Storage, catalog_uri: str) -> None:
    from destination.on_disk.naming import decode_name

    store = sql_store(storage, catalog_uri)
    commit_one_step(store, "sales.eu~x", "events", appender(storage, 0))
    listed = reader(storage, catalog_uri).list_tables("sales~2Eeu~7Ex")
    assert listed == [("sales~2Eeu~7Ex", "events")]
    assert decode_name("sales~2Eeu~7Ex") == "sales.eu~x"


@pytest.mark.parametrize("step", ["before_table_formats", "before_catalog"])
def test_a_crash_before_the_entry_moves_leaves_the_previous_version_and_the_next_write_catches_up(
        storage: Storage, catalog_uri: str, step: str) -> None:
    store = sql_store(storage, catalog_uri)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))

    def crash(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    with pytest.raises(SimulatedCrash):
        commit_one_step(sql_store(storage, catalog_uri, fault=crash), SCHEMA, "events", appender(storage, 10))
    assert store.latest_version_number(layout.table_prefix(SCHEMA, "events")) == 2  # committed in records
    assert entry(storage, catalog_uri) == metadata_of(storage, 1)
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2]
    latest = store.load(SCHEMA, "events")
    assert latest is not None
    store.publish_latest(latest)  # what the next request for the table does (DescribeTable, a retried write)
    assert entry(storage, catalog_uri) == metadata_of(storage, 2)
    commit_one_step(store, SCHEMA, "events", appender(storage, 20))
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    assert catalog_ids(storage, catalog_uri, snapshot=2) == [0, 1, 2, 10, 11, 12]


def test_drop_removes_the_entry_and_a_new_table_of_the_name_is_registered_again(storage: Storage,
                                                                                  catalog_uri: str) -> None:
    store = sql_store(storage, catalog_uri)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))
    commit_one_step(store, SCHEMA, "other", named_appender(storage, "other", 5))
    store.drop(SCHEMA, "events")
    assert reader(storage, catalog_uri).list_tables(NAMESPACE) == [(NAMESPACE, "other")]
    commit_one_step(store, SCHEMA, "events", appender(storage, 30))
    assert catalog_ids(storage, catalog_uri) == [30, 31, 32]


def added_column(table: str) -> Any:
    """A produce() that adds a column to the table and keeps its files: an ALTER TABLE."""
    from dataclasses import replace

    def produce(base: Any, target: Any) -> PendingVersion:
        altered = replace(base.table, columns=(*base.table.columns, ColumnDef("added", "INT")))
        return PendingVersion(altered, [], list(base.files), {"kind": "alter"})
    return produce


def another_entry_survives(storage: Storage, store: TableStore, table: str, entry: Any, names: str) -> None:
    """The table's catalog name holds an entry the destination did not make (`entry()` reads it as the catalog
    holds it): a write and an ALTER are Tasks naming it, their records versions stand; a drop (as a rename's
    second step) drops the table. The entry is as it was after each."""
    before = entry()
    for version, produce in ((1, named_appender(storage, table, 0)), (2, added_column(table))):
        with pytest.raises(ForeignEntry) as refused:
            commit_one_step(store, SCHEMA, table, produce)
        assert names in str(refused.value) and "did not make" in str(refused.value)
        assert entry() == before
        committed = store.load(SCHEMA, table)
        assert committed is not None and committed.version == version
    assert [c.name for c in committed.table.columns][-1] == "added"
    store.drop(SCHEMA, table)
    assert store.load(SCHEMA, table) is None
    assert entry() == before


def test_an_entry_the_destination_did_not_make_is_never_moved_or_dropped(storage: Storage, catalog_uri: str,
                                                                           tmp_path: Path) -> None:
    """Another tool's entry of the table's name, and one naming the same table in another root of ours."""
    from sqlalchemy import text

    engine = reader(storage, catalog_uri).engine  # pyiceberg's SqlCatalog creates the catalog's tables
    elsewhere = {"theirs": "s3://their-bucket/warehouse/theirs/metadata/00003-1f2e.metadata.json",
                 "events": (tmp_path / "other-root" / layout.table_prefix(SCHEMA, "events") / "metadata" /
                            "v1.metadata.json").as_uri()}
    with engine.begin() as connection:
        for name, location in elsewhere.items():
            connection.execute(text(
                "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
                "previous_metadata_location) VALUES (:c, :n, :t, :m, :p)"),
                {"c": CATALOG, "n": NAMESPACE, "t": name, "m": location, "p": location + ".before"})

    def row_of(name: str) -> Any:
        with engine.connect() as connection:
            return connection.execute(text("SELECT * FROM iceberg_tables WHERE table_name = :t"), {"t": name}).all()
    store = sql_store(storage, catalog_uri)
    for name, location in elsewhere.items():
        another_entry_survives(storage, store, name, lambda name=name: row_of(name), f"{NAMESPACE}.{name}")
        assert row_of(name)[0][3] == location


def test_wrong_credentials_are_a_task_naming_the_catalog_without_the_password(storage: Storage,
                                                                              postgres_server: Any) -> None:
    uri = postgres_server.url("postgres", password="wrong-password")
    with pytest.raises(CatalogRefused) as refused:
        commit_one_step(sql_store(storage, uri), SCHEMA, "events", appender(storage, 0))
    message = str(refused.value)
    assert "sql catalog 'fivetran'" in message and "127.0.0.1" in message and "wrong-password" not in message
    # the records version was committed all the same
    assert TableStore(storage).latest_version_number(layout.table_prefix(SCHEMA, "events")) == 1


@pytest.fixture
def proxied_postgres(postgres_server: Any) -> Iterator[tuple[str, Any]]:
    """A fresh catalog database reached through a TCP proxy that can reset its connections (an outage)."""
    import uuid

    from tests.faultproxy import FaultProxy

    name = f"catalog_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name)
    proxy = FaultProxy(f"http://127.0.0.1:{postgres_server.port}")
    port = proxy.endpoint.rsplit(":", 1)[1]
    yield postgres_server.url(name).replace(f":{postgres_server.port}/", f":{port}/"), proxy
    proxy.close()


def test_a_catalog_outage_during_a_write_keeps_the_version_and_the_next_write_catches_the_entry_up(
        storage: Storage, proxied_postgres: tuple[str, Any]) -> None:
    from tests.faultproxy import UNTIL_RESTORED

    uri, proxy = proxied_postgres
    retention = Retention(keep_versions=2, min_age_seconds=0)
    store = sql_store(storage, uri, retention=retention)
    for i in range(2):
        commit_one_step(store, SCHEMA, "events", appender(storage, i * 10))
    assert entry(storage, uri) == metadata_of(storage, 2)
    proxy.arm(b"", UNTIL_RESTORED)  # every connection and query from now on is reset
    for i in range(2, 4):  # two writes during the outage: each commits in records and answers UNAVAILABLE
        with pytest.raises(CatalogUnavailable, match="unreachable after 4 attempts"):
            commit_one_step(store, SCHEMA, "events", appender(storage, i * 10))
    assert proxy.failed >= 4
    proxy.restore()
    prefix = layout.table_prefix(SCHEMA, "events")
    assert store.latest_version_number(prefix) == 4  # no records version lost
    assert entry(storage, uri) == metadata_of(storage, 2)  # the entry still names version 2 ...
    assert storage.exists(f"{prefix}/metadata/v2.metadata.json")  # ... and retention kept its metadata
    assert catalog_ids(storage, uri) == [0, 1, 2, 10, 11, 12]  # and its files
    commit_one_step(store, SCHEMA, "events", appender(storage, 40))  # the next write catches the entry up
    assert entry(storage, uri) == metadata_of(storage, 5)
    assert catalog_ids(storage, uri) == sorted(i * 10 + k for i in range(5) for k in range(3))
    assert catalog_ids(storage, uri, snapshot=4) == sorted(i * 10 + k for i in range(4) for k in range(3))
    # retention went on once the entry moved: version 2's metadata is gone
    commit_one_step(store, SCHEMA, "events", appender(storage, 50))
    assert not storage.exists(f"{prefix}/metadata/v2.metadata.json")
    assert pa.array(catalog_ids(storage, uri)).to_pylist()[-1] == 52


@pytest.mark.parametrize("path", TESTER_INPUTS, ids=lambda p: p.stem)
def test_every_tester_table_is_found_through_the_catalog_at_its_latest_version(  # type: ignore[no-untyped-def]
        grpc_server, configuration, catalog_uri: str, tmp_path: Path, path: Path) -> None:
    """The public tester inputs (plain, history, every migration) through the server with the `sql` catalog on:
    every table the root holds is an entry naming its latest version, read by pyiceberg's SqlCatalog with exactly
    its rows (change files on with PostgreSQL, off with SQLite), the version before by time travel; a dropped or
    renamed table has no entry left."""
    changes = "parquet" if catalog_uri.startswith("postgresql") else "off"
    configuration = {**configuration, "changes": changes, "catalog": "sql", "catalog_uri": catalog_uri}
    run = run_tester_input(grpc_server, configuration, path, tmp_path)
    storage, store, names = run.storage, run.store, run.names
    catalog = reader(storage, catalog_uri)
    assert sorted(catalog.list_tables("tester")) == sorted(("tester", n) for n in names)  # drops and renames followed
    for name in names:
        latest = store.load("tester", name)
        assert latest is not None
        table = catalog.load_table(("tester", name))
        assert table.metadata_location == storage.url(f"{latest.prefix}/metadata/v{latest.version}.metadata.json")
        columns = columns_in(latest.table, "iceberg")
        assert rows(table.scan().to_arrow(), columns) == rows(records_rows(storage, latest), columns), name
        previous = store.load("tester", name, latest.version - 1) if latest.version > 1 else None
        if previous is not None:
            common = [c for c in columns_in(previous.table, "iceberg") if c in columns]
            travelled = table.scan(snapshot_id=previous.version).to_arrow()
            assert rows(travelled, common) == rows(records_rows(storage, previous), common), f"{name} time travel"


def test_the_publish_command_under_its_old_name_registers_existing_tables_and_moves_entries_left_behind(  # type: ignore[no-untyped-def]
        storage: Storage, catalog_uri: str, tmp_path: Path, capsys, monkeypatch) -> None:
    import json

    from destination.cli import main as cli_main
    from tests.test_table_formats import lake_store

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", storage.spec.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", storage.spec.secret_access_key)
    for i in range(2):  # written before any catalog was configured
        commit_one_step(lake_store(storage), SCHEMA, "events", appender(storage, i * 10))
    commit_one_step(lake_store(storage), SCHEMA, "other", named_appender(storage, "other", 5))
    config = tmp_path / "configuration.json"
    config.write_text(json.dumps({"catalog": "sql", "catalog_uri": catalog_uri}))
    options = ["--s3-endpoint", storage.spec.s3_endpoint, "--s3-region", "us-east-1"] if storage.spec.is_s3 else []
    command = ["formats", "--root", storage.spec.root, *options, "--catalog", str(config)]  # `publish`'s old name
    assert cli_main(command) == 0
    printed = capsys.readouterr()
    assert "entry at version 2" in printed.out
    assert "`records-destination formats` is now `records-destination publish`" in printed.err
    assert entry(storage, catalog_uri) == metadata_of(storage, 2)
    assert entry(storage, catalog_uri, "other") == metadata_of(storage, 1, "other")
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2, 10, 11, 12]

    def crash(at: str) -> None:
        if at == "before_catalog":
            raise SimulatedCrash(at)

    with pytest.raises(SimulatedCrash):  # the entry is left at version 2
        commit_one_step(sql_store(storage, catalog_uri, fault=crash), SCHEMA, "events", appender(storage, 20))
    assert entry(storage, catalog_uri) == metadata_of(storage, 2)
    assert cli_main([*command[:1], f"{SCHEMA}.events", *command[1:]]) == 0
    assert entry(storage, catalog_uri) == metadata_of(storage, 3)
    config.write_text(json.dumps({"catalog": "none"}))
    assert cli_main(command) == 1
    assert "names no catalog" in capsys.readouterr().err


def _server_store(grpc_endpoint: Any, root: str) -> TableStore:
    service = grpc_endpoint[1]
    return next(store for (spec, _, _), store in service.roots._stores.items() if spec.root == root)


def test_a_retried_write_answered_already_applied_catches_the_formats_and_the_entry_up(  # type: ignore[no-untyped-def]
        grpc_endpoint, stub, configuration, tmp_path: Path, monkeypatch) -> None:
    """The server dies right after a records commit (here: the formats' step fails at once, as a kill there
    leaves it): Delta, Iceberg and the catalog stay one version behind. Fivetran retries the request; it is
    answered "already applied", and that answer now brings them up to the committed version."""
    import grpc

    from tests.lake_readers import delta_table
    from tests.rpc_helpers import table as table_proto
    from tests.test_write_path import SYS, create, r, write

    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    configuration = {**configuration, "catalog": "sql", "catalog_uri": uri}
    t = table_proto("retried", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "lake", t)
    write(stub, configuration, "lake", t, tmp_path, replace=[r(1, "a")])
    store = _server_store(grpc_endpoint, configuration["root"])
    storage = store.storage

    def killed(step: str) -> None:
        if step == "before_table_formats":
            raise RuntimeError("the server was killed here")

    monkeypatch.setattr(store, "_fault", killed)
    with pytest.raises(grpc.RpcError):
        write(stub, configuration, "lake", t, tmp_path, replace=[r(2, "b")])
    monkeypatch.undo()
    latest = store.load("lake", "retried")
    assert latest is not None and latest.version == 3  # committed in records
    url = storage.url(latest.prefix)
    assert delta_table(storage.spec, url).version() == 2
    assert reader(storage, uri).load_table(("lake", "retried")).metadata_location.endswith("/v2.metadata.json")
    # the retry: the same files again
    files = sorted(tmp_path.glob("replace-*.csv.zstd.aes"), key=lambda p: p.stat().st_mtime)
    from destination.protocol import sdk
    from tests.test_write_path import KEY, params

    sdk_request = sdk.WriteBatchRequest(configuration=configuration, schema_name="lake", table=t,
                                        file_params=params(), replace_files=[str(files[-1])], keys={str(files[-1]): KEY})
    answer = stub.WriteBatch(sdk_request)
    assert answer.WhichOneof("response") == "success", answer
    assert store.load("lake", "retried").version == 3  # type: ignore[union-attr]  # nothing new committed
    assert delta_table(storage.spec, url).version() == 3
    table = reader(storage, uri).load_table(("lake", "retried"))
    assert table.metadata_location.endswith("/v3.metadata.json")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_catalog_outage_answers_unavailable_and_the_next_request_catches_the_entry_up(  # type: ignore[no-untyped-def]
        stub, configuration, tmp_path: Path, proxied_postgres: tuple[str, Any]) -> None:
    import grpc

    from destination.protocol import sdk
    from tests.faultproxy import UNTIL_RESTORED
    from tests.rpc_helpers import table as table_proto
    from tests.test_write_path import SYS, create, r, write

    uri, proxy = proxied_postgres
    configuration = {**configuration, "catalog": "sql", "catalog_uri": uri}
    t = table_proto("outage", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "lake", t)
    proxy.arm(b"", UNTIL_RESTORED)
    with pytest.raises(grpc.RpcError) as failed:
        write(stub, configuration, "lake", t, tmp_path, replace=[r(1, "a")])
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "sql catalog 'fivetran'" in failed.value.details() and "***" in failed.value.details()
    assert "tests-password" not in failed.value.details()
    proxy.restore()
    storage = open_storage(spec_of(configuration))
    assert TableStore(storage).latest_version_number(layout.table_prefix("lake", "outage")) == 2  # kept
    assert reader(storage, uri).load_table(("lake", "outage")).metadata_location.endswith("/v1.metadata.json")
    described = stub.DescribeTable(sdk.DescribeTableRequest(configuration=configuration, schema_name="lake",
                                                            table_name="outage"))
    assert not described.not_found
    table = reader(storage, uri).load_table(("lake", "outage"))
    assert table.metadata_location.endswith("/v2.metadata.json")
    assert table.scan().to_arrow().column("id").to_pylist() == [1]


def test_a_catalog_outage_stops_no_read_and_the_entry_catches_up_after_it(  # type: ignore[no-untyped-def]
        stub, configuration, tmp_path: Path, proxied_postgres: tuple[str, Any]) -> None:
    """During an outage, DescribeTable and a retried CreateTable answer from storage (the entry left behind by a
    write during the outage stays behind); a write still answers UNAVAILABLE; the first read after it moves the
    entry."""
    import grpc

    from destination.protocol import sdk
    from tests.faultproxy import UNTIL_RESTORED
    from tests.rpc_helpers import table as table_proto
    from tests.test_write_path import SYS, create, r, write

    uri, proxy = proxied_postgres
    configuration = {**configuration, "catalog": "sql", "catalog_uri": uri}
    t = table_proto("reads", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "lake", t)
    write(stub, configuration, "lake", t, tmp_path, replace=[r(1, "a")])
    proxy.arm(b"", UNTIL_RESTORED)
    with pytest.raises(grpc.RpcError) as failed:  # version 3 committed in records, its entry left at 2
        write(stub, configuration, "lake", t, tmp_path, replace=[r(2, "b")])
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    failures_before = proxy.failed
    described = stub.DescribeTable(sdk.DescribeTableRequest(configuration=configuration, schema_name="lake",
                                                            table_name="reads"))
    assert not described.not_found and described.WhichOneof("response") == "table"
    assert [c.name for c in described.table.columns] == [c.name for c in t.columns]
    assert stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="lake", table=t)).success
    assert proxy.failed > failures_before  # both reads did try the catalog
    proxy.restore()
    storage = open_storage(spec_of(configuration))
    assert TableStore(storage).latest_version_number(layout.table_prefix("lake", "reads")) == 3
    assert reader(storage, uri).load_table(("lake", "reads")).metadata_location.endswith("/v2.metadata.json")
    stub.DescribeTable(sdk.DescribeTableRequest(configuration=configuration, schema_name="lake", table_name="reads"))
    table = reader(storage, uri).load_table(("lake", "reads"))
    assert table.metadata_location.endswith("/v3.metadata.json")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]


def test_the_start_up_catch_up_brings_the_formats_and_the_entries_of_the_root_up_to_date(
        storage: Storage, catalog_uri: str) -> None:
    import threading
    from contextlib import nullcontext

    from destination.catalogs.startup import catch_up_root
    from tests.lake_readers import delta_table

    left_a_version_behind(storage, catalog_uri)
    commit_one_step(TableStore(storage), SCHEMA, "plain", named_appender(storage, "plain", 0))  # written with formats off
    prefix = layout.table_prefix(SCHEMA, "events")
    assert delta_table(storage.spec, storage.url(prefix)).version() == 1
    settings = CatalogSettings(kind="sql", uri=catalog_uri, name=CATALOG)
    assert catch_up_root(storage, settings, lambda s, t: nullcontext(), threading.Event()) == (2, 0)
    assert delta_table(storage.spec, storage.url(prefix)).version() == 2
    assert entry(storage, catalog_uri) == metadata_of(storage, 2)
    assert catalog_ids(storage, catalog_uri) == [0, 1, 2, 10, 11, 12]
    plain = layout.table_prefix(SCHEMA, "plain")  # the formats it never had are not started for it
    assert not storage.list_children(f"{plain}/_delta_log") and not storage.list_children(f"{plain}/metadata")
    assert reader(storage, catalog_uri).list_tables(NAMESPACE) == [(NAMESPACE, "events")]


def left_a_version_behind(storage: Storage, uri: str) -> None:
    """`events` at version 1 everywhere, then version 2 committed with the server killed before the formats and
    the catalog followed it."""
    commit_one_step(sql_store(storage, uri), SCHEMA, "events", appender(storage, 0))

    def killed(at: str) -> None:
        if at == "before_table_formats":
            raise SimulatedCrash(at)

    with pytest.raises(SimulatedCrash):
        commit_one_step(sql_store(storage, uri, fault=killed), SCHEMA, "events", appender(storage, 10))


@pytest.mark.serve
def test_serve_catches_up_the_tables_of_its_root_at_start(tmp_path: Path) -> None:
    """A real `serve --root … --catalog …` process: a table left a version behind (the server killed right after
    its records commit) is caught up in the background at start, before any request for it."""
    import json

    from destination.storage.base import StorageSpec
    from tests.lake_readers import delta_table
    from tests.serverproc import start_server, wait_for

    root = tmp_path / "root"
    storage = open_storage(StorageSpec(root=str(root)))
    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    left_a_version_behind(storage, uri)
    config = tmp_path / "configuration.json"
    config.write_text(json.dumps({"catalog": "sql", "catalog_uri": uri}))
    server = start_server(str(root), tmp_path / "server.log", "--catalog", str(config))
    try:
        wait_for(lambda: any("start-up catch-up: 1 tables" in m["message"] for m in server.messages()),
                 "the start-up catch-up's line", server)
    finally:
        server.stop()
    prefix = layout.table_prefix(SCHEMA, "events")
    assert delta_table(storage.spec, storage.url(prefix)).version() == 2
    assert entry(storage, uri) == metadata_of(storage, 2)
    assert [m for m in server.messages() if "0 failed" in m["message"]]


def test_the_form_shows_each_kinds_fields_only_when_it_is_chosen_and_credentials_as_passwords() -> None:
    from destination.catalogs.catalog_settings import catalog_settings
    from destination.catalogs.kinds import check_store_options
    from destination.on_disk.options import store_options
    from destination.protocol import common
    from destination.rpc.configuration import configuration_form, known_fields, unknown_fields_message
    from destination.runtime.errors import UserActionRequired

    fields = {f.name: f for f in configuration_form().fields}
    assert list(fields["catalog"].dropdown_field.dropdown_field) == ["none", "sql", "glue", "rest"]
    assert fields["catalog"].default_value == "none"
    shown = {f.conditional_fields.condition.string_value: {g.name: g for g in f.conditional_fields.fields}
             for f in fields.values() if f.HasField("conditional_fields")
             and f.conditional_fields.condition.condition_field == "catalog"}
    assert set(shown) == {"sql", "glue", "rest"}
    assert shown["sql"]["catalog_uri"].text_field == common.TextField.Password
    assert shown["glue"]["glue_secret_access_key"].text_field == common.TextField.Password
    assert shown["rest"]["rest_client_secret"].text_field == common.TextField.Password
    assert shown["rest"]["rest_token"].text_field == common.TextField.Password
    assert {"catalog", "catalog_uri", "catalog_name", "glue_region"} <= set(known_fields())
    assert unknown_fields_message({"catalog": "sql", "catalog_uri": "sqlite://"}) is None
    with pytest.raises(UserActionRequired, match="'catalog': 'hive' is not one of none, sql, glue, rest"):
        catalog_settings({"catalog": "hive"})
    with pytest.raises(UserActionRequired, match="'catalog_uri' is empty"):
        catalog_settings({"catalog": "sql"})
    settings = catalog_settings({"catalog": "sql", "catalog_uri": "postgresql+psycopg://u:secret-pw@h/db"})
    assert "secret-pw" not in repr(settings)
    with pytest.raises(UserActionRequired, match="must include iceberg"):
        check_store_options(settings, store_options({"table_formats": "delta"}, False))
    assert check_store_options(settings, store_options({"retention_versions": "1"}, False)).retention.keep_versions == 2


def test_the_catalog_test_leaves_no_connection_open(stub, configuration, postgres_server) -> None:  # type: ignore[no-untyped-def]
    """Each configuration test opens the catalog, reads an entry and closes what it opened: PostgreSQL's own
    count of the connections to the catalog's database is back to none once it answered."""
    import time
    import uuid

    import psycopg

    from destination.protocol import common

    name = f"catalog_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name)
    configuration = {**configuration, "catalog": "sql", "catalog_uri": postgres_server.url(name)}
    with psycopg.connect(postgres_server.url().replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
        def connections() -> int:
            """Once a closed connection's backend has ended (it does so shortly after the client closes it)."""
            deadline = time.monotonic() + 3
            while True:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()
                count = int(row[0]) if row else -1
                if count == 0 or time.monotonic() > deadline:
                    return count
                time.sleep(0.05)

        for _ in range(3):
            assert stub.Test(common.TestRequest(name="catalog", configuration=configuration)).success
            assert connections() == 0
