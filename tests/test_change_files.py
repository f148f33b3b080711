"""Change files through the server and the write path: the seed's region examples come out in its layout, readers
(records-mover, our `changes` command) understand the directories, a version is never visible without its changes
(crashes, failures, retries), retention keeps the changes, and bad settings are a Task naming the field."""
from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import pytest

from destination.batch_files.reader import FileFormat
from destination.changes.change_settings import ChangeSettings
from destination.cli import main
from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk import layout
from destination.protocol import common, sdk
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import Retention, TableStore
from destination.write.batches import plan_batch
from destination.write.outcome import BatchRetried, Outcome
from destination.write.write_path import WritePath, write_path_for
from tests.batchfiles import FMT, write_csv
from tests.change_consumer import replay, tokenize
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import KEY, U, create, write

REGION = [("r_regionkey", "INT", True), ("r_comment", "STRING"), ("r_name", "STRING")]
OTHERS = [{"r_regionkey": str(i), "r_comment": f"c{i}", "r_name": f"n{i}"} for i in range(5)]
INDIA = {"r_regionkey": "10", "r_comment": "India", "r_name": "India"}


def region_versions(stub, tmp_path: Path, changes: dict[str, str], schema: str) -> tuple[dict[str, str], str]:  # type: ignore[no-untyped-def]
    """The seed's three operations, each its own request, after five other inserts (the seed's insertCount is 6)."""
    configuration = {"root": str(tmp_path / "root"), **changes}
    t = table("region", REGION)
    create(stub, configuration, schema, t)
    write(stub, configuration, schema, t, tmp_path, replace=OTHERS)
    write(stub, configuration, schema, t, tmp_path, replace=[INDIA])
    write(stub, configuration, schema, t, tmp_path, update=[{"r_regionkey": "10", "r_comment": "USA", "r_name": U}])
    write(stub, configuration, schema, t, tmp_path, delete=[{"r_regionkey": "10", "r_comment": None, "r_name": None}])
    return configuration, layout.table_prefix(schema, "region")


def change_file(storage: Storage, prefix: str, version: int) -> tuple[str, str]:
    """(name, text) of a version's one change file."""
    directory = layout.changes_dir(prefix, version)
    (entry,) = json.loads(storage.read_bytes(f"{directory}/_manifest"))["entries"]
    name = entry["url"].rsplit("/", 1)[-1]
    return name, storage.read_bytes(f"{directory}/{name}").decode("utf-8")


def seed_counts(i: int, u: int, d: int) -> dict[str, int]:
    return {"insertCount": i, "updateCount": u, "deleteCount": d, "replaceCount": 0}


