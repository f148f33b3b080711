"""The Iceberg writer (destination/table_formats/iceberg.py) read back by pyiceberg, DuckDB's iceberg extension and
polars, on local disk and on S3, compared row for row with the Parquet data files themselves."""
from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import StaticTable

from destination.model.field_ids import assign
from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import arrow_schema
from destination.on_disk.datafiles import write_data_file
from destination.storage.base import Storage
from destination.table_formats.iceberg import LEFT_OUT, PRIMARY_KEY, IcebergFormat
from destination.table_formats.version import LakeFile, LakeVersion
from tests import lake_readers
from tests.lake_readers import iceberg_table, polars_options

pytestmark = pytest.mark.filterwarnings("ignore:Iceberg scan planning with the polars_iceberg plugin")
PREFIX = "s/t"
EPOCH = 1_700_000_000.0


class Lake:
    """A table's records versions as the writer sees them: data files written as the server writes them, and the
    LakeVersions committed to the Iceberg format."""

    def __init__(self, storage: Storage, prefix: str = PREFIX) -> None:
        self.storage, self.prefix, self.format = storage, prefix, IcebergFormat()
        self.versions: dict[int, LakeVersion] = {}

    def write(self, version: int, table: TableDef, columns: dict[str, list[Any]]) -> LakeFile:
        rows = len(next(iter(columns.values())))
        data = pa.table({**columns, DESTINATION_META: [f"m{version}"] * rows}, schema=arrow_schema(table.columns))
        name = f"part-{uuid.uuid4()}.parquet"
        written = write_data_file(self.storage, f"{self.prefix}/v{version:020d}", name, data, table, None)
        return LakeFile(path=f"v{version:020d}/{name}", bytes=written.bytes, rows=written.rows)

    def commit(self, version: int, table: TableDef, files: list[LakeFile], oldest_retained: int = 1,
               operation: str = "write_batch") -> LakeVersion:
        lake_version = LakeVersion(version=version, committed_at=EPOCH + version * 10, table=table,
                                   files=tuple(files), operation=operation, change_feed=False)
        self.format.commit(self.storage, self.prefix, lake_version, oldest_retained)
        self.versions[version] = lake_version
        return lake_version

    def expected(self, version: int, columns: list[str]) -> list[dict[str, Any]]:
        """The rows of the version's data files, read with pyarrow."""
        tables = []
        for f in self.versions[version].files:
            with self.storage.open_input(f"{self.prefix}/{f.path}") as source:
                tables.append(pq.read_table(source).select(columns))
        return _sorted(pa.concat_tables(tables).to_pylist() if tables else [])

    @property
    def location(self) -> str:
        return self.storage.url(self.prefix)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["id"], r[DESTINATION_META]))


def static_table(lake: Lake, metadata: str | None = None) -> StaticTable:
    return iceberg_table(lake.storage.spec, lake.location if metadata is None else f"{lake.location}/metadata/{metadata}")


def duck(lake: Lake) -> duckdb.DuckDBPyConnection:
    return lake_readers.duck(lake.storage.spec)


def duck_rows(lake: Lake, con: duckdb.DuckDBPyConnection, options: str = "") -> list[dict[str, Any]]:
    location = lake.location.removeprefix("file://")
    return _sorted(con.execute(f"SELECT * FROM iceberg_scan('{location}'{options})").to_arrow_table().to_pylist())


def scan_polars(lake: Lake, table: StaticTable, snapshot_id: int | None = None) -> pl.LazyFrame:
    return pl.scan_iceberg(table, snapshot_id=snapshot_id, storage_options=polars_options(lake.storage.spec))


def read_all(lake: Lake, con: duckdb.DuckDBPyConnection) -> dict[str, list[dict[str, Any]]]:
    """The latest snapshot as each reader returns it."""
    table = static_table(lake)
    return {"pyiceberg": _sorted(table.scan().to_arrow().to_pylist()),
            "duckdb": duck_rows(lake, con),
            "polars": _sorted(scan_polars(lake, table).collect().to_arrow().to_pylist())}


KEYED = (ColumnDef("id", "INT", primary_key=True), ColumnDef("code", "STRING"),
         ColumnDef("amount", "DECIMAL", precision=10, scale=2))
