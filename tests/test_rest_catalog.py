"""The `rest` catalog against SeaweedFS's Iceberg REST catalog (the S3 server the tests start; OAuth2 client
credentials), read back through pyiceberg's RestCatalog.

SeaweedFS holds tables only inside its table buckets: it refuses `register_table` of a metadata file anywhere
else (400 "metadata-location must be within bucket warehouse"), and a table bucket takes objects only under
`<namespace>/<table>/data|metadata/`, where the records layout does not fit. So its register is tested as that
refusal (a Task naming the catalog), and the moves as they run on an entry the catalog made itself (an empty
table of `create_table`, which the destination takes over): every commit a `commit_table` of the catalog's
metadata into the records version's."""
from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from destination.catalogs.catalog import CatalogRefused, CatalogUnavailable, ForeignEntry, catalog_name
from destination.catalogs.catalog_settings import CatalogSettings, catalog_settings
from destination.catalogs.kinds import publisher_for
from destination.catalogs.rest import VERSION_PROPERTY, RestCatalog, rest_keeps
from destination.model.table_model import ColumnDef
from destination.on_disk import layout
from destination.on_disk.datafiles import write_data_file
from destination.on_disk.options import TABLE_FORMATS
from destination.runtime.errors import UserActionRequired
from destination.storage.base import Storage, StorageSpec
from destination.store.table_store import Retention, TableStore
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.table_formats.iceberg import file_io_properties
from destination.write.one_step import commit_one_step
from testbed.s3server import ACCESS_KEY, SECRET_KEY, S3Server, free_port
from tests.conftest import TABLE_BUCKET
from tests.lake_readers import rows
from tests.rpc_helpers import run_tester_input
from tests.test_table_formats import TESTER_INPUTS, columns_in, records_rows
from tests.test_table_store import TABLE, appender

WAREHOUSE = f"s3://{TABLE_BUCKET}/"
WIDER = replace(TABLE, columns=(*TABLE.columns, ColumnDef("extra", "STRING")))


def configuration(server: S3Server, **changes: str) -> dict[str, str]:
    return {"catalog": "rest", "rest_uri": server.iceberg_endpoint, "rest_warehouse": WAREHOUSE,
            "rest_client_id": ACCESS_KEY, "rest_client_secret": SECRET_KEY, **changes}


def settings_for(storage: Storage, server: S3Server, **changes: str) -> CatalogSettings:
    spec = storage.spec
    return catalog_settings(configuration(server, **changes), spec.s3_region, spec.access_key_id,
                            spec.secret_access_key, spec.s3_endpoint)


def rest_store(storage: Storage, server: S3Server, **options: Any) -> TableStore:
    return TableStore(storage, publish=publisher_for(TABLE_FORMATS, settings_for(storage, server)), **options)


def reader(storage: Storage, server: S3Server) -> Any:
    """pyiceberg's own RestCatalog on the same catalog: what Spark's and Trino's REST catalogs read."""
    from pyiceberg.catalog.rest import RestCatalog as PyicebergRest

    return PyicebergRest("reader", uri=server.iceberg_endpoint, warehouse=WAREHOUSE,
                         credential=f"{ACCESS_KEY}:{SECRET_KEY}",
                         **{"oauth2-server-uri": f"{server.iceberg_endpoint}/v1/oauth/tokens"},
                         **file_io_properties(storage.spec))


def made_by_the_catalog(storage: Storage, server: S3Server) -> str:
    """A namespace of this test's with an empty table `events` the catalog made (in its table bucket)."""
    namespace = f"rest_{uuid.uuid4().hex[:8]}"  # the catalog is shared by the tests
    catalog = reader(storage, server)
    catalog.create_namespace(namespace)
    catalog.create_table((namespace, "events"), schema=pa.schema([("id", pa.int64())]))
    return namespace


def metadata_of(storage: Storage, schema: str, version: int) -> str:
    return storage.url(f"{layout.table_prefix(schema, 'events')}/metadata/v{version}.metadata.json")


def ids(table: Any, snapshot: int | None = None) -> list[int]:
    return sorted(table.scan(snapshot_id=snapshot).to_arrow().column("id").to_pylist())


