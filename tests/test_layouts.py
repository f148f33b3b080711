"""The two version layouts on both backends: what each version directory holds, retention by reference in the
referencing layout, switching a table between layouts, tables written before the layout existed, the Spark fan-out
of a large S3 carry-forward, and the configuration fields."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from destination.commands.validator import validate_table, validate_version
from destination.on_disk import layout, records
from destination.on_disk.datafiles import align, read_data_file, write_data_file
from destination.on_disk.locations import file_dir
from destination.on_disk.options import COMPLETE, REFERENCING, Retention, StoreOptions, store_options
from destination.rpc.configuration import known_fields, unknown_fields_message
from destination.runtime.errors import UserActionRequired
from destination.storage.base import Storage, StorageSpec
from destination.storage.opening import open_storage
from destination.store import carry as carry_module
from destination.store.table_store import TableStore
from destination.store.versions import PendingVersion, TableVersion, VersionTarget
from destination.write.copy_job import SparkCopies
from destination.write.one_step import commit_one_step
from tests.conftest import s3_configuration, spec_of
from tests.rpc_helpers import rows_of, table
from tests.test_table_store import SCHEMA, TABLE
from tests.test_write_path import SYS, create, r, write

NAME = "events"
PREFIX = layout.table_prefix(SCHEMA, NAME)
EAGER = Retention(keep_versions=1, min_age_seconds=0)  # retire every superseded version at once


def rows(first: int, n: int, value: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64()), "v": [value] * n,
                     "_fivetran_synced": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                     "_destination_meta": pa.nulls(n, pa.string())})


def change(storage: Storage, add: list[tuple[int, int]], drop: frozenset[int] = frozenset()):  # type: ignore[no-untyped-def]
    """A produce() writing one new file per (first id, count) in `add`, carrying the base's files except those
    whose first id is in `drop` (a rewritten file)."""
    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        new = [write_data_file(storage, target.directory, layout.data_file_name(0), rows(first, n), TABLE, 0)
               for first, n in add]
        carried = [f for f in (base.files if base else ()) if f.key_range and f.key_range["id"][0] not in drop]
        return PendingVersion(TABLE, new, carried, {"kind": "test"})
    return produce


def ids(store: TableStore, version: TableVersion) -> list[int]:
    parts = [align(read_data_file(store.storage, file_dir(version.directory, f), f.name), TABLE) for f in version.files]
    return sorted(pa.concat_tables(parts).column("id").to_pylist())


def data_names(storage: Storage, n: int) -> set[str]:
    return {name for name in storage.list_children(layout.version_dir(PREFIX, n)) if not name.startswith("_")}


def manifest_urls(storage: Storage, version: TableVersion) -> set[str]:
    manifest = json.loads(storage.read_bytes(f"{version.directory}/{records.MANIFEST}"))
    return {entry["url"] for entry in manifest["entries"]}


def stored_data_files(storage: Storage) -> set[str]:
    """Every data file under the table's version directories."""
    return {o.path for o in storage.list_recursive(PREFIX)
            if layout.parse_version_dir(o.path.split("/")[-2]) is not None and not o.path.rsplit("/", 1)[1].startswith("_")}


def listed(version: TableVersion) -> set[str]:
    return {f"{file_dir(version.directory, f)}/{f.name}" for f in version.files}


def test_a_referencing_version_holds_only_the_files_it_wrote(storage: Storage) -> None:
    store = TableStore(storage, layout=REFERENCING)
    commit_one_step(store, SCHEMA, NAME, change(storage, [(1, 3)]))
    commit_one_step(store, SCHEMA, NAME, change(storage, [(10, 3)]))
    v3 = commit_one_step(store, SCHEMA, NAME, change(storage, [(20, 3)]))
    assert v3 is not None and ids(store, v3) == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    assert data_names(storage, 3) == {f.name for f in v3.files if f.stored_in is None}
    assert sorted(f.stored_in or "" for f in v3.files) == ["", layout.version_dir_name(1), layout.version_dir_name(2)]
    assert manifest_urls(storage, v3) == {storage.url(path) for path in listed(v3)}, "the manifest lists every file"
    assert validate_version(storage, v3.directory) == []
    assert validate_table(storage, SCHEMA, NAME) == []


