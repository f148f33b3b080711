"""The Delta Lake log over records versions, read back by delta-rs, DuckDB's delta extension and polars on both
backends, each compared row for row with the Parquet files the version lists."""
from __future__ import annotations

import datetime as dt
import json
import math
import time
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from destination.on_disk.datafiles import write_data_file
from destination.on_disk.layout import data_file_name
from destination.runtime.errors import StorageError
from destination.storage.base import Storage
from destination.table_formats.delta import LOG, DeltaFormat
from destination.table_formats.version import ChangeDataFile, LakeFile, LakeVersion
from tests.lake_readers import delta_duckdb, delta_polars, delta_rs, delta_table

PREFIX = "s/t"
T0 = 1_700_000_000.0
TABLE = TableDef("t", (ColumnDef("id", "INT", primary_key=True), ColumnDef("name", "STRING")))
WIDER = TableDef("t", (*TABLE.columns, ColumnDef("amount", "DECIMAL", precision=38, scale=10)))
DELTA = DeltaFormat()


def rows_of(table: TableDef, ids: list[int], tag: str) -> pa.Table:
    columns: dict[str, list[Any]] = {"id": ids, "name": [f"{tag}-{i}" for i in ids]}
    if any(c.name == "amount" for c in table.columns):
        columns["amount"] = [Decimal(i) / 8 if i % 2 else None for i in ids]
    columns[DESTINATION_META] = [tag] * len(ids)
    return pa.table(columns)


def data_file(storage: Storage, version: int, table: TableDef, rows: pa.Table) -> LakeFile:
    """A data file written exactly as the server writes one, in version `version`'s directory."""
    directory = f"v{version:020d}"
    written = write_data_file(storage, f"{PREFIX}/{directory}", data_file_name("part"), rows, table, None)
    return LakeFile(path=f"{directory}/{written.name}", bytes=written.bytes, rows=written.rows)


def change_file(storage: Storage, version: int, table: TableDef, rows: pa.Table, kinds: list[str]) -> ChangeDataFile:
    path = f"_change_data/v{version:020d}/00000.parquet"
    schema = arrow_schema(table.columns).append(pa.field("_change_type", pa.string()))
    with storage.open_output(f"{PREFIX}/{path}") as sink:
        pq.write_table(rows.append_column("_change_type", pa.array(kinds)).cast(schema), sink)
    return ChangeDataFile(path=path, bytes=storage.size(f"{PREFIX}/{path}"))


def lake(version: int, table: TableDef, files: list[LakeFile], *, change_feed: bool = False,
         change_data: tuple[ChangeDataFile, ...] | None = None, at: float | None = None) -> LakeVersion:
    return LakeVersion(version=version, committed_at=T0 + version if at is None else at, table=table,
                       files=tuple(files), operation="write_batch", change_feed=change_feed, change_data=change_data)


def expected(storage: Storage, version: LakeVersion) -> list[dict[str, Any]]:
    """The version's rows as pyarrow reads its Parquet files, in the columns of its Delta schema, by id."""
    names = [f["name"] for f in json.loads(_schema_string(version.table))["fields"]]
    rows: list[dict[str, Any]] = []
    for lake_file in version.files:
        with storage.open_input(f"{PREFIX}/{lake_file.path}") as source:
            rows.extend(pq.read_table(source).select(names).to_pylist())
    return sorted(rows, key=lambda r: r["id"])


def _schema_string(table: TableDef) -> str:
    from destination.table_formats.delta import schema_json

    return json.dumps(schema_json(table))


def by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def read_deltalake(storage: Storage, version: int | None = None) -> list[dict[str, Any]]:
    return by_id(delta_rs(storage.spec, storage.url(PREFIX), version))


def read_polars(storage: Storage, version: int | dt.datetime | None = None) -> list[dict[str, Any]]:
    return by_id(delta_polars(storage.spec, storage.url(PREFIX), version))


def read_duckdb(storage: Storage, version: int | None = None) -> list[dict[str, Any]]:
    return by_id(delta_duckdb(storage.spec, storage.url(PREFIX), version))


READERS = {"deltalake": read_deltalake, "duckdb": read_duckdb, "polars": read_polars}


