"""`records-destination reformat`: a table written through the server moved Parquet → Avro → delimited (bluelabs) →
Parquet, each move one version holding the same rows value for value (oracles: pyarrow over the Parquet files
before and after, fastavro and the csv module driven by `_format_delimited` over the files in between); the
Delta Lake metadata removed out of Parquet, Iceberg's out of Parquet and Avro (refused without --drop-table-formats),
Iceberg following the move to Avro (its snapshot lists the Avro files: pyiceberg's plan) and both written anew back
in Parquet (delta-rs, pyiceberg); the change files of a move hold no events; writes after a move land in the new
format; bad input names the table and cause, exits 1 and writes nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from destination.changes.replay import net_between, read_version
from destination.cli import main
from destination.on_disk import layout
from destination.on_disk.locations import file_path
from destination.protocol import sdk
from destination.storage.base import Storage
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.store.versions import TableVersion
from tests.batchfiles import write_csv
from tests.conftest import spec_of
from tests.lake_readers import delta_rs, iceberg_pyiceberg, iceberg_table
from tests.rpc_helpers import rows_of, table
from tests.test_conformance import check_with_oracle_readers
from tests.test_write_path import KEY, SYS, create, params, write

BIN = Path(sys.executable).parent / "records-destination"
COLUMNS = [("id", "INT", True), ("v", "STRING"), ("amount", "DECIMAL", False, (12, 2)), ("at", "UTC_DATETIME"),
           ("n", "LONG"), *SYS]


def row(i: int, v: str | None, synced: str = "2024-01-01T00:00:00.123456Z", deleted: str = "false") -> dict[str, Any]:
    return {"id": str(i), "v": v, "amount": f"{i}.25", "at": f"2023-0{1 + i % 9}-02T03:04:05.678901Z",
            "n": str(-(2 ** 40) * i), "_fivetran_synced": synced, "_fivetran_deleted": deleted}


def cli(configuration: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        *args: str) -> tuple[int, str, str]:
    """The command in this process (its Spark session is the tests'), given the root as a user gives it."""
    s3 = ["--s3-endpoint", configuration["s3_endpoint"]] if "s3_endpoint" in configuration else []
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", configuration.get("aws_access_key_id", ""))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", configuration.get("aws_secret_access_key", ""))
    capsys.readouterr()
    code = main([*args, "--root", configuration["root"], *s3])
    out, err = capsys.readouterr()
    return code, out, err


def parquet_rows(storage: Storage, version: TableVersion) -> list[dict[str, Any]]:
    """The version's rows as pyarrow reads its Parquet files (not through the destination's reader)."""
    assert all(f.name.endswith(".parquet") for f in version.files)
    parts = [pq.read_table(pa.BufferReader(storage.read_bytes(file_path(version.directory, f)))) for f in version.files]
    return sorted(pa.concat_tables(parts).to_pylist(), key=lambda r: (r["id"], str(r.get("_fivetran_start"))))


def ours(configuration: dict[str, str], schema: str, name: str) -> list[dict[str, Any]]:
    return sorted(rows_of(configuration, schema, name), key=lambda r: (r["id"], str(r.get("_fivetran_start"))))


def latest(configuration: dict[str, str], schema: str, name: str) -> TableVersion:
    found = TableStore(open_storage(spec_of(configuration))).load(schema, name)
    assert found is not None
    return found


def iceberg_files(storage: Storage, version: TableVersion) -> set[tuple[str, str]]:
    """The names and formats of the data files that the Iceberg snapshot of `version` lists (pyiceberg's scan plan:
    it reads the manifests, not the data files)."""
    found = iceberg_table(storage.spec, storage.url(version.prefix))
    snapshot = found.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["records-version"] == str(version.version)
    return {(task.file.file_path.rsplit("/", 1)[-1], task.file.file_format.name) for task in found.scan().plan_files()}


def has_folder(storage: Storage, prefix: str, folder: str) -> bool:
    return any(True for _ in storage.list_recursive(f"{prefix}/{folder}"))