def test_retention_deletes_a_file_only_when_no_retained_version_lists_it(storage: Storage) -> None:
    store = TableStore(storage, EAGER, layout=REFERENCING)
    commit_one_step(store, SCHEMA, NAME, change(storage, [(1, 3), (10, 3)]))  # v1: A, B
    commit_one_step(store, SCHEMA, NAME, change(storage, [(10, 3)], drop=frozenset({10})))  # v2: B rewritten as B2, A carried
    v3 = commit_one_step(store, SCHEMA, NAME, change(storage, [(20, 3)]))  # v3: C; lists A (v1), B2 (v2)
    assert v3 is not None
    assert stored_data_files(storage) == listed(v3), "B, listed only by the retired v1, is gone; A and B2 stay"
    assert not any(name.startswith("_") for name in storage.list_children(layout.version_dir(PREFIX, 1)))
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []
    v4 = commit_one_step(store, SCHEMA, NAME, change(storage, [(1, 3)], drop=frozenset({1})))  # A rewritten: v1 holds nothing listed
    assert v4 is not None and ids(store, v4) == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    assert stored_data_files(storage) == listed(v4)
    assert layout.version_dir_name(1) not in storage.list_children(PREFIX), "an emptied retired directory goes"
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []


def test_a_complete_version_goes_whole(storage: Storage) -> None:
    store = TableStore(storage, EAGER, layout=COMPLETE)
    for first in (1, 10, 20):
        latest = commit_one_step(store, SCHEMA, NAME, change(storage, [(first, 3)]))
    assert latest is not None and data_names(storage, 3) == {f.name for f in latest.files}
    assert [n for n in storage.list_children(PREFIX) if layout.parse_version_dir(n)] == [layout.version_dir_name(3)]


def test_a_write_keeps_its_base_while_retention_runs_meanwhile(storage: Storage) -> None:
    """Another process retires versions while this writer prepares v3 on base v2: v2 is the latest, so it and
    every file it lists (some in v1's directory) are retained, and v3, listing them, commits complete."""
    writer = TableStore(storage, layout=REFERENCING)  # its own retention keeps versions for an hour
    commit_one_step(writer, SCHEMA, NAME, change(storage, [(1, 3)]))
    commit_one_step(writer, SCHEMA, NAME, change(storage, [(10, 3)]))
    other = TableStore(storage, EAGER, layout=REFERENCING)
    inner = change(storage, [(20, 3)])

    def produce(base: TableVersion | None, target: VersionTarget) -> PendingVersion:
        assert base is not None and base.version == 2
        assert other.collect_garbage(PREFIX, 2) == [layout.version_dir_name(1)]  # v1 retired meanwhile
        return inner(base, target)
    v3 = commit_one_step(writer, SCHEMA, NAME, produce)
    assert v3 is not None and ids(writer, v3) == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []


def test_switching_layouts_keeps_every_version_consistent(storage: Storage) -> None:
    complete = TableStore(storage, layout=COMPLETE)
    referencing = TableStore(storage, layout=REFERENCING)
    commit_one_step(complete, SCHEMA, NAME, change(storage, [(1, 3)]))
    v2 = commit_one_step(referencing, SCHEMA, NAME, change(storage, [(10, 3)]))
    assert v2 is not None and data_names(storage, 2) == {f.name for f in v2.files if f.stored_in is None}
    v3 = commit_one_step(complete, SCHEMA, NAME, change(storage, [(20, 3)]))
    assert v3 is not None and all(f.stored_in is None for f in v3.files)
    assert data_names(storage, 3) == {f.name for f in v3.files}, "back in the complete layout: every file is there"
    v4 = commit_one_step(referencing, SCHEMA, NAME, change(storage, [(30, 3)]))
    assert v4 is not None and {f.stored_in for f in v4.files} == {None, layout.version_dir_name(3)}
    assert ids(referencing, v4) == [1, 2, 3, 10, 11, 12, 20, 21, 22, 30, 31, 32]
    assert validate_table(storage, SCHEMA, NAME) == []
    v5 = commit_one_step(TableStore(storage, EAGER, layout=COMPLETE), SCHEMA, NAME, change(storage, [(40, 3)]))
    assert v5 is not None and stored_data_files(storage) == listed(v5), "retention left only v5's own files"
    assert data_names(storage, 5) == {f.name for f in v5.files}
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []


def test_versions_written_before_the_layouts_are_read_and_referenced(storage: Storage) -> None:
    """`_files.json` entries without `stored_in` (every version written before this field) are the version's own."""
    commit_one_step(TableStore(storage, layout=COMPLETE), SCHEMA, NAME, change(storage, [(1, 3)]))
    path = f"{layout.version_dir(PREFIX, 1)}/{records.FILES_JSON}"
    doc = json.loads(storage.read_bytes(path))
    for entry in doc["files"]:
        del entry["stored_in"]
    storage.write_bytes(path, records.dumps(doc))
    store = TableStore(storage, EAGER, layout=REFERENCING)
    old = store.load(SCHEMA, NAME)
    assert old is not None and ids(store, old) == [1, 2, 3]
    v2 = commit_one_step(store, SCHEMA, NAME, change(storage, [(10, 3)]))
    assert v2 is not None and ids(store, v2) == [1, 2, 3, 10, 11, 12]
    assert stored_data_files(storage) == listed(v2)
    assert validate_table(storage, SCHEMA, NAME, EAGER) == []


class CountingCopies(SparkCopies):
    def __init__(self, spark) -> None:  # type: ignore[no-untyped-def]
        super().__init__(lambda: spark)
        self.calls: list[int] = []

    def __call__(self, spec: StorageSpec, table, directory: str, version: int, pairs) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(len(pairs))
        super().__call__(spec, table, directory, version, pairs)