def assert_all_read(storage: Storage, version: LakeVersion, *, travel: bool = False) -> None:
    want = expected(storage, version)
    for name, read in READERS.items():
        got = read(storage, version.version) if travel else read(storage)
        assert got == want, f"{name} at version {version.version}"


def log_actions(storage: Storage, version: int) -> list[dict[str, Any]]:
    data = storage.read_bytes(f"{PREFIX}/{LOG}/{version:020d}.json").decode()
    return [json.loads(line) for line in data.splitlines()]


def test_a_sequence_of_versions_reads_back_in_every_reader_and_travels_in_time(storage: Storage) -> None:
    a = data_file(storage, 2, TABLE, rows_of(TABLE, [1, 2, 3], "a"))
    b = data_file(storage, 3, TABLE, rows_of(TABLE, [4, 5], "b"))
    a2 = data_file(storage, 4, TABLE, rows_of(TABLE, [1, 3], "a2"))  # replaces a: row 2 deleted, 1 and 3 updated
    wide = data_file(storage, 6, WIDER, rows_of(WIDER, [7, 8, 9], "w"))  # AlterTable: every file rewritten
    w7 = data_file(storage, 7, WIDER, rows_of(WIDER, [7, 9], "w7"))
    changes = change_file(storage, 7, WIDER, rows_of(WIDER, [8, 9, 9], "c"),
                          ["delete", "update_preimage", "update_postimage"])
    versions = [
        lake(1, TABLE, []),
        lake(2, TABLE, [a]),
        lake(3, TABLE, [a, b]),
        lake(4, TABLE, [a2, b]),
        lake(5, TABLE, []),
        lake(6, WIDER, [wide]),
        lake(7, WIDER, [w7], change_feed=True, change_data=(changes,)),
        lake(8, WIDER, [], change_feed=True),  # changes on, no cdc files: readers derive them from the removes
    ]
    for version in versions:
        DELTA.commit(storage, PREFIX, version, oldest_retained=1)
        assert DELTA.log(storage, PREFIX).last == version.version
        assert_all_read(storage, version)
    for version in versions:
        assert_all_read(storage, version, travel=True)

    kinds = [[next(iter(action)) for action in log_actions(storage, v.version)] for v in versions]
    assert kinds[0] == ["commitInfo", "protocol", "metaData"]
    assert kinds[3] == ["commitInfo", "remove", "add"]
    assert kinds[4] == ["commitInfo", "remove", "remove"]
    assert kinds[5] == ["commitInfo", "metaData", "add"]  # the new column
    assert kinds[6] == ["commitInfo", "metaData", "remove", "add", "cdc"]  # the change feed turned on
    assert log_actions(storage, 7)[1]["metaData"]["configuration"]["delta.enableChangeDataFeed"] == "true"
    assert log_actions(storage, 3)[0]["commitInfo"]["timestamp"] == int((T0 + 3) * 1000)

    table = delta_table(storage.spec, storage.url(PREFIX))
    with storage.open_input(f"{PREFIX}/{changes.path}") as source:
        want = sorted((r["id"], r["name"], r["_change_type"]) for r in pq.read_table(source).to_pylist())
    cdf = pa.table(table.load_cdf(starting_version=7, ending_version=7).read_all()).to_pylist()
    assert sorted((r["id"], r["name"], r["_change_type"]) for r in cdf) == want
    assert {r["_commit_version"] for r in cdf} == {7}
    derived = pa.table(table.load_cdf(starting_version=8, ending_version=8).read_all()).to_pylist()
    assert sorted((r["id"], r["_change_type"]) for r in derived) == [(7, "delete"), (9, "delete")]


ALL_TYPES = TableDef("all_types", (
    ColumnDef("id", "INT", primary_key=True), ColumnDef("flag", "BOOLEAN"), ColumnDef("small", "SHORT"),
    ColumnDef("big", "LONG"), ColumnDef("dec", "DECIMAL", precision=38, scale=10),
    ColumnDef("dec_wide", "DECIMAL", precision=60, scale=5), ColumnDef("real", "FLOAT"),
    ColumnDef("double", "DOUBLE"), ColumnDef("day", "NAIVE_DATE"), ColumnDef("naive", "NAIVE_DATETIME"),
    ColumnDef("utc", "UTC_DATETIME"), ColumnDef("clock", "NAIVE_TIME"), ColumnDef("raw", "BINARY"),
    ColumnDef("text", "STRING"), ColumnDef("doc", "JSON"), ColumnDef("markup", "XML"),
))