def test_seed_region_examples_in_csv_through_the_server(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration, prefix = region_versions(stub, tmp_path, {"changes": "arcion-csv", "changes_image": "minimal"}, "tpch")
    storage = open_storage(spec_of(configuration))
    seed = {  # the seed's three lines, first 3x+1 fields (alphabetical triplets r_comment, r_name, r_regionkey)
        3: (["India", None, "1", "India", None, "1", "10", None, "1", "I"], seed_counts(6, 0, 0)),
        4: (["USA", None, "1", None, None, "0", None, "10", "2", "U"], seed_counts(6, 1, 0)),
        5: ([None, None, "0", None, None, "0", None, "10", "2", "D"], seed_counts(6, 1, 1)),
    }
    for version, (fields, counts) in seed.items():
        name, text = change_file(storage, prefix, version)
        (line,) = tokenize(text, "NULL")
        assert line[:10] == fields
        cursor = json.loads(line[10] or "")
        assert (cursor["version"], cursor["file"], cursor["row"], cursor["v"]) == (version, name, 0, 2)
        assert json.loads(line[11] or "") == counts


def test_seed_region_examples_in_json_through_the_server(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration, prefix = region_versions(stub, tmp_path, {"changes": "arcion-json", "changes_image": "minimal"},
                                            "io_blitzz")
    storage = open_storage(spec_of(configuration))
    name_hashes = {"namespace": {"catalog": None, "schema": "io_blitzz", "hash": 696406511}, "name": "region",
                   "hash": -821029210}
    seed = {  # the seed's objects: before, after, exists, operationcount
        3: ({"r_regionkey": "null", "r_comment": "null", "r_name": "null"},
            {"r_regionkey": "10", "r_comment": "India", "r_name": "India"},
            {"r_regionkey": "1", "r_comment": "1", "r_name": "1"}, seed_counts(6, 0, 0)),
        4: ({"r_regionkey": "10", "r_comment": "null", "r_name": "null"},
            {"r_regionkey": "null", "r_comment": "USA", "r_name": "null"},
            {"r_regionkey": "2", "r_comment": "1", "r_name": "0"}, seed_counts(6, 1, 0)),
        5: ({"r_regionkey": "10", "r_comment": "null", "r_name": "null"},
            {"r_regionkey": "null", "r_comment": "null", "r_name": "null"},
            {"r_regionkey": "2", "r_comment": "0", "r_name": "0"}, seed_counts(6, 1, 1)),
    }
    for version, (before, after, exists, counts) in seed.items():
        _name, text = change_file(storage, prefix, version)
        (obj,) = [json.loads(line) for line in text.splitlines()]
        assert obj["tableName"] == name_hashes
        assert (obj["before"], obj["after"], obj["exists"]) == (before, after, exists)
        assert obj["opType"] == "IUD"[version - 3]
        assert json.loads(obj["operationcount"]) == counts


@pytest.mark.parametrize("changes", ["parquet", "arcion-csv"])
def test_records_mover_reads_change_directories(stub, tmp_path: Path, changes: str) -> None:  # type: ignore[no-untyped-def]
    from records_mover.records.records_directory import RecordsDirectory
    from records_mover.url.resolver import UrlResolver

    configuration, prefix = region_versions(stub, tmp_path, {"changes": changes, "changes_include_header": "true"}, "rm")
    directory = Path(configuration["root"]) / prefix / "changes" / layout.version_dir_name(4)
    resolver = UrlResolver(boto3_session_getter=lambda: None, gcs_client_getter=lambda: None,
                           gcp_credentials_getter=lambda: None)
    records = RecordsDirectory(records_loc=resolver.directory_url(directory.as_uri() + "/"))
    fmt = records.load_format(fail_if_dont_understand=True)
    names = [f.name for f in records.load_schema_json_obj().fields]
    if changes == "parquet":
        assert type(fmt).__name__ == "ParquetRecordsFormat"
        assert names == ["r_regionkey", "r_comment", "r_name", "_change_type", "_commit_version", "_commit_timestamp"]
    else:
        assert type(fmt).__name__ == "DelimitedRecordsFormat" and fmt.hints["header-row"] is True
        assert names[:3] == ["r_comment__new", "r_comment__old", "r_comment__exists"] and names[-1] == "operationcount"
    (entry,) = records.get_manifest()["entries"]
    assert entry["meta"]["content_length"] == Path(entry["url"].removeprefix("file://")).stat().st_size


def test_a_delimited_tables_change_files_hold_its_values_as_stored(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """bluelabs stores an empty string as NULL (and records it in `_destination_meta`): the change file says NULL,
    as the table does, and the same row sent again changes nothing, so it is no event. The change files are read
    by pyarrow."""
    import pyarrow.parquet as pq

    configuration = {"root": str(tmp_path / "root"), "changes": "parquet", "records_format": "delimited",
                     "records_variant": "bluelabs"}
    t = table("region", REGION)
    create(stub, configuration, "dl", t)
    row = {"r_regionkey": "1", "r_comment": "", "r_name": "n"}
    write(stub, configuration, "dl", t, tmp_path, replace=[row])  # version 2
    write(stub, configuration, "dl", t, tmp_path, replace=[row])  # version 3: the same row again
    assert [(r["r_comment"], r["r_name"]) for r in rows_of(configuration, "dl", "region")] == [(None, "n")]
    storage = open_storage(spec_of(configuration))
    prefix = layout.table_prefix("dl", "region")

    def events(version: int) -> list[dict[str, Any]]:
        directory = layout.changes_dir(prefix, version)
        entries = json.loads(storage.read_bytes(f"{directory}/_manifest"))["entries"]
        root = Path(configuration["root"])
        return [r for e in entries for r in pq.read_table(root / directory / e["url"].rsplit("/", 1)[-1]).to_pylist()]

    (inserted,) = events(2)
    assert (inserted["_change_type"], inserted["r_regionkey"], inserted["r_comment"]) == ("insert", 1, None)
    assert events(3) == []


def test_a_delimited_tables_snapshot_change_files_hold_its_values_as_stored(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A migration's version has snapshot change files (every row of the new version): a column added with the
    default '' to a bluelabs table is NULL in the table (the variant cannot hold '') and so in the snapshot."""
    import pyarrow.parquet as pq

    configuration = {"root": str(tmp_path / "root"), "changes": "parquet", "records_format": "delimited",
                     "records_variant": "bluelabs"}
    t = table("region", REGION)
    create(stub, configuration, "dl", t)
    write(stub, configuration, "dl", t, tmp_path, replace=[{"r_regionkey": "1", "r_comment": "c", "r_name": "n"}])
    details = sdk.MigrationDetails(schema="dl", table="region")
    added = details.add.add_column_with_default_value
    added.column, added.column_type, added.default_value = "extra", common.DataType.Value("STRING"), ""
    assert stub.Migrate(sdk.MigrateRequest(configuration=configuration, details=details)).success  # version 3
    assert [r["extra"] for r in rows_of(configuration, "dl", "region")] == [None]
    storage = open_storage(spec_of(configuration))
    directory = layout.changes_dir(layout.table_prefix("dl", "region"), 3)
    (entry,) = json.loads(storage.read_bytes(f"{directory}/_manifest"))["entries"]
    (row,) = pq.read_table(Path(configuration["root"]) / directory / entry["url"].rsplit("/", 1)[-1]).to_pylist()
    assert (row["r_regionkey"], row["r_comment"], row["extra"]) == (1, "c", None)


# ---- atomicity, retention, retries (the write path with a store that crashes on demand) -----------------------

TABLE = TableDef("events", (ColumnDef("id", "LONG", True), ColumnDef("v", "STRING"),
                            ColumnDef("_fivetran_synced", "UTC_DATETIME")))


class SimulatedCrash(BaseException):
    """A BaseException: no cleanup runs, as when the process dies."""


def batch(tmp_path: Path, first: int, n: int = 3) -> dict[str, list[str]]:
    rows = [{"id": str(i), "v": f"row {i}", "_fivetran_synced": f"2024-01-01T00:00:{i % 60:02d}Z"}
            for i in range(first, first + n)]
    path = write_csv(tmp_path / f"b{first}.csv.zstd.aes", ["id", "v", "_fivetran_synced"], rows, KEY)
    return {"replace": [str(path)]}


def writer(store: TableStore, spark, fmt: str = "parquet") -> WritePath:  # type: ignore[no-untyped-def]
    return write_path_for(store, lambda: spark, ChangeSettings(format=fmt))


def ops(tmp_path: Path, first: int, fmt: FileFormat = FMT) -> Any:
    files = batch(tmp_path, first)
    return plan_batch(files, {p: KEY for p in files["replace"]}, fmt)


@pytest.mark.parametrize("fmt", ["parquet", "arcion-csv"])
def test_a_version_is_never_visible_without_its_changes(storage: Storage, spark, tmp_path: Path, fmt: str) -> None:  # type: ignore[no-untyped-def]
    prefix = layout.table_prefix("s", "events")
    writer(TableStore(storage), spark, fmt).tables.create_table("s", TABLE)

    def crash(step: str) -> None:
        if step == "before_commit_record":
            raise SimulatedCrash(step)
    crashed = TableStore(storage, fault=crash)
    with pytest.raises(SimulatedCrash):
        writer(crashed, spark, fmt).writes.write_batch("s", "events", ops(tmp_path, 1))
    # the change directory of version 2 was written, but without its commit record nothing is visible
    assert storage.exists(f"{layout.changes_dir(prefix, 2)}/_manifest")
    assert TableStore(storage).latest_version_number(prefix) == 1
    assert replay(storage, "s", "events").rows == {}

    def fail(step: str) -> None:
        if step == "after_data_files":
            raise RuntimeError("disk full")
    with pytest.raises(RuntimeError):  # a failure before the commit removes both directories of the attempt
        writer(TableStore(storage, fault=fail, claim_lease_seconds=0), spark, fmt).writes.write_batch("s", "events", ops(tmp_path, 5))
    assert not storage.list_children(layout.changes_dir(prefix, 2))
    assert not storage.list_children(layout.version_dir(prefix, 2))

    done = writer(TableStore(storage, claim_lease_seconds=0), spark, fmt).writes.write_batch("s", "events", ops(tmp_path, 10))
    assert done.version == 2
    replica = replay(storage, "s", "events")
    assert sorted(k[0] for k in replica.rows) == [10, 11, 12]  # only the committed request's rows
    assert storage.list_children(layout.changes_root(prefix)) == [layout.version_dir_name(1), layout.version_dir_name(2)]


def test_retention_removes_old_versions_but_keeps_their_changes(storage: Storage, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = TableStore(storage, Retention(keep_versions=2, min_age_seconds=0))
    w = writer(store, spark, "arcion-csv")
    w.tables.create_table("s", TABLE)
    for first in (1, 4, 7, 10):
        w.writes.write_batch("s", "events", ops(tmp_path, first))
    prefix = layout.table_prefix("s", "events")
    assert [n for n in storage.list_children(prefix) if n.startswith("v")] == [layout.version_dir_name(4),
                                                                             layout.version_dir_name(5)]
    assert len(storage.list_children(layout.changes_root(prefix))) == 5
    assert sorted(k[0] for k in replay(storage, "s", "events").rows) == list(range(1, 13))


def test_a_retried_request_writes_no_second_change_directory(stub, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), "changes": "parquet"}
    t = table("r", REGION)
    create(stub, configuration, "retry", t)
    request = write(stub, configuration, "retry", t, tmp_path, replace=OTHERS)
    assert stub.WriteBatch(request).WhichOneof("response") == "success"
    storage = open_storage(spec_of(configuration))
    prefix = layout.table_prefix("retry", "r")
    assert len(storage.list_children(layout.changes_root(prefix))) == 2
    assert len(replay(storage, "retry", "r").rows) == len(OTHERS)


def test_a_batch_committed_after_the_requests_own_check_is_answered_as_retried_by_the_merge(  # type: ignore[no-untyped-def]
        storage: Storage, spark, tmp_path: Path) -> None:
    """A retry racing its first try passes the request's check and finds the batch recorded under its claim: the
    merge answers it as retried, commits nothing and leaves no claim, version or change directory behind."""
    store = TableStore(storage)
    w = writer(store, spark)
    w.tables.create_table("s", TABLE)
    plan = ops(tmp_path, 1)
    first = w.writes.write_batch("s", "events", plan)
    assert isinstance(first, Outcome) and first.version == 2
    again = w.writes.write_batch("s", "events", plan)  # as after a check made before the first try committed
    assert again == BatchRetried(files=1, version=2)
    prefix = layout.table_prefix("s", "events")
    assert TableStore(storage).latest_version_number(prefix) == 2
    assert not storage.exists(layout.claim_path(prefix, 3))
    assert not storage.list_children(layout.version_dir(prefix, 3))
    assert len(storage.list_children(layout.changes_root(prefix))) == 2
    assert sorted(k[0] for k in replay(storage, "s", "events").rows) == [1, 2, 3]


@pytest.mark.parametrize("field,value", [("changes", "xml"), ("changes_image", "partial"),
                                         ("changes_null_token", "a,b"), ("changes_include_header", "maybe")])
def test_bad_change_settings_are_a_task_naming_the_field(stub, tmp_path: Path, field: str, value: str) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), "changes": "arcion-csv", field: value}
    answer = stub.CreateTable(sdk.CreateTableRequest(configuration=configuration, schema_name="bad",
                                                     table=table("t", REGION)))
    assert answer.WhichOneof("response") == "task" and repr(field) in answer.task.message
    assert not (tmp_path / "root" / "bad").exists()


def test_the_configuration_form_offers_change_files(stub) -> None:  # type: ignore[no-untyped-def]
    form = stub.ConfigurationForm(common.ConfigurationFormRequest())
    fields = {f.name: f for f in form.fields}
    assert list(fields["changes"].dropdown_field.dropdown_field) == ["off", "arcion-csv", "arcion-json", "parquet"]
    assert fields["changes"].default_value == "off"
    assert fields["changes_emit_noop_updates"].HasField("toggle_field")


# ---- the `changes` command --------------------------------------------------------------------------------------

def run_cli(capsys, *args: str) -> tuple[int, list[str]]:  # type: ignore[no-untyped-def]
    capsys.readouterr()  # the in-process server's log lines so far
    code = main(["changes", *args])
    return code, capsys.readouterr().out.splitlines()


def jsonl(capsys, *args: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    code, lines = run_cli(capsys, *args, "--output", "jsonl")
    assert code == 0, lines
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("changes", [{"changes": "parquet"}, {"changes": "arcion-json", "changes_image": "minimal"}])
def test_the_changes_command(stub, tmp_path: Path, capsys, changes: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    configuration = {"root": str(tmp_path / "root"), **changes}
    root = configuration["root"]
    t = table("t", [("id", "INT", True), ("v", "STRING")])
    create(stub, configuration, "c", t)  # v1
    write(stub, configuration, "c", t, tmp_path, replace=[{"id": "1", "v": "a"}, {"id": "2", "v": "b"}])  # v2
    write(stub, configuration, "c", t, tmp_path, update=[{"id": "1", "v": "a2"}], delete=[{"id": "2", "v": None}])  # v3
    write(stub, configuration, "c", t, tmp_path, replace=[{"id": "1", "v": "a3"}, {"id": "3", "v": "c"}])  # v4
    listed = jsonl(capsys, "c.t", "--from-version", "2", "--root", root)
    assert [(r["_commit_version"], r["_change_type"], r["id"]) for r in listed] == [
        (3, "delete", 2), (3, "update_preimage", 1), (3, "update_postimage", 1),
        (4, "update_preimage", 1), (4, "update_postimage", 1), (4, "insert", 3)]
    net = jsonl(capsys, "c.t", "--from-version", "2", "--net", "--root", root)
    assert sorted((r["_change_type"], r["id"], r["v"]) for r in net) == [
        ("delete", 2, "b"), ("insert", 3, "c"), ("update_postimage", 1, "a3"), ("update_preimage", 1, "a")]
    net_from_start = jsonl(capsys, "c.t", "--from-version", "0", "--net", "--root", root)  # across the create snapshot
    assert sorted((r["_change_type"], r["id"], r["v"]) for r in net_from_start) == [("insert", 1, "a3"),
                                                                                    ("insert", 3, "c")]
    code, lines = run_cli(capsys, "c.t", "--from-version", "3", "--to-version", "9", "--root", root)
    assert code == 2 and "latest version" in lines[0]


def test_the_changes_command_names_a_version_without_change_files(stub, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root = str(tmp_path / "root")
    t = table("t", [("id", "INT", True), ("v", "STRING")])
    create(stub, {"root": root, "changes": "parquet"}, "c", t)
    write(stub, {"root": root}, "c", t, tmp_path, replace=[{"id": "1", "v": "a"}])  # change files off for v2
    code, lines = run_cli(capsys, "c.t", "--from-version", "0", "--root", root)
    assert code == 1 and "version 2 has no change files" in lines[0]
    assert rows_of({"root": root}, "c", "t")[0]["v"] == "a"


def test_the_changes_command_writes_json_types(stub, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Each value of `--output jsonl` is the JSON type of its column, compared with the Parquet change files as
    pyarrow reads them: numbers, true/false, null; non-finite floats, decimals, times and bytes as exact text."""
    root = str(tmp_path / "root")
    configuration = {"root": root, "changes": "parquet"}
    t = table("t", [("id", "LONG", True), ("b", "BOOLEAN"), ("f", "DOUBLE"), ("d", "DECIMAL", False, (12, 3)),
                    ("s", "STRING"), ("ts", "UTC_DATETIME"), ("bin", "BINARY")])
    create(stub, configuration, "j", t)  # v1
    rows = [{"id": "1", "b": "true", "f": "1.5", "d": "123456789.125", "s": "x", "ts": "2024-01-02T03:04:05.123456Z",
             "bin": "aGk="},
            {"id": "2", "b": "false", "f": "NaN", "d": "-0.001", "s": None, "ts": None, "bin": None},
            {"id": "3", "b": None, "f": "-Infinity", "d": None, "s": "", "ts": "1970-01-01T00:00:00Z", "bin": ""},
            {"id": "4", "b": "true", "f": None, "d": "0.000", "s": "4", "ts": None, "bin": None}]
    write(stub, configuration, "j", t, tmp_path, replace=rows)  # v2
    listed = jsonl(capsys, "j.t", "--from-version", "1", "--root", root)
    storage = open_storage(spec_of(configuration))
    prefix = TableStore(storage).table_prefix("j", "t")
    directory = layout.changes_dir(prefix, 2)
    import pyarrow.parquet as pq  # the oracle: the change files themselves
    stored = [pq.read_table(storage.arrow_path(f"{directory}/{name}"), filesystem=storage.arrow_fs).to_pylist()
              for name in storage.list_children(directory) if name.endswith(".parquet")]
    expected = sorted((r for part in stored for r in part), key=lambda r: r["id"])
    assert len(listed) == len(expected) == 4
    for got, want in zip(sorted(listed, key=lambda r: r["id"]), expected, strict=True):
        assert got["_commit_version"] == 2 and got["_change_type"] == "insert"
        assert got["id"] == want["id"] and type(got["id"]) is int
        assert got["b"] is want["b"]  # true/false/null, not "true"
        f = want["f"]
        assert got["f"] == (None if f is None else "NaN" if math.isnan(f) else "-Infinity" if f == -math.inf else f)
        assert got["d"] == (None if want["d"] is None else str(want["d"]))  # exact, at its scale
        assert got["s"] == want["s"]
        ts = want["ts"]
        assert got["ts"] == (None if ts is None else ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        assert got["bin"] == (None if want["bin"] is None else base64.b64encode(want["bin"]).decode())
