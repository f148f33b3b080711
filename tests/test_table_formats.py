"""Every table is also a Delta Lake and an Iceberg table at its folder: tables written by the tester inputs through
the server (plain, history, after migrations, with change files), on local disk and on S3, read back by delta-rs,
DuckDB (delta and iceberg), polars (delta and iceberg) and pyiceberg, equal the records directory row for row; time
travel and the Delta change feed agree with the records versions and the change files; a crash between the records
commit and the formats' commits is caught up by the next write; retention in the complete layout keeps the files
the formats reference; `records-destination publish --rebuild` writes the metadata anew."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from destination.changes import cdf
from destination.changes.replay import read_version
from destination.cli import main as cli_main
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.on_disk import layout, records
from destination.on_disk.datafiles import align, read_data_file, write_data_file
from destination.on_disk.locations import file_dir
from destination.on_disk.options import COMPLETE, TABLE_FORMATS
from destination.runtime.errors import StorageError
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store.table_store import Retention, TableStore
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.table_formats.iceberg import NAME_MAPPING
from destination.table_formats.sync import TableFormatPublisher, table_formats_named
from destination.write.one_step import commit_one_step
from tests.conftest import spec_of
from tests.lake_readers import (
    DELTA_READERS,
    ICEBERG_READERS,
    delta_rs,
    delta_table,
    iceberg_pyiceberg,
    iceberg_pyiceberg_as_of,
    rows,
)
from tests.rpc_helpers import run_tester_input
from tests.test_table_store import SCHEMA, TABLE, SimulatedCrash, appender
from tests.tester_inputs import input_files

pytestmark = pytest.mark.filterwarnings("ignore:Iceberg scan planning with the polars_iceberg plugin")

TESTER_INPUTS = input_files("clickhouse/input_all_data_types.json", "clickhouse/input_history_mode.json",
                              "clickhouse/schema_migrations_input_ddl.json", "fivetran_partner_sdk/input.json")
NOT_IN_FORMATS = ("NAIVE_TIME",)  # in neither format (docs/reference/types.md "Types in Delta Lake and Iceberg")


def records_rows(storage: Storage, version: TableVersion) -> pa.Table:
    parts = [align(read_data_file(storage, file_dir(version.directory, f), f.name), version.table)
             for f in version.files]
    return pa.concat_tables(parts)


def columns_in(table: TableDef, fmt: str) -> list[str]:
    """The columns a format's schema carries (decimals above 38 digits are in neither; none in the inputs)."""
    return [c.name for c in table.columns if c.type not in NOT_IN_FORMATS] + [DESTINATION_META]


def check_field_ids(storage: Storage, version: TableVersion) -> None:
    """Every live data file (Parquet or Avro) carries, for each of its columns, the field id the latest Iceberg schema (read as JSON)
    gives that column (or, for a column Iceberg leaves out, the name mapping): a reader mapping by id reads the
    right column."""
    metadata = json.loads(storage.read_bytes(f"{version.prefix}/metadata/v{version.version}.metadata.json"))
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    expected = {f["name"]: f["id"] for f in schema["fields"]}
    mapped = {m["names"][0]: m["field-id"] for m in json.loads(metadata["properties"][NAME_MAPPING])}
    for f in version.files:
        with storage.open_input(f"{file_dir(version.directory, f)}/{f.name}") as source:
            if version.table.stored_format == "avro":  # the `field-id` of each field of the file's Avro schema
                fields = json.loads(fastavro.reader(source).metadata["avro.schema"])["fields"]
                got = {field["name"]: int(field.get("field-id", -1)) for field in fields}
            else:
                got = {field.name: int((field.metadata or {}).get(b"PARQUET:field_id", -1))
                       for field in pq.read_schema(source)}
        assert got == {name: expected.get(name, mapped.get(name)) for name in got}, f"{version.table.name}/{f.name}"


def check_every_reader(storage: Storage, version: TableVersion) -> None:
    url = storage.url(version.prefix)
    check_field_ids(storage, version)
    stored = records_rows(storage, version)
    for fmt, readers in (("delta", DELTA_READERS), ("iceberg", ICEBERG_READERS)):
        columns = columns_in(version.table, fmt)
        expected = rows(stored, columns)
        for name, read in readers.items():
            got = read(storage.spec, url)
            assert set(columns) <= set(got.column_names), f"{version.table.name}: {name} lacks columns"
            assert rows(got, columns) == expected, f"{version.table.name} version {version.version}: {name} differs"


