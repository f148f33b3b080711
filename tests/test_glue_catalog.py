"""The `glue` catalog against moto's Glue server (the only Glue API that runs here; AWS itself is not reached):
every commit moves the table's ICEBERG entry (previous location kept, columns current), pyiceberg's GlueCatalog
reads the latest version and the one before by time travel, a drop removes the entry; on local disk and S3."""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from destination.catalogs.base import catalog_name
from destination.catalogs.catalog_settings import CatalogSettings
from destination.catalogs.glue import glue_keeps
from destination.catalogs.kinds import follow_hook
from destination.shared.on_disk.options import TABLE_FORMATS
from destination.shared.storage.base import Storage
from destination.store.table_store import TableStore
from destination.table_formats.iceberg import file_io_properties
from tests.lake_readers import rows
from tests.rpc_helpers import run_tester_input
from tests.test_catalogs import metadata_of, named_appender
from tests.test_table_formats import TESTER_INPUTS, columns_in, records_rows
from tests.test_table_store import SCHEMA, appender

KEY, SECRET = "glue-tests-key", "glue-tests-secret"
DATABASE = "my~20schema"  # "my schema": Glue holds lower-case letters, digits and `_` as they are


def glue_store(storage: Storage, endpoint: str) -> TableStore:
    settings = CatalogSettings(kind="glue", region="us-east-1", endpoint=endpoint, access_key_id=KEY,
                               secret_access_key=SECRET)
    return TableStore(storage, follow=follow_hook(TABLE_FORMATS, settings))


def pyiceberg_glue(storage: Storage, endpoint: str) -> Any:
    from pyiceberg.catalog.glue import GlueCatalog

    return GlueCatalog("glue", **{"glue.endpoint": endpoint, "glue.region": "us-east-1",
                                  "glue.access-key-id": KEY, "glue.secret-access-key": SECRET},
                       **file_io_properties(storage.spec))


def test_the_glue_entry_follows_commits_and_drops(storage: Storage, glue_endpoint: str) -> None:
    store = glue_store(storage, glue_endpoint)
    store.write(SCHEMA, "events", appender(storage, 0))
    store.write(SCHEMA, "events", appender(storage, 10))
    store.write(SCHEMA, "other", named_appender(storage, "other", 5))
    glue = boto3.client("glue", endpoint_url=glue_endpoint, region_name="us-east-1", aws_access_key_id=KEY,
                        aws_secret_access_key=SECRET)
    entry = glue.get_table(DatabaseName=DATABASE, Name="events")["Table"]
    assert entry["Parameters"]["table_type"] == "ICEBERG"
    assert entry["Parameters"]["metadata_location"] == metadata_of(storage, 2)
    assert entry["Parameters"]["previous_metadata_location"] == metadata_of(storage, 1)
    assert [c["Name"] for c in entry["StorageDescriptor"]["Columns"]] == ["id", "v", "_fivetran_synced"]
    table = pyiceberg_glue(storage, glue_endpoint).load_table((DATABASE, "events"))
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 10, 11, 12]
    assert sorted(table.scan(snapshot_id=1).to_arrow().column("id").to_pylist()) == [0, 1, 2]
    store.drop(SCHEMA, "events")
    assert [t["Name"] for t in glue.get_tables(DatabaseName=DATABASE)["TableList"]] == ["other"]


@pytest.mark.parametrize("path", TESTER_INPUTS, ids=lambda p: p.stem)
def test_every_tester_table_is_found_through_glue_at_its_latest_version(  # type: ignore[no-untyped-def]
        grpc_server, configuration, glue_endpoint: str, tmp_path: Path, path: Path) -> None:
    schema = f"tester_{uuid.uuid4().hex[:8]}"  # one Glue database per run: the moto server is shared
    configuration = {**configuration, "catalog": "glue", "glue_endpoint": glue_endpoint, "glue_region": "us-east-1",
                     "glue_access_key_id": KEY, "glue_secret_access_key": SECRET}
    run = run_tester_input(grpc_server, configuration, path, tmp_path, schema=schema)
    storage, store, names = run.storage, run.store, run.names
    catalog = pyiceberg_glue(storage, glue_endpoint)
    mapped = {catalog_name(n, glue_keeps, "table"): n for n in names}
    assert sorted(t for _, t in catalog.list_tables(schema)) == sorted(mapped)  # drops and renames followed
    for glue_name, name in mapped.items():
        latest = store.load(schema, name)
        assert latest is not None
        table = catalog.load_table((schema, glue_name))
        assert table.metadata_location == storage.url(f"{latest.prefix}/metadata/v{latest.version}.metadata.json")
        columns = columns_in(latest.table, "iceberg")
        assert rows(table.scan().to_arrow(), columns) == rows(records_rows(storage, latest), columns), name