# each version's definition as the store commits it: its field ids assigned on top of the previous version's
BASE = assign(TableDef("t", KEYED))
WITH_NOTE = assign(BASE.with_columns([*KEYED, ColumnDef("note", "STRING")]))
RETYPED = assign(WITH_NOTE.with_columns([KEYED[0], ColumnDef("code", "LONG"), KEYED[2], ColumnDef("note", "STRING")]))


def _rows(ids: range, code: Any = str, note: bool = False) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"id": list(ids), "code": [code(i) for i in ids],
                                 "amount": [Decimal(i) / 4 for i in ids]}
    if note:
        out["note"] = [None if i % 2 else f"n{i}" for i in ids]
    return out


def test_a_sequence_of_versions_reads_back_in_every_reader(storage: Storage) -> None:
    lake = Lake(storage)
    con = duck(lake)
    lake.commit(1, BASE, [], operation="create_table")
    assert all(rows == [] for rows in read_all(lake, con).values())
    a, b = lake.write(2, BASE, _rows(range(0, 5))), lake.write(2, BASE, _rows(range(5, 9)))
    lake.commit(2, BASE, [a, b])
    c = lake.write(3, BASE, _rows(range(5, 12)))
    lake.commit(3, BASE, [a, c])  # b replaced by c
    d = lake.write(4, WITH_NOTE, {**_rows(range(0, 12), note=True)})
    lake.commit(4, WITH_NOTE, [d], operation="alter_table")  # a column added: every file rewritten
    e = lake.write(5, RETYPED, _rows(range(0, 12), code=int, note=True))
    lake.commit(5, RETYPED, [e], operation="alter_table")  # code STRING -> LONG: no Iceberg promotion
    f = lake.write(6, RETYPED, _rows(range(20, 23), code=int, note=True))
    lake.commit(6, RETYPED, [e, f])
    lake.commit(7, RETYPED, [])  # every row deleted
    for n in range(1, 8):  # each version's latest read, from its own metadata file
        names = [c.name for c in lake.versions[n].table.columns] + [DESTINATION_META]
        own = static_table(lake, f"v{n}.metadata.json")
        assert _sorted(own.scan().to_arrow().to_pylist()) == lake.expected(n, names), n
        assert _sorted(scan_polars(lake, own).collect().to_arrow().to_pylist()) == lake.expected(n, names), n
        assert duck_rows(lake, con, f", version='{n}'") == lake.expected(n, names), n

    table = static_table(lake)
    assert [s.snapshot_id for s in table.snapshots()] == list(range(1, 8))
    assert [s.summary["records-version"] for s in table.snapshots() if s.summary] == [str(n) for n in range(1, 8)]
    assert [s.timestamp_ms for s in table.snapshots()] == [int((EPOCH + n * 10) * 1000) for n in range(1, 8)]
    assert all(rows == [] for rows in read_all(lake, con).values())

    schemas = {s.snapshot_id: table.metadata.schema_by_id(s.schema_id) for s in table.snapshots()
               if s.schema_id is not None}
    ids = {n: {f.name: f.field_id for f in schema.fields} for n, schema in schemas.items() if schema}
    assert ids[2]["id"] == ids[5]["id"] == ids[7]["id"] and ids[4]["note"] == ids[7]["note"]
    assert ids[4]["code"] != ids[5]["code"]  # STRING -> LONG is no promotion: a new field id
    mapping = table.metadata.name_mapping()
    assert mapping is not None and {f.names[0]: f.field_id for f in mapping}["code"] == ids[7]["code"]
    assert table.metadata.properties[PRIMARY_KEY] == '["id"]'

    for n in range(2, 7):  # time travel by snapshot id and by time, in each reader
        version = lake.versions[n]
        names = [f.name for f in schemas[n].fields]
        expected = lake.expected(n, names)  # the files carry field ids: code's old id reads its old values
        by_id = table.scan(snapshot_id=n).to_arrow().to_pylist()
        assert _sorted(by_id) == expected, n
        at_time = table.snapshot_as_of_timestamp(int(version.committed_at * 1000) + 5)
        assert at_time is not None and at_time.snapshot_id == n
        assert _sorted(scan_polars(lake, table, snapshot_id=n).collect().to_arrow().to_pylist()) == expected, n
        duck_expected = lake.expected(n, names)  # DuckDB maps by the snapshot's own schema
        assert duck_rows(lake, con, f", snapshot_from_id={n}") in (duck_expected, expected), n
    # a version's own metadata file reads it with its own name mapping
    own = static_table(lake, "v4.metadata.json")
    assert _sorted(own.scan().to_arrow().to_pylist()) == lake.expected(4, [f.name for f in schemas[4].fields])
    assert duck_rows(lake, con, ", version='3'") == lake.expected(3, [f.name for f in schemas[3].fields])