def widened(storage: Storage, first_id: int) -> Any:
    """An ALTER TABLE … ADD COLUMN extra: the version of WIDER, its rows rewritten in one file."""
    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        n = 2
        rows = pa.table({"id": pa.array(range(first_id, first_id + n), pa.int64()), "v": ["a"] * n,
                         "_fivetran_synced": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                         "extra": ["x"] * n, "_destination_meta": pa.nulls(n, pa.string())})
        new = write_data_file(storage, target.directory, layout.data_file_name(9), rows, WIDER, 9)
        return PendingVersion(WIDER, [new], [], {"kind": "test"})
    return produce


def test_register_outside_a_table_bucket_is_a_task_quoting_the_catalogs_refusal(storage: Storage,
                                                                               s3_server: S3Server) -> None:
    schema = f"rest_{uuid.uuid4().hex[:8]}"
    with pytest.raises(CatalogRefused) as refused:
        commit_one_step(rest_store(storage, s3_server), schema, "events", appender(storage, 0))
    message = str(refused.value)
    assert f"rest catalog 'fivetran' ({s3_server.iceberg_endpoint}, warehouse {WAREHOUSE})" in message
    assert "metadata-location" in message  # SeaweedFS's answer: the file is not inside its table bucket
    if storage.spec.is_s3:
        assert "metadata-location must be within bucket warehouse" in message
    assert SECRET_KEY not in message
    assert TableStore(storage).latest_version_number(layout.table_prefix(schema, "events")) == 1


def test_each_commit_moves_the_entry_and_time_travel_reads_the_previous_version(storage: Storage,
                                                                                 s3_server: S3Server) -> None:
    schema = made_by_the_catalog(storage, s3_server)
    store = rest_store(storage, s3_server)
    commit_one_step(store, schema, "events", appender(storage, 0))
    table = reader(storage, s3_server).load_table((schema, "events"))
    assert table.properties[VERSION_PROPERTY] == metadata_of(storage, schema, 1)
    assert ids(table) == [0, 1, 2]
    commit_one_step(store, schema, "events", appender(storage, 10))
    table = reader(storage, s3_server).load_table((schema, "events"))
    assert table.metadata_location.startswith(WAREHOUSE)  # the catalog's own metadata file
    assert table.properties[VERSION_PROPERTY] == metadata_of(storage, schema, 2)
    assert ids(table) == [0, 1, 2, 10, 11, 12]
    assert ids(table, snapshot=1) == [0, 1, 2]  # time travel through the entry
    assert [s.snapshot_id for s in table.metadata.snapshots] == [1, 2]


def test_an_alter_makes_the_table_schema_the_catalogs_and_retention_expires_its_snapshots(
        storage: Storage, s3_server: S3Server) -> None:
    schema = made_by_the_catalog(storage, s3_server)
    store = rest_store(storage, s3_server, retention=Retention(keep_versions=2, min_age_seconds=0))
    commit_one_step(store, schema, "events", appender(storage, 0))
    commit_one_step(store, schema, "events", appender(storage, 10))
    commit_one_step(store, schema, "events", widened(storage, 20))
    table = reader(storage, s3_server).load_table((schema, "events"))
    assert [f.name for f in table.schema().fields] == ["id", "v", "_fivetran_synced", "extra", "_destination_meta"]
    assert table.scan().to_arrow().column("extra").to_pylist() == ["x", "x"]
    assert ids(table) == [20, 21]
    assert [s.snapshot_id for s in table.metadata.snapshots] == [2, 3]  # version 1's retired: removed
    assert ids(table, snapshot=2) == [0, 1, 2, 10, 11, 12]