def all_types_rows() -> pa.Table:
    return pa.table({
        "id": [1, 2, 3], "flag": [True, False, None], "small": [-32768, 32767, None],
        "big": [-(2**63), 2**63 - 1, None],
        "dec": [Decimal("1234567890123456789012345678.0123456789"), Decimal("-0.0000000001"), None],
        "dec_wide": [Decimal("1" * 55 + ".12345"), Decimal("-3.5"), None], "real": [1.5, -3.25, None],
        "double": [1e300, -2.5e-300, None], "day": [dt.date(1, 1, 1), dt.date(9999, 12, 31), None],
        "naive": [dt.datetime(1900, 1, 1, 0, 0, 0, 1), dt.datetime(2262, 4, 11, 23, 47, 16, 854775), None],
        "utc": [dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.datetime(2038, 1, 19, 3, 14, 8, 999999, tzinfo=dt.UTC),
                None],
        "clock": [dt.time(0, 0), dt.time(23, 59, 59, 999999), None], "raw": [b"\x00\xff", b"", None],
        "text": ["é \"quoted\" 😀", "", None], "doc": ['{"a": [1, 2]}', "null", None],
        "markup": ["<a>x</a>", "<b/>", None], DESTINATION_META: ["m1", "m2", "m3"],
    })


def test_every_fivetran_type_reads_back_with_its_values_in_every_reader(storage: Storage) -> None:
    rows = all_types_rows()
    version = lake(1, ALL_TYPES, [data_file(storage, 1, ALL_TYPES, rows)])
    DELTA.commit(storage, PREFIX, version, oldest_retained=1)

    want = expected(storage, version)
    assert set(want[0]) == set(rows.column_names) - {"dec_wide", "clock"}  # Delta holds no such type
    assert want[0]["dec"] == Decimal("1234567890123456789012345678.0123456789")
    assert_all_read(storage, version)

    table = delta_table(storage.spec, storage.url(PREFIX))
    config = table.metadata().configuration
    assert json.loads(config["fivetran.columns_not_in_delta"]) == ["dec_wide DECIMAL(60,5)", "clock NAIVE_TIME"]
    assert json.loads(config["fivetran.primary_key"]) == ["id"]
    fields = {f.name: f for f in table.schema().fields}
    assert fields["dec"].metadata == {"fivetran.type": "DECIMAL(38,10)", "fivetran.primary_key": False}
    assert fields["id"].metadata["fivetran.primary_key"] is True
    assert "clock" not in fields and "dec_wide" not in fields
    assert table.metadata().description is not None  # the absence is told to a reader of the table, too
    assert "dec_wide DECIMAL(60,5), clock NAIVE_TIME" in table.metadata().description

    again = lake(2, ALL_TYPES, [*version.files, data_file(storage, 2, ALL_TYPES, rows.slice(0, 0))])
    DELTA.commit(storage, PREFIX, again, oldest_retained=1)
    assert [next(iter(action)) for action in log_actions(storage, 2)] == ["commitInfo", "add"]  # same schema


def test_an_unreadable_log_is_an_error_naming_the_table(storage: Storage) -> None:
    storage.write_bytes(f"{PREFIX}/{LOG}/{1:020d}.json", b"not a delta commit\n")
    with pytest.raises(StorageError, match=f"Delta log of {storage.url(PREFIX)}"):
        DELTA.commit(storage, PREFIX, lake(2, TABLE, []), oldest_retained=1)