def test_every_fivetran_type_reads_back(storage: Storage) -> None:
    columns = (ColumnDef("id", "INT", primary_key=True), ColumnDef("b", "BOOLEAN"), ColumnDef("sh", "SHORT"),
               ColumnDef("l", "LONG"), ColumnDef("d", "DECIMAL", precision=38, scale=10),
               ColumnDef("wide", "DECIMAL", precision=50, scale=5), ColumnDef("f", "FLOAT"), ColumnDef("db", "DOUBLE"),
               ColumnDef("nd", "NAIVE_DATE"), ColumnDef("ndt", "NAIVE_DATETIME"), ColumnDef("udt", "UTC_DATETIME"),
               ColumnDef("nt", "NAIVE_TIME"), ColumnDef("bin", "BINARY"), ColumnDef("s", "STRING"),
               ColumnDef("j", "JSON"), ColumnDef("x", "XML"))
    table_def = TableDef("all_types", columns)
    utc = dt.UTC
    values: dict[str, list[Any]] = {
        "id": [1, 2, 3], "b": [True, False, None], "sh": [-32768, 32767, None], "l": [-(2**63), 2**63 - 1, None],
        "d": [Decimal("1234567890123456789012345678.0123456789"), Decimal("-0.0000000001"), None],
        "wide": [Decimal("123456789012345678901234567890123456789012345.12345"), Decimal(0), None],
        "f": [1.5, -3.25, None], "db": [1e300, -2.5e-300, None],
        "nd": [dt.date(1, 1, 1), dt.date(9999, 12, 31), None],
        "ndt": [dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(1900, 1, 1), None],
        "udt": [dt.datetime(2024, 2, 29, 12, 0, 0, 1, tzinfo=utc), dt.datetime(1970, 1, 1, tzinfo=utc), None],
        "nt": [dt.time(23, 59, 59, 999999), dt.time(0, 0), None],
        "bin": [b"\x00\xff\x10", b"", None], "s": ["héllo", "", None], "j": ['{"a": [1, 2]}', "null", None],
        "x": ["<a b='1'/>", "<r/>", None],
    }
    # every type but DECIMAL(50,5) in one table, read by each reader
    lake = Lake(storage, "s/all")
    narrow = table_def.with_columns([c for c in columns if c.name != "wide"])
    lake.commit(1, narrow, [lake.write(1, narrow, {k: v for k, v in values.items() if k != "wide"})])
    table = static_table(lake)
    assert {f.name: str(f.field_type) for f in table.schema().fields if f.name in ("sh", "nt", "udt", "d")} == {
        "sh": "int", "d": "decimal(38, 10)", "udt": "timestamptz"}
    # NAIVE_TIME: left out (Spark refuses a table with a `time` field, and no other type reads its bytes), named in
    # the properties and the table comment, its id kept in the name mapping
    assert list(json.loads(table.metadata.properties[LEFT_OUT])) == ["nt"]
    assert "nt NAIVE_TIME" in table.metadata.properties["comment"]
    names = [c for c in [*narrow.column_names, DESTINATION_META] if c != "nt"]
    expected = lake.expected(1, names)
    for reader, rows in read_all(lake, duck(lake)).items():
        assert rows == expected, reader  # SHORT comes back as a 32-bit int, UTC_DATETIME with its zone

    # DECIMAL(50,5): beyond Iceberg's 38 digits, left out of the schema; DuckDB and polars read the other
    # columns, pyiceberg refuses every file holding a decimal256 column
    lake = Lake(storage, "s/wide")
    lake.commit(1, table_def, [lake.write(1, table_def, values)])
    table = static_table(lake)
    assert "wide" not in {f.name for f in table.schema().fields}
    assert list(json.loads(table.metadata.properties[LEFT_OUT])) == ["wide", "nt"]
    expected = lake.expected(1, names)
    assert duck_rows(lake, duck(lake)) == expected
    assert _sorted(scan_polars(lake, table).collect().to_arrow().to_pylist()) == expected
    with pytest.raises(UnsupportedPyArrowTypeException, match="wide"):
        table.scan().to_arrow()