def test_a_table_moves_through_avro_and_bluelabs_back_to_parquet(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = {**configuration, "changes": "parquet"}
    t = table("t", COLUMNS)
    create(stub, config, "mv", t)
    write(stub, config, "mv", t, tmp_path, replace=[row(i, f"v,{i} \"q\"") for i in range(1, 7)])
    write(stub, config, "mv", t, tmp_path, replace=[row(2, "renamed", "2024-02-01T00:00:00Z")], delete=[row(3, None)])
    storage = open_storage(spec_of(configuration))
    first = latest(configuration, "mv", "t")
    before = parquet_rows(storage, first)
    assert [r["id"] for r in before] == [1, 2, 4, 5, 6] and before[1]["v"] == "renamed"
    prefix, url = first.prefix, storage.url(first.prefix)
    assert delta_rs(storage.spec, url).num_rows == 5 and iceberg_pyiceberg(storage.spec, url).num_rows == 5

    # to Avro: refused while the table has Delta Lake metadata (Iceberg describes Avro files), unless told to drop it
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "mv.t", "--records-format", "avro")
    assert code == 1 and "mv.t" in err and "--drop-table-formats" in err and "delta (_delta_log/" in err
    assert "iceberg (" not in err
    assert latest(configuration, "mv", "t").version == first.version and has_folder(storage, prefix, "_delta_log")

    code, out, err = cli(configuration, monkeypatch, capsys, "reformat", "mv.t", "--records-format", "avro",
                         "--drop-table-formats")
    assert code == 0, err
    avro = latest(configuration, "mv", "t")
    assert avro.version == first.version + 1 and f"version {avro.version}" in out
    assert avro.table.stored_format == "avro" and all(f.name.endswith(".avro") for f in avro.files)
    assert storage.exists(f"{avro.directory}/_format_avro") and not storage.exists(f"{avro.directory}/_format_parquet")
    table_json = json.loads(storage.read_bytes(f"{avro.directory}/_table.json"))["table"]
    assert table_json["records_format"] == "avro"
    check_with_oracle_readers(storage, avro)  # fastavro reads each file as the destination does
    assert ours(configuration, "mv", "t") == before  # ... which is the Parquet rows, value for value
    for folder in ("_delta_log", "_change_data"):
        assert not has_folder(storage, prefix, folder), folder
    with pytest.raises(Exception, match=r"(?i)not a delta table|no files in log segment|not found"):
        delta_rs(storage.spec, url)
    assert iceberg_files(storage, avro) == {(f.name, "AVRO") for f in avro.files}
    moved = read_version(storage, prefix, avro.version)
    assert moved.kind == "rows" and moved.events.count == 0  # the move changes no row
    net, _ = net_between(storage, prefix, first.version - 1, avro.version)
    assert net.count == 2  # replay across the move: the previous write's update and delete only

    # a write after the move lands in Avro
    write(stub, config, "mv", t, tmp_path, replace=[row(7, "after avro")])
    after = latest(configuration, "mv", "t")
    assert after.table.stored_format == "avro" and all(f.name.endswith(".avro") for f in after.files)
    assert not has_folder(storage, prefix, "_delta_log")  # the server's commit writes no Delta Lake for it
    assert iceberg_files(storage, after) == {(f.name, "AVRO") for f in after.files}
    before = ours(configuration, "mv", "t")

    # to delimited: Iceberg does not describe it either
    bluelabs = ("reformat", "mv.t", "--records-format", "delimited", "--records-variant", "bluelabs",
                "--records-hint", "header-row=true")
    code, out, err = cli(configuration, monkeypatch, capsys, *bluelabs)
    assert code == 1 and "the table has iceberg (metadata/);" in err and has_folder(storage, prefix, "metadata")
    code, out, err = cli(configuration, monkeypatch, capsys, *bluelabs, "--drop-table-formats")
    assert code == 0, err
    assert not has_folder(storage, prefix, "metadata")
    with pytest.raises(Exception):  # noqa: B017 - pyiceberg finds no metadata file (its error type varies by store)
        iceberg_pyiceberg(storage.spec, url)
    text = latest(configuration, "mv", "t")
    assert text.table.stored_format == "delimited" and text.table.records_variant == "bluelabs"
    assert all(".csv" in f.name for f in text.files)
    hints = json.loads(storage.read_bytes(f"{text.directory}/_format_delimited"))["hints"]
    assert hints["header-row"] is True and dict(text.table.records_hints)["header-row"] is True
    check_with_oracle_readers(storage, text)  # the csv module, from the hints alone
    assert ours(configuration, "mv", "t") == before

    code, out, err = cli(configuration, monkeypatch, capsys, "reformat", "mv.t", "--records-format", "parquet")
    assert code == 0, err
    back = latest(configuration, "mv", "t")
    assert back.table.stored_format == "parquet" and back.version == text.version + 1
    assert parquet_rows(storage, back) == before  # pyarrow: every value the Avro version held
    assert storage.exists(f"{back.directory}/_format_parquet")
    assert delta_rs(storage.spec, url).num_rows == iceberg_pyiceberg(storage.spec, url).num_rows == len(before)
    write(stub, config, "mv", t, tmp_path, replace=[row(8, "after parquet")])
    final = latest(configuration, "mv", "t")
    assert all(f.name.endswith(".parquet") for f in final.files)
    ids = sorted(r["id"] for r in delta_rs(storage.spec, url).to_pylist())
    assert ids == sorted(r["id"] for r in iceberg_pyiceberg(storage.spec, url).to_pylist()) == [1, 2, 4, 5, 6, 7, 8]
    net, _ = net_between(storage, prefix, 0, final.version)  # replayed from the start, across every move
    assert sorted(e["id"] for e in net.after.to_pylist() if e["id"] is not None) == [1, 2, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_a_history_table_moves_with_its_history_columns_and_meta(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = {**configuration, "table_formats": "none"}
    t = table("h", [("id", "INT", True), ("col1", "STRING"), ("_fivetran_synced", "UTC_DATETIME"),
                    ("_fivetran_start", "UTC_DATETIME", True), ("_fivetran_end", "UTC_DATETIME"),
                    ("_fivetran_active", "BOOLEAN")])
    create(stub, config, "hist", t)
    t1, t2, tmax = "2024-01-01T00:00:00Z", "2024-02-01T00:00:00Z", "9999-12-31T23:59:59.999Z"
    request = sdk.WriteHistoryBatchRequest(configuration=config, schema_name="hist", table=t, file_params=params())
    cols = [c.name for c in t.columns]
    version = lambda i, v, start: {"id": str(i), "col1": v, "_fivetran_synced": start, "_fivetran_start": start,  # noqa: E731
                                   "_fivetran_end": tmax, "_fivetran_active": "true"}
    for i, (field, columns, rows) in enumerate([
            ("earliest_start_files", ["id", "_fivetran_start"], [{"id": "1", "_fivetran_start": t1}]),
            ("replace_files", cols, [version(1, "a", t1), version(2, "b", t1)]),
            ("replace_files", cols, [version(1, "a2", t2)])]):
        path = write_csv(tmp_path / f"h{i}.csv.zstd.aes", columns, rows, KEY)
        getattr(request, field).append(str(path))
        request.keys[str(path)] = KEY
    assert stub.WriteHistoryBatch(request).WhichOneof("response") == "success"
    storage = open_storage(spec_of(configuration))
    before = parquet_rows(storage, latest(configuration, "hist", "h"))
    assert len(before) == 3 and all(r["_destination_meta"] for r in before)
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "hist.h", "--records-format", "avro")
    assert code == 0, err  # no table formats: nothing to drop
    moved = latest(configuration, "hist", "h")
    assert moved.table.is_history and moved.table.stored_format == "avro"
    check_with_oracle_readers(storage, moved)
    assert ours(configuration, "hist", "h") == before


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_bad_input_names_the_table_and_cause_and_writes_nothing(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = {**configuration, "table_formats": "none"}
    t = table("b", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, config, "bad", t)
    write(stub, config, "bad", t, tmp_path, replace=[row(1, ""), row(2, "x")])  # an empty string: not in bluelabs
    version = latest(configuration, "bad", "b").version
    cases = [
        (["nope.t", "--records-format", "avro"], ["table nope.t does not exist"]),
        (["bad.b", "--records-format", "parquet"], ["bad.b", "already in records format parquet"]),
        (["bad.b", "--records-format", "orc"], ["bad.b", "--records-format", "'orc' is not one of"]),
        (["bad.b", "--records-format", "delimited"], ["bad.b", "--records-variant", "needs a variant"]),
        (["bad.b", "--records-format", "delimited", "--records-variant", "csv"], ["bad.b", "--records-hint dateformat"]),
        (["bad.b", "--records-format", "delimited", "--records-variant", "bluelabs", "--records-hint", "compression=LZO"],
         ["bad.b", "--records-hint compression", "LZO"]),
        (["bad.b", "--records-format", "delimited", "--records-variant", "bluelabs", "--records-hint", "header-row=yes"],
         ["bad.b", "--records-hint header-row", "'yes' is neither true nor false"]),
        (["bad.b", "--records-format", "delimited", "--records-variant", "bluelabs", "--records-hint", "quote=x"],
         ["--records-hint 'quote=x'", "HINT=VALUE"]),
        (["bad.b", "--records-format", "delimited", "--records-variant", "bluelabs"],
         ["bad.b", "cannot hold every value", "'v' (1)", "nothing was changed"]),
    ]
    for args, words in cases:
        code, out, err = cli(configuration, monkeypatch, capsys, "reformat", *args)
        assert code == 1, (args, out, err)
        assert err.startswith("records-destination reformat: ") and "Traceback" not in err, err
        for word in words:
            assert word in err, (args, err)
    current = latest(configuration, "bad", "b")
    assert current.version == version and current.table.stored_format == "parquet"
    prefix = current.prefix
    storage = open_storage(spec_of(configuration))
    assert not storage.exists(f"{prefix}/_log/{version + 1}.json")
    assert not has_folder(storage, prefix, layout.version_dir_name(version + 1))
    # the installed command: the same answer, exit code 1
    done = subprocess.run([str(BIN), "reformat", "bad.b", "--records-format", "parquet", "--root",
                           configuration["root"]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "already in records format parquet" in done.stderr, done.stderr


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_the_catalog_entry_follows_avro_is_dropped_for_delimited_and_registered_back(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    from destination.table_formats.iceberg import file_io_properties

    uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = {**configuration, "catalog": "sql", "catalog_uri": uri}
    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps({"catalog": "sql", "catalog_uri": uri}))
    t = table("c", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, config, "cat", t)
    write(stub, config, "cat", t, tmp_path, replace=[row(1, "a"), row(2, "b")])
    storage = open_storage(spec_of(configuration))
    catalog = SqlCatalog("fivetran", uri=uri, **file_io_properties(storage.spec))
    assert catalog.load_table(("cat", "c")).scan().to_arrow().num_rows == 2
    catalog_option = ("--catalog", str(catalog_file))
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "cat.c", "--records-format", "avro",
                       *catalog_option)
    assert code == 1 and "sql catalog" not in err and "delta (" in err and "--drop-table-formats" in err
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "cat.c", "--records-format", "avro",
                       "--drop-table-formats", *catalog_option)
    assert code == 0, err
    avro = latest(configuration, "cat", "c")
    entry = catalog.load_table(("cat", "c"))  # the entry follows the move: Iceberg describes the Avro files
    assert entry.metadata_location.endswith(f"v{avro.version}.metadata.json")
    assert {t.file.file_format.name for t in entry.scan().plan_files()} == {"AVRO"}
    delimited = ("reformat", "cat.c", "--records-format", "delimited", "--records-variant", "bluelabs")
    code, _, err = cli(configuration, monkeypatch, capsys, *delimited, *catalog_option)
    assert code == 1 and "sql catalog" in err and "--drop-table-formats" in err
    code, _, err = cli(configuration, monkeypatch, capsys, *delimited, "--drop-table-formats", *catalog_option)
    assert code == 0, err
    with pytest.raises(NoSuchTableError):  # no entry naming removed metadata
        catalog.load_table(("cat", "c"))
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "cat.c", "--records-format", "parquet",
                       "--catalog", str(catalog_file))
    assert code == 0, err
    back = latest(configuration, "cat", "c")
    entry = catalog.load_table(("cat", "c"))
    assert entry.metadata_location.endswith(f"v{back.version}.metadata.json")
    assert sorted(entry.scan().to_arrow().column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_a_table_format_the_table_has_follows_the_move_whatever_formats_says(  # type: ignore[no-untyped-def]
        stub, configuration, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`--table-formats none` on a move to Avro: the table's Iceberg metadata is not left describing its last Parquet
    version (its readers would read those rows as the table's): it follows the move; Delta Lake's goes. Given with its
    old spelling, `--formats`, which still works and is warned about."""
    t = table("t", COLUMNS)
    create(stub, configuration, "fm", t)
    write(stub, configuration, "fm", t, tmp_path, replace=[row(i, f"v{i}") for i in range(1, 4)])
    storage = open_storage(spec_of(configuration))
    code, _, err = cli(configuration, monkeypatch, capsys, "reformat", "fm.t", "--records-format", "avro",
                       "--drop-table-formats", "--formats", "none")
    assert code == 0, err
    assert "--formats is now --table-formats" in err
    moved = latest(configuration, "fm", "t")
    assert moved.table.stored_format == "avro"
    assert iceberg_files(storage, moved) == {(f.name, "AVRO") for f in moved.files}
    assert not has_folder(storage, moved.prefix, "_delta_log")