def test_committing_a_version_the_log_holds_does_nothing(storage: Storage) -> None:
    a = data_file(storage, 1, TABLE, rows_of(TABLE, [1], "a"))
    b = data_file(storage, 2, TABLE, rows_of(TABLE, [2], "b"))
    DELTA.commit(storage, PREFIX, lake(1, TABLE, [a]), oldest_retained=1)
    DELTA.commit(storage, PREFIX, lake(2, TABLE, [a, b]), oldest_retained=1)
    log = {path.path: storage.read_bytes(path.path) for path in storage.list_recursive(f"{PREFIX}/{LOG}")}

    DELTA.commit(storage, PREFIX, lake(2, TABLE, [b], at=T0 + 99), oldest_retained=1)  # a retry, or another writer
    DELTA.commit(storage, PREFIX, lake(1, TABLE, [], at=T0 + 99), oldest_retained=1)

    assert {path.path: storage.read_bytes(path.path) for path in storage.list_recursive(f"{PREFIX}/{LOG}")} == log
    assert DELTA.log(storage, PREFIX).last == 2
    assert read_deltalake(storage) == expected(storage, lake(2, TABLE, [a, b]))


def test_a_log_another_writer_replaced_is_diffed_as_it_stands_not_as_this_process_left_it(storage: Storage) -> None:
    """A commit diffs against the state this process kept after its last commit only while the log's newest commit
    is the very file it wrote: here the table was dropped and made again elsewhere (same folder, same versions), and
    this process still holds the old table's state for version 2 (put back by hand, as another process's work
    leaves it). Diffed against that, version 3 would add c twice and remove files the log never held."""
    from destination.table_formats import delta

    a = data_file(storage, 1, TABLE, rows_of(TABLE, [1], "a"))
    b = data_file(storage, 2, TABLE, rows_of(TABLE, [2], "b"))
    DELTA.commit(storage, PREFIX, lake(1, TABLE, [a]), oldest_retained=1)
    DELTA.commit(storage, PREFIX, lake(2, TABLE, [a, b]), oldest_retained=1)
    old_table_state = delta._kept_state(storage, PREFIX, 2, storage.list_children(f"{PREFIX}/{LOG}"))
    assert old_table_state is not None and set(old_table_state.files) == {a.path, b.path}

    storage.delete_prefix(PREFIX)  # dropped; made again with other rows
    c = data_file(storage, 1, TABLE, rows_of(TABLE, [3], "c"))
    d = data_file(storage, 2, TABLE, rows_of(TABLE, [4], "d"))
    DELTA.commit(storage, PREFIX, lake(1, TABLE, [c], at=T0 + 50), oldest_retained=1)
    DELTA.commit(storage, PREFIX, lake(2, TABLE, [c, d], at=T0 + 51), oldest_retained=1)
    body = storage.read_bytes(f"{PREFIX}/{LOG}/{2:020d}.json")
    delta._LAST_COMMITS.keep(storage.url(PREFIX), 2, b"not the file the log holds" + body, old_table_state)

    e = data_file(storage, 3, TABLE, rows_of(TABLE, [5], "e"))
    third = lake(3, TABLE, [c, e], at=T0 + 52)
    DELTA.commit(storage, PREFIX, third, oldest_retained=1)

    assert_all_read(storage, third)
    removed = [action["remove"]["path"] for action in log_actions(storage, 3) if "remove" in action]
    assert removed == [d.path]


def test_a_log_losing_its_checkpoints_is_not_committed_on_from_the_kept_state(storage: Storage) -> None:
    """Another process deleting the log (a move out of Parquet), keys in order, has removed every checkpoint and
    earlier commit but not yet the newest commit, which is still the file this process wrote: a commit on top of it
    would make a log no reader can load, so the state is read from the log (and that fails, naming the table)."""
    a = data_file(storage, 1, TABLE, rows_of(TABLE, [1], "a"))
    b = data_file(storage, 2, TABLE, rows_of(TABLE, [2], "b"))
    DELTA.commit(storage, PREFIX, lake(1, TABLE, [a]), oldest_retained=1)
    DELTA.commit(storage, PREFIX, lake(2, TABLE, [a, b]), oldest_retained=1)
    newest = f"{PREFIX}/{LOG}/{2:020d}.json"
    for info in list(storage.list_recursive(f"{PREFIX}/{LOG}")):
        if info.path != newest:
            storage.delete(info.path)

    with pytest.raises(StorageError, match="Delta log"):
        DELTA.commit(storage, PREFIX, lake(3, TABLE, [a, b]), oldest_retained=1)
    assert not storage.exists(f"{PREFIX}/{LOG}/{3:020d}.json")