def test_commit_is_idempotent_and_a_losing_writer_leaves_nothing(tmp_path: Path) -> None:
    from destination.storage.base import StorageSpec
    from destination.storage.opening import open_storage

    storage = open_storage(StorageSpec(root=str(tmp_path / "root")))
    lake = Lake(storage)
    first = lake.write(7, BASE, _rows(range(0, 3)))
    lake.commit(7, BASE, [first], oldest_retained=7)  # the table's records history starts at 7
    assert lake.format.log(storage, PREFIX).last == 7
    metadata_dir = tmp_path / "root" / PREFIX / "metadata"
    before = {p.name: p.read_bytes() for p in metadata_dir.iterdir()}
    lake.commit(7, BASE, [first], oldest_retained=7)  # again: nothing changes
    lake.format.commit_on(storage, PREFIX, lake.versions[7], 7, [])  # a writer that listed before the commit
    assert {p.name: p.read_bytes() for p in metadata_dir.iterdir()} == before
    assert (metadata_dir / "version-hint.text").read_text() == "7"
    table = static_table(lake)
    assert [s.snapshot_id for s in table.snapshots()] == [7]
    assert _sorted(table.scan().to_arrow().to_pylist()) == lake.expected(7, [*BASE.column_names, DESTINATION_META])

    # a gap: the format at 7, records at 10 (8 and 9 retired before they were caught up)
    later = lake.write(10, BASE, _rows(range(3, 6)))
    lake.commit(10, BASE, [later], oldest_retained=9)
    table = static_table(lake)
    assert [s.snapshot_id for s in table.snapshots()] == [10]
    assert _sorted(table.scan().to_arrow().to_pylist()) == lake.expected(10, [*BASE.column_names, DESTINATION_META])
    assert sorted(p.name for p in metadata_dir.glob("v*.metadata.json")) == ["v10.metadata.json"]

    # a hint left behind by a crash between the commit point and the hint's move (a process that died: it keeps
    # nothing of its commits) is moved forward by the next log
    from destination.table_formats import iceberg

    iceberg._LAST_COMMITS.forget(lake.location)
    (metadata_dir / "version-hint.text").write_text("7")
    assert lake.format.log(storage, PREFIX).last == 10
    assert (metadata_dir / "version-hint.text").read_text() == "10"

    # a hint this process failed to move after its commit point is moved forward by its next log too (the log reads
    # no hint after this process's own commit: it moved the hint there before keeping the commit)
    real_write = storage.write_bytes

    def failing_hint(path: str, data: bytes) -> None:
        if path.endswith("version-hint.text"):
            raise OSError("disk full")
        real_write(path, data)
    storage.write_bytes = failing_hint  # type: ignore[method-assign]
    try:
        with pytest.raises(OSError, match="disk full"):
            lake.commit(11, BASE, [later], oldest_retained=9)
    finally:
        del storage.write_bytes
    assert (metadata_dir / "version-hint.text").read_text() == "10"
    assert lake.format.log(storage, PREFIX).last == 11
    assert (metadata_dir / "version-hint.text").read_text() == "11"