@pytest.mark.parametrize("path", TESTER_INPUTS, ids=lambda p: p.stem)
def test_tester_tables_read_back_by_every_reader(grpc_server, configuration, tmp_path: Path, path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration = {**configuration, "changes": "parquet"}
    run = run_tester_input(grpc_server, configuration, path, tmp_path)
    storage, store, names = run.storage, run.store, run.names
    feed_rows = 0
    for name in names:
        latest = store.load("tester", name)
        assert latest is not None
        check_every_reader(storage, latest)
        feed_rows += check_time_travel_and_change_feed(storage, store, latest)
    assert feed_rows > 0  # every input writes rows after its last schema change


def check_time_travel_and_change_feed(storage: Storage, store: TableStore, latest: TableVersion) -> int:
    """Delta version N and Iceberg snapshot N are records version N; Delta's change feed of a version with row
    events is exactly its change files' events. Returns the change feed rows compared."""
    compared = 0
    url = storage.url(latest.prefix)
    assert delta_table(storage.spec, url).version() == latest.version
    for n in range(max(1, latest.version - 3), latest.version + 1):
        old = store.load("tester", latest.table.name, n)
        assert old is not None
        for fmt, travelled in (("delta", delta_rs(storage.spec, url, n)),
                               ("iceberg", iceberg_pyiceberg_as_of(storage.spec, url, n))):
            columns = [c for c in columns_in(old.table, fmt) if c in columns_in(latest.table, fmt)]
            assert rows(travelled, columns) == rows(records_rows(storage, old), columns), f"{fmt} version {n}"
        changes = read_version(storage, latest.prefix, n)
        if changes.kind != "rows" or n == 1:
            continue
        feed = pa.table(delta_table(storage.spec, url).load_cdf(starting_version=n, ending_version=n).read_all())
        expected = cdf.change_rows(changes.events, n, 0)
        # delta-rs reads a change data file with the latest schema: a column whose type changed since is cast
        unchanged = [c.name for c in old.table.columns if c.type not in NOT_IN_FORMATS and c in latest.table.columns]
        columns = [*unchanged, cdf.CHANGE_TYPE]
        assert rows(feed, columns) == rows(expected, columns), f"change feed of version {n}"
        compared += feed.num_rows
    return compared


def lake_store(storage: Storage, **options: Any) -> TableStore:
    return TableStore(storage, publish=TableFormatPublisher(table_formats_named(TABLE_FORMATS)), **options)


def ids_in(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_a_crash_between_the_records_commit_and_the_formats_is_caught_up_by_the_next_write(storage: Storage) -> None:
    store = lake_store(storage)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))

    def crash(step: str) -> None:
        if step == "before_table_formats":
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        commit_one_step(lake_store(storage, fault=crash), SCHEMA, "events", appender(storage, 10))
    url = storage.url(layout.table_prefix(SCHEMA, "events"))
    assert store.latest_version_number(layout.table_prefix(SCHEMA, "events")) == 2  # committed in records
    # no format shows version 2, and what they show is version 1 whole
    assert delta_table(storage.spec, url).version() == 1
    assert ids_in(delta_rs(storage.spec, url)) == ids_in(iceberg_pyiceberg(storage.spec, url)) == [0, 1, 2]
    third = commit_one_step(store, SCHEMA, "events", appender(storage, 20))
    assert third is not None and third.version == 3
    assert ids_in(delta_rs(storage.spec, url, 2)) == ids_in(iceberg_pyiceberg(storage.spec, url, 2)) == [0, 1, 2, 10, 11, 12]
    assert ids_in(delta_rs(storage.spec, url)) == ids_in(iceberg_pyiceberg(storage.spec, url)) == [0, 1, 2, 10, 11, 12, 20, 21, 22]