def test_a_move_guarded_by_a_stale_entry_is_refused_by_the_catalog(storage: Storage, s3_server: S3Server) -> None:
    """The move's requirements (main at the snapshot read): another writer's move in between fails it."""
    schema = made_by_the_catalog(storage, s3_server)
    store = rest_store(storage, s3_server)
    commit_one_step(store, schema, "events", appender(storage, 0))
    catalog = RestCatalog(settings_for(storage, s3_server))
    assert catalog.location(schema, "events") == metadata_of(storage, schema, 1)
    # a writer holding the entry at version 1 while another moved it on: the metadata names version 1
    commit_one_step(store, schema, "events", appender(storage, 10))
    assert not catalog.advance(schema, "events", metadata_of(storage, schema, 2), metadata_of(storage, schema, 1),
                               TABLE)
    from pyiceberg.exceptions import CommitFailedException

    from destination.catalogs.rest import commit_of

    rest = catalog._rest()
    current = rest.load_table((schema, "events"))
    stale = current.metadata.model_copy(update={"current_snapshot_id": 1})
    requirements, updates = commit_of(stale, current.metadata, metadata_of(storage, schema, 2))
    with pytest.raises(CommitFailedException):
        rest.commit_table(current, requirements, updates)


def test_drop_removes_the_entry(storage: Storage, s3_server: S3Server) -> None:
    schema = made_by_the_catalog(storage, s3_server)
    store = rest_store(storage, s3_server)
    commit_one_step(store, schema, "events", appender(storage, 0))
    catalog = reader(storage, s3_server)
    assert catalog.list_tables(schema) == [(schema, "events")]
    store.drop(schema, "events")
    assert catalog.list_tables(schema) == []


def test_an_entry_another_tool_made_is_never_moved_or_dropped(storage: Storage, s3_server: S3Server) -> None:
    """A table of the name that another tool made and wrote rows to: a write and an ALTER are Tasks naming it,
    their records versions stand, a drop drops the records table; the entry is as it was after each."""
    from pyiceberg.catalog.rest import RestCatalog as PyicebergRest

    schema = made_by_the_catalog(storage, s3_server)
    catalog = reader(storage, s3_server)
    writer = PyicebergRest("another tool", uri=s3_server.iceberg_endpoint, warehouse=WAREHOUSE,
                           credential=f"{ACCESS_KEY}:{SECRET_KEY}",
                           **{"oauth2-server-uri": f"{s3_server.iceberg_endpoint}/v1/oauth/tokens"},
                           **file_io_properties(StorageSpec(root=f"s3://{TABLE_BUCKET}", s3_endpoint=s3_server.endpoint,
                                                            s3_region="us-east-1", access_key_id=ACCESS_KEY,
                                                            secret_access_key=SECRET_KEY)))
    writer.load_table((schema, "events")).append(pa.table({"id": pa.array([7], pa.int64())}))

    def entry() -> tuple[str, dict[str, str], int | None]:
        table = catalog.load_table((schema, "events"))
        return str(table.metadata_location), dict(table.properties), table.metadata.current_snapshot_id
    before = entry()
    store = rest_store(storage, s3_server)
    for version, produce in ((1, appender(storage, 0)), (2, widened(storage, 10))):
        with pytest.raises(ForeignEntry) as refused:
            commit_one_step(store, schema, "events", produce)
        assert f"{schema}.events" in str(refused.value) and "did not make" in str(refused.value)
        assert entry() == before
        committed = store.load(schema, "events")
        assert committed is not None and committed.version == version
    store.drop(schema, "events")
    assert store.load(schema, "events") is None
    assert entry() == before and ids(writer.load_table((schema, "events"))) == [7]


def test_wrong_credentials_are_a_task_naming_the_catalog_without_the_secret(storage: Storage,
                                                                            s3_server: S3Server) -> None:
    settings = settings_for(storage, s3_server, rest_client_secret="wrong-secret-value")
    with pytest.raises(CatalogRefused) as refused:
        commit_one_step(TableStore(storage, publish=publisher_for(TABLE_FORMATS, settings)), "rest_refused", "events",
                        appender(storage, 0))
    message = str(refused.value)
    assert f"rest catalog 'fivetran' ({s3_server.iceberg_endpoint}" in message
    assert "wrong-secret-value" not in message and "Invalid client credentials" in message
    assert TableStore(storage).latest_version_number(layout.table_prefix("rest_refused", "events")) == 1