def test_oldest_retained_ends_time_travel_to_older_snapshots(storage: Storage) -> None:
    lake = Lake(storage)
    files: list[LakeFile] = []
    for n in range(1, 7):
        files.append(lake.write(n, BASE, _rows(range(n * 10, n * 10 + 2))))
        lake.commit(n, BASE, list(files), oldest_retained=1 if n < 6 else 4)
    table = static_table(lake)
    assert [s.snapshot_id for s in table.snapshots()] == [4, 5, 6]
    with pytest.raises(ValueError, match="Snapshot not found"):
        table.scan(snapshot_id=2).to_arrow()
    assert table.snapshot_as_of_timestamp(int((EPOCH + 30) * 1000)) is None
    con = duck(lake)
    with pytest.raises(duckdb.Error):
        duck_rows(lake, con, ", snapshot_from_id=2")
    names = [*BASE.column_names, DESTINATION_META]
    for n in (4, 5, 6):
        assert _sorted(table.scan(snapshot_id=n).to_arrow().to_pylist()) == lake.expected(n, names)
        assert duck_rows(lake, con, f", snapshot_from_id={n}") == lake.expected(n, names)
    listed = [p.rsplit("/", 1)[-1] for p in storage.list_starting_with(f"{PREFIX}/metadata/")]
    assert sorted(p for p in listed if p.endswith(".metadata.json")) == ["v4.metadata.json", "v5.metadata.json",
                                                             "v6.metadata.json"]
    assert sorted(p.split("-")[1] for p in listed if p.startswith("snap-")) == ["4", "5", "6"]
    assert len([p for p in listed if p.endswith(".avro") and not p.startswith("snap-")]) == 3


def test_cost_stays_bounded_over_many_versions(storage: Storage) -> None:
    """30 versions of one new file each, five retained: the current snapshot has one manifest and the metadata
    folder holds the retained snapshots' files only, so what a commit or a read opens does not grow with the
    versions (bounded by structure; tests assert no timings)."""
    lake = Lake(storage)
    files: list[LakeFile] = []
    for n in range(1, 31):
        files.append(lake.write(n, BASE, _rows(range(n * 10, n * 10 + 2))))
        lake.commit(n, BASE, list(files[-20:]), oldest_retained=max(1, n - 4))
        if n in (5, 30):
            assert static_table(lake).scan().to_arrow().num_rows == 2 * min(n, 20)
    table = static_table(lake)
    snapshot = table.current_snapshot()
    assert snapshot is not None and len(snapshot.manifests(table.io)) == 1
    assert len(table.snapshots()) == 5
    assert len(list(storage.list_starting_with(f"{PREFIX}/metadata/"))) == 5 * 3 + 1  # + the hint


def _entries_read_back(lake: Lake) -> list[tuple[Any, ...]]:
    """The current snapshot's live manifest entries as pyiceberg reads them from the files."""
    table = static_table(lake)
    snapshot = table.current_snapshot()
    entries = [e for m in (snapshot.manifests(table.io) if snapshot else [])
               for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]
    return sorted(_entry_fields(e) for e in entries)


def _entry_fields(entry: Any) -> tuple[Any, ...]:
    f = entry.data_file
    maps = (f.column_sizes, f.value_counts, f.null_value_counts, f.nan_value_counts, f.lower_bounds, f.upper_bounds)
    return (f.file_path, entry.status, entry.snapshot_id, entry.sequence_number, entry.file_sequence_number,
            f.content, f.file_format, f.record_count, f.file_size_in_bytes, f.spec_id, f.split_offsets,
            f.sort_order_id, *(sorted(m.items()) if m is not None else None for m in maps))


def test_the_state_kept_after_a_commit_is_the_table_as_its_readers_find_it(storage: Storage) -> None:
    """The next commit builds on what this process kept after its last one instead of reading the manifest list and
    manifest back: what it keeps is what pyiceberg reads from those files, version after version (files added,
    carried, removed; a schema change; an empty version; snapshots retired)."""
    from destination.table_formats import iceberg

    lake = Lake(storage)
    a, b = lake.write(1, BASE, _rows(range(0, 5))), lake.write(1, BASE, _rows(range(5, 9)))
    c = lake.write(3, BASE, _rows(range(9, 12)))
    d = lake.write(4, WITH_NOTE, _rows(range(0, 12), note=True))
    steps = [(1, BASE, [a, b], 1), (2, BASE, [a, b], 1), (3, BASE, [a, c], 1), (4, WITH_NOTE, [d], 2),
             (5, WITH_NOTE, [], 3), (6, WITH_NOTE, [d], 5)]
    for number, table, files, oldest in steps:
        lake.commit(number, table, files, oldest_retained=oldest)
        newest = f"{PREFIX}/metadata/v{number}.metadata.json"
        kept = iceberg._LAST_COMMITS.state(lake.location, number, functools.partial(storage.read_bytes, newest))
        assert kept is not None, number
        assert sorted(_entry_fields(e) for e in kept.live) == _entries_read_back(lake), number
    assert _sorted(static_table(lake).scan().to_arrow().to_pylist()) == lake.expected(6, [*WITH_NOTE.column_names,
                                                                                          DESTINATION_META])