def test_a_failed_latest_hint_does_not_keep_the_formats_behind(storage: Storage, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`_latest` and the claims' clean-up run beside the formats after the commit record: a storage failure of one
    of them is a warning, and the formats still follow the version (readers step forward from the old `_latest`)."""
    store = lake_store(storage)
    commit_one_step(store, SCHEMA, "events", appender(storage, 0))
    prefix = layout.table_prefix(SCHEMA, "events")
    real_write = storage.write_bytes

    def refusing_latest(path: str, data: bytes) -> None:
        if path == layout.latest_path(prefix):
            raise StorageError(f"{path}: access denied")
        real_write(path, data)
    monkeypatch.setattr(storage, "write_bytes", refusing_latest)
    second = commit_one_step(store, SCHEMA, "events", appender(storage, 10))
    monkeypatch.undo()
    assert second is not None and second.version == 2
    assert "version 2 committed; housekeeping failed" in capsys.readouterr().out
    assert json.loads(storage.read_bytes(layout.latest_path(prefix)))["version"] == 1  # the hint left behind
    url = storage.url(prefix)
    assert delta_table(storage.spec, url).version() == 2
    assert ids_in(delta_rs(storage.spec, url)) == ids_in(iceberg_pyiceberg(storage.spec, url)) == [0, 1, 2, 10, 11, 12]
    latest = TableStore(storage).load(SCHEMA, "events")
    assert latest is not None and latest.version == 2


@pytest.mark.parametrize(("records_format", "removed"), [("delimited", ("_delta_log", "_change_data", "metadata")),
                                                       ("avro", ("_delta_log", "_change_data"))])
def test_formats_written_while_the_table_moved_out_of_parquet_are_removed_again(storage: Storage, records_format: str,
                                                                                removed: tuple[str, ...]) -> None:
    """Another process moves the table to another records format (`reformat`: it commits, then removes the metadata
    of the formats that do not describe it) while this writer is between its records commit and its formats: what
    this writer then writes in such a format describes Parquet files of a table that is no longer Parquet, and
    readers would read them as the table. It goes again; a format that describes the new format stays (Iceberg, for
    Avro: the next write brings it up to the move)."""
    from dataclasses import replace

    prefix = layout.table_prefix(SCHEMA, "events")
    mover = TableStore(storage)  # the other process: no formats of its own

    def move_out(step: str) -> None:
        if step != "before_table_formats":
            return
        def moved(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
            assert base is not None
            return PendingVersion(replace(base.table, records_format=records_format), [], list(base.files),
                                  {"kind": "reformat"})
        committed = commit_one_step(mover, SCHEMA, "events", moved)
        assert committed is not None and committed.table.stored_format == records_format
        for folder in removed:  # the metadata of the formats that do not describe the new records format
            storage.delete_prefix(f"{prefix}/{folder}")

    commit_one_step(lake_store(storage), SCHEMA, "events", appender(storage, 0))
    assert storage.list_children(f"{prefix}/_delta_log")
    commit_one_step(lake_store(storage, fault=move_out), SCHEMA, "events", appender(storage, 10))

    assert mover.latest_version_number(prefix) == 3
    for folder in ("_delta_log", "metadata"):
        assert (storage.list_children(f"{prefix}/{folder}") == []) == (folder in removed), folder


def test_a_format_a_later_version_applies_to_is_not_removed_by_a_writer_behind(storage: Storage) -> None:
    """A writer commits an Avro version (Delta Lake does not describe it) while another process moves the table back
    to Parquet and writes Delta Lake for that later version: the writer, following its own version, leaves the
    later version's Delta Lake alone (it would have removed it as stale metadata of a table not in Parquet)."""
    from dataclasses import replace

    from destination.table_formats.delta import DeltaFormat

    prefix = layout.table_prefix(SCHEMA, "events")
    avro_table = replace(TABLE, records_format="avro")

    def in_avro(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        assert base is not None
        return PendingVersion(avro_table, [], list(base.files), {"kind": "reformat"})

    def move_back(step: str) -> None:
        if step == "before_table_formats":
            back = commit_one_step(lake_store(storage), SCHEMA, "events", appender(storage, 20))  # a Parquet version: Delta
            assert back is not None and back.table.stored_format == "parquet"

    commit_one_step(lake_store(storage), SCHEMA, "events", appender(storage, 0))
    commit_one_step(TableStore(storage), SCHEMA, "events", in_avro)  # moved to Avro by a process without formats
    storage.delete_prefix(f"{prefix}/_delta_log")  # ... which removed Delta Lake, as `reformat` does
    commit_one_step(lake_store(storage, fault=move_back), SCHEMA, "events", in_avro)  # version 3 (Avro); 4 (Parquet) meanwhile

    assert TableStore(storage).latest_version_number(prefix) == 4
    assert DeltaFormat().log(storage, prefix).last == 4
    assert sorted(delta_rs(storage.spec, storage.url(prefix)).column("id").to_pylist()) == [0, 1, 2, 20, 21, 22]


def test_retention_in_the_complete_layout_keeps_the_files_the_formats_reference(storage: Storage) -> None:
    store = lake_store(storage, retention=Retention(keep_versions=2, min_age_seconds=0), layout=COMPLETE)
    for i in range(5):
        commit_one_step(store, SCHEMA, "events", appender(storage, i * 10))
    prefix = layout.table_prefix(SCHEMA, "events")
    url = storage.url(prefix)
    latest = store.load(SCHEMA, "events")
    assert latest is not None and latest.version == 5
    carried = [f for f in latest.files if f.written_in is not None]  # copies naming where they were first written
    assert len(carried) == 4 and all(storage.exists(f"{prefix}/{f.written_in}/{f.name}") for f in carried)
    expected = [i * 10 + k for i in range(5) for k in range(3)]
    for read in (*DELTA_READERS.values(), *ICEBERG_READERS.values()):
        assert ids_in(read(storage.spec, url)) == expected
    # version 2 is retired in both formats: Delta's log starts at its checkpoint, Iceberg's snapshot is expired
    with pytest.raises(Exception, match="No files in log segment"):
        delta_rs(storage.spec, url, 2)
    with pytest.raises(ValueError, match="Snapshot not found: 2"):
        iceberg_pyiceberg(storage.spec, url, 2)
    assert ids_in(delta_rs(storage.spec, url, 4)) == ids_in(iceberg_pyiceberg(storage.spec, url, 4)) == expected[:12]


def test_the_publish_command_rebuilds_the_metadata_from_the_committed_versions(storage: Storage, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", storage.spec.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", storage.spec.secret_access_key)
    plain = TableStore(storage)  # formats off: no metadata
    for i in range(2):
        commit_one_step(plain, SCHEMA, "events", appender(storage, i * 10))
    prefix = layout.table_prefix(SCHEMA, "events")
    assert not storage.list_children(f"{prefix}/_delta_log") and not storage.list_children(f"{prefix}/metadata")
    commit_one_step(lake_store(storage), SCHEMA, "events", appender(storage, 20))  # the formats catch up, then version 3
    # metadata gone wrong: the latest Delta commit and Iceberg metadata file unreadable
    storage.write_bytes(f"{prefix}/_delta_log/{3:020d}.json", b"not json")
    storage.write_bytes(f"{prefix}/metadata/v3.metadata.json", b"not json")
    options = ["--s3-endpoint", storage.spec.s3_endpoint, "--s3-region", "us-east-1"] if storage.spec.is_s3 else []
    assert cli_main(["publish", f"{SCHEMA}.events", "--root", storage.spec.root, *options, "--rebuild"]) == 0
    assert "delta at version 3" in capsys.readouterr().out
    url = storage.url(prefix)
    assert delta_table(storage.spec, url).version() == 3
    assert ids_in(delta_rs(storage.spec, url, 2)) == ids_in(iceberg_pyiceberg(storage.spec, url, 2)) == [0, 1, 2, 10, 11, 12]
    assert ids_in(delta_rs(storage.spec, url)) == ids_in(iceberg_pyiceberg(storage.spec, url)) == \
        [0, 1, 2, 10, 11, 12, 20, 21, 22]


@pytest.mark.parametrize("formats", ["iceberg", "delta"])
def test_change_data_is_written_for_delta_only_and_retired_with_its_versions(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                              formats: str) -> None:
    """Delta's change data files (`_change_data/v<N>/`) exist only while Delta is followed and only for the
    versions retention keeps (two here, no minimum age); Iceberg reads none, so none are written for it."""
    from tests.rpc_helpers import table as table_proto
    from tests.test_write_path import SYS, create, r, write

    configuration = {**configuration, "changes": "parquet", "table_formats": formats, "retention_versions": "2",
                     "retention_min_age_seconds": "0"}
    t = table_proto("cdc", [("id", "INT", True), ("v", "STRING"), ("n", "LONG"), *SYS])
    create(stub, configuration, "lake", t)
    for i in range(5):
        write(stub, configuration, "lake", t, tmp_path, replace=[r(i, f"v{i}"), r(0, f"again{i}")])
    storage = open_storage(spec_of(configuration))
    store = TableStore(storage)
    latest = store.load("lake", "cdc")
    assert latest is not None and latest.version == 6
    folders = storage.list_children(f"{latest.prefix}/_change_data")
    if formats == "iceberg":
        assert folders == []
    else:
        kept = sorted(n for n in (layout.parse_version_dir(f) for f in folders) if n is not None)
        assert kept and kept[0] >= latest.version - 1, kept  # the retired versions' change data is gone
        assert len(delta_table(storage.spec, storage.url(latest.prefix)).load_cdf(
            starting_version=latest.version, ending_version=latest.version).read_all()) == 3  # update pair + insert


def test_a_table_committed_before_field_ids_keeps_its_iceberg_ids(tmp_path: Path) -> None:
    """A table whose `_table.json` has no field ids (committed before they were kept) and whose Iceberg ids differ
    from its column order (a column added): its next version's files carry the ids its Iceberg metadata gave, and
    the schema keeps them (renumbering would make the name mapping read old snapshots' columns as other ones)."""
    storage = open_storage(StorageSpec(root=str(tmp_path / "root")))
    store = lake_store(storage)
    base = TableDef("legacy", (ColumnDef("id", "INT", True), ColumnDef("v", "STRING")))

    def add_rows(first: int, note: bool = False):  # type: ignore[no-untyped-def]
        def produce(current: TableVersion | None, target: VersionTarget) -> PendingVersion:
            table = current.table if current else base
            if note and table.column("note") is None:
                table = table.with_columns([*table.columns, ColumnDef("note", "STRING")])
            data = {"id": pa.array(range(first, first + 2), pa.int32()), "v": ["a", "b"], "note": ["n", None],
                    DESTINATION_META: ["m", "m"]}
            rows = pa.table({name: data[name] for name in [*table.column_names, DESTINATION_META]})
            new = write_data_file(storage, target.directory, layout.data_file_name(None), rows, table, None)
            return PendingVersion(table, [new], list(current.files) if current else [], {"kind": "test"})
        return produce

    commit_one_step(store, SCHEMA, "legacy", add_rows(0))
    second = commit_one_step(store, SCHEMA, "legacy", add_rows(2, note=True))
    assert second is not None
    before = iceberg_ids(storage, second)
    assert before == {"id": 1, "v": 2, DESTINATION_META: 3, "note": 4}
    table_json = f"{second.directory}/{records.TABLE_JSON}"
    meta = json.loads(storage.read_bytes(table_json))
    del meta["table"]["field_ids"], meta["table"]["last_field_id"]  # as committed before ids were kept
    storage.write_bytes(table_json, json.dumps(meta).encode())

    third = commit_one_step(store, SCHEMA, "legacy", add_rows(4, note=True))
    assert third is not None
    assert iceberg_ids(storage, third) == before
    check_field_ids(storage, third)
    assert rows(iceberg_pyiceberg(storage.spec, storage.url(third.prefix)), ["id", "v", "note"]) == \
        rows(records_rows(storage, third), ["id", "v", "note"])


def iceberg_ids(storage: Storage, version: TableVersion) -> dict[str, int]:
    metadata = json.loads(storage.read_bytes(f"{version.prefix}/metadata/v{version.version}.metadata.json"))
    schema = next(s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"])
    return {f["name"]: f["id"] for f in schema["fields"]}


def test_the_kept_states_stay_within_their_bounds() -> None:
    """What a process keeps after its last commit of each table is bounded by tables and by weight (files and their
    statistics), the least recently committed forgotten first; a state heavier than the bound is not kept."""
    from destination.table_formats.last_commits import LastCommits

    kept: LastCommits[list[str]] = LastCommits(weight=len, max_weight=5, max_tables=3)
    kept.keep("t1", 1, b"1", ["a", "b"])
    kept.keep("t2", 1, b"2", ["a", "b"])
    assert kept.weight == 4 and kept.state("t1", 1, lambda: b"1") == ["a", "b"]
    kept.keep("t3", 1, b"3", ["a", "b"])  # 6 > 5: t1, committed least recently, goes
    assert kept.state("t1", 1, lambda: b"1") is None and kept.state("t2", 1, lambda: b"2") == ["a", "b"]
    assert kept.weight == 4
    kept.keep("t2", 2, b"2b", ["a"])  # a newer version of t2 replaces its state
    assert kept.weight == 3 and kept.state("t2", 1, lambda: b"2") is None
    kept.keep("t4", 1, b"4", list("abcdef"))  # heavier than the bound alone: not kept
    assert kept.state("t4", 1, lambda: b"4") is None and kept.weight == 3
    kept.keep("t5", 1, b"5", [])
    kept.keep("t6", 1, b"6", [])  # a fourth table: the least recent (t3) goes
    assert kept.state("t3", 1, lambda: b"3") is None and kept.state("t2", 2, lambda: b"2b") == ["a"]
    kept.forget("t2")
    assert kept.weight == 0