def test_a_first_entry_after_version_one_and_a_gap_read_back_in_every_reader(storage: Storage) -> None:
    assert DELTA.log(storage, PREFIX).last is None
    a = data_file(storage, 5, TABLE, rows_of(TABLE, [1, 2], "a"))
    b = data_file(storage, 6, TABLE, rows_of(TABLE, [3], "b"))
    first = lake(7, TABLE, [a, b])  # records versions 1..6 retired before the format was on
    DELTA.commit(storage, PREFIX, first, oldest_retained=5)
    assert storage.exists(f"{PREFIX}/{LOG}/{7:020d}.checkpoint.parquet")
    assert_all_read(storage, first)
    assert_all_read(storage, first, travel=True)

    c = data_file(storage, 11, TABLE, rows_of(TABLE, [4], "c"))
    after_gap = lake(11, TABLE, [b, c])  # 8..10 retired before they were caught up: the diff is against 7
    DELTA.commit(storage, PREFIX, after_gap, oldest_retained=7)
    assert [next(iter(action)) for action in log_actions(storage, 11)] == ["commitInfo", "remove", "add"]
    assert_all_read(storage, after_gap)
    assert_all_read(storage, after_gap, travel=True)
    # the gap's versions cannot be shown as they were: the log starts at 11
    assert [n for n in storage.list_children(f"{PREFIX}/{LOG}") if n[0].isdigit()] == [
        f"{11:020d}.checkpoint.parquet", f"{11:020d}.json"]
    with pytest.raises(Exception, match="No files in log segment"):
        read_deltalake(storage, 7)


def test_checkpoints_every_ten_versions_and_retention_stops_older_versions(storage: Storage) -> None:
    files: list[LakeFile] = []
    versions: list[LakeVersion] = []
    for number in range(1, 26):
        files = [*files[-19:], data_file(storage, number, TABLE, rows_of(TABLE, [number], f"r{number}"))]
        versions.append(lake(number, TABLE, files))
        DELTA.commit(storage, PREFIX, versions[-1], oldest_retained=1)
    log = storage.list_children(f"{PREFIX}/{LOG}")
    assert [n for n in log if "checkpoint.parquet" in n] == [f"{v:020d}.checkpoint.parquet" for v in (1, 10, 20)]
    assert json.loads(storage.read_bytes(f"{PREFIX}/{LOG}/_last_checkpoint"))["version"] == 20
    assert_all_read(storage, versions[-1])

    last = lake(26, TABLE, files[1:])
    DELTA.commit(storage, PREFIX, last, oldest_retained=22)
    log = storage.list_children(f"{PREFIX}/{LOG}")
    assert min(n for n in log if n[0].isdigit()).startswith(f"{22:020d}.")
    assert json.loads(storage.read_bytes(f"{PREFIX}/{LOG}/_last_checkpoint"))["version"] == 22
    for version in (versions[21], versions[24], last):
        assert_all_read(storage, version, travel=True)
    assert_all_read(storage, last)
    for read in READERS.values():  # each reader raises its own type, with delta-kernel's words
        with pytest.raises(Exception, match="No files in log segment"):
            read(storage, 21)


def test_time_travel_by_timestamp_finds_the_version_committed_then(storage: Storage) -> None:
    """The readers resolve a timestamp by the commit files' modification times: versions committed a moment
    apart, as the records commits are (each in a second of its own: S3 keeps the times in whole seconds)."""
    starts: list[float] = []
    for number in (1, 2, 3):
        if number > 1:
            time.sleep(math.floor(time.time()) + 1.05 - time.time())  # into the next second
        starts.append(time.time())
        files = [data_file(storage, number, TABLE, rows_of(TABLE, [number], "r"))]
        DELTA.commit(storage, PREFIX, lake(number, TABLE, files, at=time.time()), oldest_retained=1)
    # S3 keeps modification times in whole seconds: the last moment of the second before version 3 was begun
    between = dt.datetime.fromtimestamp(math.floor(starts[2]) - 0.001, dt.UTC)
    table = delta_table(storage.spec, storage.url(PREFIX))
    table.load_as_version(between)
    assert table.version() == 2
    assert [r["id"] for r in read_polars(storage, between)] == [2]
    history = {h["version"]: h["timestamp"] for h in delta_table(
        storage.spec, storage.url(PREFIX)).history()}
    assert history[1] <= history[2] <= history[3]