def test_a_folder_being_deleted_is_not_committed_on_from_the_kept_state(storage: Storage) -> None:
    """Another process deleting the metadata folder (a move to a format without Iceberg, a rebuild) has removed the
    last snapshot's manifest list but not yet its metadata file, still the very file this process wrote: a commit on
    top of the kept state would make a snapshot whose history points at files that are gone, so the commit reads
    the snapshot back as it would without one, and fails as that read does."""
    lake = Lake(storage)
    a, b = lake.write(1, BASE, _rows(range(0, 2))), lake.write(2, BASE, _rows(range(2, 4)))
    lake.commit(1, BASE, [a])
    lake.commit(2, BASE, [a, b])
    listed = storage.list_starting_with(f"{PREFIX}/metadata/snap-2-")
    assert len(listed) == 1
    storage.delete(listed[0])
    with pytest.raises(OSError):
        lake.commit(3, BASE, [b])
    assert lake.format.log(storage, PREFIX).last == 2  # no version 3 made on top


def test_a_table_another_writer_replaced_is_built_on_as_it_stands_not_as_this_process_left_it(
        storage: Storage) -> None:
    """The kept state is used only while the newest metadata file is the very file this process wrote: here the
    table was dropped and made again elsewhere (same folder, same versions) while this process still holds the old
    table's state for version 2 (put back by hand, as another process's work leaves it). Built on that, version 3
    would carry files the table no longer has."""
    from destination.table_formats import iceberg

    lake = Lake(storage)
    a, b = lake.write(1, BASE, _rows(range(0, 2))), lake.write(2, BASE, _rows(range(2, 4)))
    lake.commit(1, BASE, [a])
    lake.commit(2, BASE, [a, b])
    old_body = storage.read_bytes(f"{PREFIX}/metadata/v2.metadata.json")
    old_state = iceberg._LAST_COMMITS.state(lake.location, 2, lambda: old_body)
    assert old_state is not None and len(old_state.live) == 2

    storage.delete_prefix(PREFIX)  # dropped; made again with other rows
    c, d = lake.write(1, BASE, _rows(range(10, 12))), lake.write(2, BASE, _rows(range(12, 14)))
    lake.commit(1, BASE, [c])
    lake.commit(2, BASE, [c, d])
    iceberg._LAST_COMMITS.keep(lake.location, 2, old_body, old_state)
    e = lake.write(3, BASE, _rows(range(14, 16)))
    lake.commit(3, BASE, [c, e])

    names = [*BASE.column_names, DESTINATION_META]
    table = static_table(lake)
    assert _sorted(table.scan().to_arrow().to_pylist()) == lake.expected(3, names)
    assert _sorted(table.scan(snapshot_id=2).to_arrow().to_pylist()) == lake.expected(2, names)  # the new table's
    live = {row[0]: row[1:4] for row in _entries_read_back(lake)}
    assert live == {f"{lake.location}/{c.path}": (ManifestEntryStatus.EXISTING, 1, 1),  # carried from snapshot 1
                    f"{lake.location}/{e.path}": (ManifestEntryStatus.ADDED, 3, 3)}