def test_an_unreachable_catalog_is_unavailable_after_the_retries(storage: Storage, s3_server: S3Server) -> None:
    settings = settings_for(storage, s3_server, rest_uri=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(CatalogUnavailable) as unavailable:
        RestCatalog(settings).location("rest_x", "events")
    assert "is unreachable after 4 attempts" in str(unavailable.value)


def test_the_rest_fields_are_checked_and_the_credentials_kept_out_of_reprs() -> None:
    from destination.runtime.errors import UserActionRequired

    base = {"catalog": "rest", "rest_uri": "https://catalog.example.com/api/catalog/"}
    with pytest.raises(UserActionRequired, match="'rest_uri' must be the Iceberg REST catalog's URL"):
        catalog_settings({"catalog": "rest"})
    with pytest.raises(UserActionRequired, match="need both"):
        catalog_settings({**base, "rest_client_id": "id"})
    with pytest.raises(UserActionRequired, match="not both"):
        catalog_settings({**base, "rest_client_id": "id", "rest_client_secret": "s", "rest_token": "t"})
    settings = catalog_settings({**base, "rest_client_id": "id", "rest_client_secret": "client-secret-x",
                                 "rest_scope": "PRINCIPAL_ROLE:ALL", "s3_endpoint": "http://s3.local:9000"},
                                "eu-west-1", "AKIDEXAMPLE", "s3-secret-y")
    assert "client-secret-x" not in repr(settings) and "s3-secret-y" not in repr(settings)
    catalog = RestCatalog(settings)
    assert catalog.described == "rest catalog 'fivetran' (https://catalog.example.com/api/catalog)"
    properties = catalog._properties()
    assert properties["credential"] == "id:client-secret-x" and properties["scope"] == "PRINCIPAL_ROLE:ALL"
    assert properties["oauth2-server-uri"] == "https://catalog.example.com/api/catalog/v1/oauth/tokens"
    assert properties["s3.endpoint"] == "http://s3.local:9000" and properties["s3.secret-access-key"] == "s3-secret-y"
    token = RestCatalog(catalog_settings({**base, "rest_token": "bearer-z"}))._properties()
    assert token["token"] == "bearer-z" and "credential" not in token and "s3.endpoint" not in token


@pytest.mark.parametrize("path", TESTER_INPUTS, ids=lambda p: p.stem)
def test_every_tester_table_taken_into_the_rest_catalog_holds_its_latest_rows(  # type: ignore[no-untyped-def]
        grpc_server, configuration, s3_server: S3Server, tmp_path: Path, path: Path) -> None:
    """The public tester inputs through the server, then each table left caught up into an empty entry the catalog
    made (SeaweedFS refuses to register a file outside its table bucket): found through the REST catalog with
    exactly the latest version's rows and schema, and the previous version by time travel."""
    schema = f"tester_{uuid.uuid4().hex[:8]}"  # one namespace per run: the catalog is shared
    run = run_tester_input(grpc_server, configuration, path, tmp_path, schema=schema)
    storage, store, names = run.storage, run.store, run.names
    catalog = reader(storage, s3_server)
    catalog.create_namespace(schema)
    following = TableStore(storage, publish=publisher_for(TABLE_FORMATS, settings_for(storage, s3_server)))
    mapped = {catalog_name(n, rest_keeps, "table"): n for n in names}
    for rest_name, name in mapped.items():
        catalog.create_table((schema, rest_name), schema=pa.schema([("id", pa.int64())]))
        latest = store.load(schema, name)
        assert latest is not None
        following.publish_latest(latest)
    assert sorted(t for _, t in catalog.list_tables(schema)) == sorted(mapped)
    for rest_name, name in mapped.items():
        latest = store.load(schema, name)
        assert latest is not None
        table = catalog.load_table((schema, rest_name))
        assert table.properties[VERSION_PROPERTY] == storage.url(
            f"{latest.prefix}/metadata/v{latest.version}.metadata.json")
        columns = columns_in(latest.table, "iceberg")
        assert [f.name for f in table.schema().fields] == columns, name
        assert rows(table.scan().to_arrow(), columns) == rows(records_rows(storage, latest), columns), name
        previous = store.load(schema, name, latest.version - 1) if latest.version > 1 else None
        if previous is not None:
            common = [c for c in columns_in(previous.table, "iceberg") if c in columns]
            travelled = table.scan(snapshot_id=previous.version).to_arrow()
            assert rows(travelled, common) == rows(records_rows(storage, previous), common), f"{name} time travel"


def test_a_catalog_that_never_answers_is_unavailable_not_a_hang(storage: Storage, s3_server: S3Server,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import destination.catalogs.rest as rest

    monkeypatch.setattr(rest, "TIMEOUT_SECONDS", (1.0, 0.5))
    with socket.socket() as silent:  # listens (connections complete in the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        settings = settings_for(storage, s3_server, rest_uri=f"http://127.0.0.1:{silent.getsockname()[1]}")
        with pytest.raises(CatalogUnavailable, match="ReadTimeout"):
            RestCatalog(settings).location("rest_x", "events")



def test_a_token_the_catalog_refuses_as_expired_gets_one_fresh_login(storage: Storage, s3_server: S3Server) -> None:
    """The token held since the catalog was opened is refused (as the catalog refuses an expired one): each call
    logs in again once and goes on, no Task. `namespace_exists`, the first call of a register, is one pyiceberg
    does not retry itself."""
    schema = made_by_the_catalog(storage, s3_server)
    catalog = RestCatalog(settings_for(storage, s3_server))
    assert catalog.location(schema, "events") is not None  # opened: logged in
    auth = catalog._rest()._session.auth.auth_manager

    def expire() -> None:
        auth._token = "expired-token-" + uuid.uuid4().hex  # the catalog answers it 401, as an expired token

    expire()
    assert catalog.location(schema, "events") is not None
    assert not auth._token.startswith("expired-token-")  # logged in again
    expire()
    fresh = f"rest_{uuid.uuid4().hex[:8]}"
    with pytest.raises(CatalogRefused) as refused:  # the register itself is refused outside a table bucket ...
        catalog.register(fresh, "events", storage.url(f"{fresh}/metadata/v1.metadata.json"), TABLE)
    assert "metadata-location" in str(refused.value) and "401" not in str(refused.value)
    assert reader(storage, s3_server).namespace_exists(fresh)  # ... after the namespace was made with a new token


def test_credentials_in_the_catalogs_url_reach_no_message_or_log_line(storage: Storage, s3_server: S3Server,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens: every call fails, and each failure is logged and raised
    settings = settings_for(storage, s3_server, rest_uri=f"http://cat-user:url-password-1@127.0.0.1:{port}/api"
                                                         "?apikey=url-key-2")
    with pytest.raises(CatalogUnavailable) as unavailable:
        commit_one_step(TableStore(storage, publish=publisher_for(TABLE_FORMATS, settings)), "rest_url", "events",
                        appender(storage, 0))
    captured = capsys.readouterr()
    said = str(unavailable.value) + captured.out + captured.err
    assert f"rest catalog 'fivetran' (http://***@127.0.0.1:{port}/api?apikey=***" in str(unavailable.value)
    assert "rest catalog 'fivetran'" in captured.out + captured.err  # the warning was logged
    for secret in ("cat-user", "url-password-1", "url-key-2"):
        assert secret not in said


def test_close_ends_the_session_and_a_later_call_opens_a_new_one(storage: Storage, s3_server: S3Server) -> None:
    schema = made_by_the_catalog(storage, s3_server)
    catalog = RestCatalog(settings_for(storage, s3_server))
    first = catalog.location(schema, "events")
    session = catalog._rest()._session
    assert any(adapter.poolmanager.pools.keys() for adapter in session.adapters.values())  # a pooled connection
    catalog.close()
    assert not any(adapter.poolmanager.pools.keys() for adapter in session.adapters.values())  # closed
    assert catalog.location(schema, "events") == first


def test_a_malformed_catalog_url_is_refused_without_quoting_it() -> None:
    """A `rest_uri` without its scheme may still hold a user and password: the refusal names the field, not the value."""
    with pytest.raises(UserActionRequired) as refused:
        catalog_settings({"catalog": "rest", "rest_uri": "admin:s3cr3t-pass@catalog.example.com/api"}, "", "", "", "")
    assert "rest_uri" in str(refused.value) and "s3cr3t" not in str(refused.value)