def test_a_large_complete_carry_forward_on_s3_is_a_spark_job(spark, s3_server, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(carry_module, "FAN_OUT_COPIES", 4)
    storage = open_storage(spec_of(s3_configuration(s3_server, f"fan-out-{uuid.uuid4().hex[:8]}")))
    copies = CountingCopies(spark)
    store = TableStore(storage, layout=COMPLETE, copies=copies)
    commit_one_step(store, SCHEMA, NAME, change(storage, [(i * 10, 2) for i in range(5)]))
    v2 = commit_one_step(store, SCHEMA, NAME, change(storage, [(100, 2)]))
    assert copies.calls == [5], "the five carried files were copied by the Spark job"
    assert v2 is not None and data_names(storage, 2) == {f.name for f in v2.files}
    assert ids(store, v2) == sorted([i * 10 + k for i in range(5) for k in range(2)] + [100, 101])
    assert validate_version(storage, v2.directory) == []
    small = TableStore(storage, layout=COMPLETE, copies=copies)
    monkeypatch.setattr(carry_module, "FAN_OUT_COPIES", 100)
    commit_one_step(small, SCHEMA, NAME, change(storage, [(200, 2)]))
    assert copies.calls == [5], "a carry-forward below the threshold stays in the driver's thread pool"


def test_layout_and_retention_fields() -> None:
    assert store_options({}, is_s3=True) == StoreOptions(REFERENCING, Retention(2, 3600.0))
    assert store_options({}, is_s3=False) == StoreOptions(COMPLETE, Retention(2, 3600.0))
    assert store_options({"layout": "referencing", "retention_versions": "5", "retention_min_age_seconds": "60"},
                         is_s3=False) == StoreOptions(REFERENCING, Retention(5, 60.0))
    assert {"layout", "retention_versions", "retention_min_age_seconds"} <= set(known_fields())
    assert unknown_fields_message({"layout": "complete", "retention_versions": "3"}) is None
    for field, value, cause in [("layout", "flat", "is not one of complete, referencing"),
                                ("retention_versions", "0", "is below 1"),
                                ("retention_versions", "two", "is not an integer"),
                                ("retention_min_age_seconds", "-1", "is not a number of seconds"),
                                ("retention_min_age_seconds", "soon", "is not a number")]:
        with pytest.raises(UserActionRequired, match=f"'{field}'.*{cause}"):
            store_options({field: value}, is_s3=True)


def test_a_table_synced_in_either_layout_through_the_server(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The server writes each version in the configuration's layout; a table switched between them stays whole."""
    t = table("switched", [("id", "INT", True), ("v", "STRING"), *SYS])
    referencing = {**configuration, "layout": "referencing"}
    complete = {**configuration, "layout": "complete"}
    create(stub, referencing, "lay", t)
    write(stub, referencing, "lay", t, tmp_path, replace=[r(i, "a") for i in range(50)])
    write(stub, referencing, "lay", t, tmp_path, replace=[r(i, "n") for i in range(1000, 1050)])  # new keys above
    store = TableStore(open_storage(spec_of(configuration)))
    v3 = store.load("lay", "switched")
    assert v3 is not None and any(f.stored_in for f in v3.files), "unchanged files listed where v2 wrote them"
    write(stub, complete, "lay", t, tmp_path, update=[r(3, "c")])
    v4 = store.load("lay", "switched")
    assert v4 is not None and len(v4.files) > 1 and all(f.stored_in is None for f in v4.files)
    got = {row["id"]: row["v"] for row in rows_of(configuration, "lay", "switched")}
    assert got == {**{i: "a" for i in range(50)}, **{i: "n" for i in range(1000, 1050)}, 3: "c"}
    assert validate_table(store.storage, "lay", "switched") == []


def test_manifest_readers_see_a_referencing_version_and_directory_readers_do_not(tmp_path: Path) -> None:
    """records-mover's records-directory source opens the manifest's URLs (as its database loaders do), so it reads
    the whole table; a Parquet reader of the directory (pyarrow here, as pandas and spark.read.parquet) sees only
    the files the version wrote."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from records_mover.records.processing_instructions import ProcessingInstructions
    from records_mover.records.records_directory import RecordsDirectory
    from records_mover.records.sources.directory import RecordsDirectoryRecordsSource
    from records_mover.url.resolver import UrlResolver

    storage = open_storage(StorageSpec(root=str(tmp_path / "root")))
    store = TableStore(storage, layout=REFERENCING)
    for first in (1, 10, 20):
        latest = commit_one_step(store, SCHEMA, NAME, change(storage, [(first, 3)]))
    assert latest is not None
    directory = tmp_path / "root" / latest.directory
    resolver = UrlResolver(boto3_session_getter=lambda: None, gcs_client_getter=lambda: None,
                           gcp_credentials_getter=lambda: None)
    source = RecordsDirectoryRecordsSource(RecordsDirectory(resolver.directory_url(directory.as_uri() + "/")),
                                           fail_if_dont_understand=True, url_resolver=resolver)
    with source.to_fileobjs_source(ProcessingInstructions()) as fileobjs:
        read = sorted(i for f in fileobjs.target_names_to_input_fileobjs.values()
                      for i in pq.read_table(f).column("id").to_pylist())
    assert read == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    assert sorted(ds.dataset(str(directory), format="parquet").to_table().column("id").to_pylist()) == [20, 21, 22]


def test_a_repair_keeps_the_files_of_its_older_base_through_retention(storage: Storage) -> None:
    """A repair commits an older version's files again (its commit record names that base): retention must keep
    them although the versions between list other files, in the referencing layout where they stay in place."""
    keep_two = Retention(keep_versions=2, min_age_seconds=0)
    store = TableStore(storage, keep_two, layout=REFERENCING)
    commit_one_step(store, SCHEMA, NAME, change(storage, [(1, 3)]))  # v1: A
    v2 = commit_one_step(store, SCHEMA, NAME, change(storage, [(10, 3)]))  # v2: A, B
    v3 = commit_one_step(store, SCHEMA, NAME, change(storage, [(10, 3)], drop=frozenset({10})))  # v3: A, B rewritten as C
    assert v2 is not None and v3 is not None
    b = next(f for f in v2.files if f.stored_in is None)
    c = next(f for f in v3.files if f.stored_in is None)
    storage.delete(f"{v3.directory}/{c.name}")  # v3 committed but incomplete
    repaired = store.repair(SCHEMA, NAME)
    assert repaired is not None and repaired.restored == 2 and repaired.version == 4
    b_path = f"{v2.directory}/{b.name}"
    assert storage.exists(b_path), "retention after the repair kept the file its base lists"
    v5 = commit_one_step(store, SCHEMA, NAME, change(storage, [(20, 3)]))  # retires the broken v3
    assert v5 is not None and ids(store, v5) == [1, 2, 3, 10, 11, 12, 20, 21, 22]
    assert storage.exists(b_path) and b_path in listed(v5)
    assert validate_table(storage, SCHEMA, NAME, keep_two) == []