def test_registers_in_a_sql_catalog(tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    from destination.storage.base import StorageSpec
    from destination.storage.opening import open_storage

    lake = Lake(open_storage(StorageSpec(root=str(tmp_path / "root"))))
    lake.commit(1, BASE, [lake.write(1, BASE, _rows(range(0, 4)))])
    catalog = SqlCatalog("records", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("s")
    registered = catalog.register_table(("s", "t"), f"{lake.location}/metadata/v1.metadata.json")
    loaded = catalog.load_table(("s", "t"))
    assert registered.metadata_location == loaded.metadata_location
    assert _sorted(loaded.scan().to_arrow().to_pylist()) == lake.expected(1, [*BASE.column_names, DESTINATION_META])


def test_a_zero_row_file_is_committed_without_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An empty table is one zero-row data file, whose footer holds no statistics: no warning per column (pyiceberg
    logs one for every column whose statistics are missing), and the snapshot reads back empty."""
    from destination.storage.base import StorageSpec
    from destination.storage.opening import open_storage

    lake = Lake(open_storage(StorageSpec(root=str(tmp_path))))
    empty = lake.write(1, BASE, _rows(range(0)))
    with caplog.at_level("WARNING"):
        lake.commit(1, BASE, [empty], operation="create_table")
    assert not [r for r in caplog.records if "statistics missing" in r.getMessage()]
    assert static_table(lake, "v1.metadata.json").scan().to_arrow().num_rows == 0


def read_by_field_id(lake: Lake, metadata: str | None = None) -> list[dict[str, Any]]:
    """An independent reader that maps a data file's columns to the Iceberg schema by field id only (as Iceberg's
    generic Java reader does, ignoring the name mapping): the file's own column names are never looked at. The
    schema and the live files come from the metadata JSON and the manifests read with plain json and DuckDB's
    avro reader."""
    con = duck(lake)
    root = lake.storage.url("").rstrip("/") + "/"
    name = metadata or f"v{int(lake.storage.read_bytes(f'{lake.prefix}/metadata/version-hint.text'))}.metadata.json"
    meta = json.loads(lake.storage.read_bytes(f"{lake.prefix}/metadata/{name}"))
    schema = next(s for s in meta["schemas"] if s["schema-id"] == meta["current-schema-id"])
    by_id = {f["id"]: f["name"] for f in schema["fields"]}
    snapshot = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])

    def avro(url: str) -> list[dict[str, Any]]:
        location = url.removeprefix("file://")
        return con.execute(f"SELECT * FROM read_avro('{location}')").to_arrow_table().to_pylist()

    out: list[dict[str, Any]] = []
    for manifest in avro(snapshot["manifest-list"]):
        for entry in avro(manifest["manifest_path"]):
            if entry["status"] == 2:  # DELETED
                continue
            with lake.storage.open_input(entry["data_file"]["file_path"].removeprefix(root)) as source:
                data = pq.read_table(source)
            ids = [int(f.metadata[b"PARQUET:field_id"]) for f in data.schema]
            columns = {by_id[i]: data.column(pos).to_pylist() for pos, i in enumerate(ids) if i in by_id}
            for row in range(data.num_rows):
                out.append({name: columns[name][row] if name in columns else None for name in by_id.values()})
    return _sorted(out)


def test_a_reader_mapping_by_field_id_reads_every_column_right(storage: Storage) -> None:
    """After a column is added and the key changed, the files' column order differs from the id order (the new
    column's id is after `_destination_meta`'s); every file written carries ids matching the Iceberg schema, so a
    reader mapping by id alone gets each value in its column, in each version."""
    lake = Lake(storage)
    a = lake.write(1, BASE, _rows(range(0, 4)))
    lake.commit(1, BASE, [a])
    b = lake.write(2, WITH_NOTE, _rows(range(4, 8), note=True))
    lake.commit(2, WITH_NOTE, [a, b], operation="alter_table")  # a, written before `note`, stays
    rekeyed = assign(WITH_NOTE.with_columns([replace(KEYED[0], primary_key=False), KEYED[1],
                                             replace(ColumnDef("note", "STRING"), primary_key=True), KEYED[2]]))
    c = lake.write(3, rekeyed, {**_rows(range(8, 12), note=True)})
    lake.commit(3, rekeyed, [a, b, c], operation="alter_table")
    ids = dict((n, i) for n, i, _ in rekeyed.field_ids)
    file_order = [ids[n] for n in [*rekeyed.column_names, DESTINATION_META]]
    assert file_order != sorted(file_order)  # the case the test is about
    schema_ids = {f.name: f.field_id for f in static_table(lake).schema().fields}
    assert schema_ids == ids
    for n in (1, 2, 3):
        names = [*lake.versions[n].table.column_names, DESTINATION_META]
        expected = []  # the files read by name, a column a file lacks as null
        for f in lake.versions[n].files:
            with storage.open_input(f"{lake.prefix}/{f.path}") as source:
                expected += [{name: row.get(name) for name in names} for row in pq.read_table(source).to_pylist()]
        assert read_by_field_id(lake, f"v{n}.metadata.json") == _sorted(expected), n
