"""The command line (tester, tables, show), Capabilities, and bad input through WriteBatch."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from destination.protocol import sdk
from destination.rpc.server import assemble
from destination.runtime.settings import ServerOptions
from destination.storage.opening import open_storage
from destination.store.table_store import TableStore
from destination.tester.harness import Harness
from tests.batchfiles import write_csv
from tests.conftest import spec_of
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import KEY, SYS, create, params, write
from tests.tester_inputs import INPUTS_FOLDER

BIN = Path(sys.executable).parent / "records-destination"


@pytest.mark.parametrize("fmt,expected", [("csv", "CSV"), ("parquet", "PARQUET")])
def test_capabilities_follow_the_batch_file_format(fmt: str, expected: str) -> None:
    answer = assemble(ServerOptions(batch_file_format=fmt)).Capabilities(sdk.CapabilitiesRequest(), None)
    assert sdk.BatchFileFormat.Name(answer.batch_file_format) == expected


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_tester_tables_and_show_commands(grpc_server, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "configuration.json"
    conf.write_text(json.dumps(configuration))
    ok = subprocess.run([str(BIN), "tester", "--input", str(INPUTS_FOLDER / "clickhouse" / "input_update_and_hard_delete.json"),
                         "--address", grpc_server, "--configuration", str(conf), "--schema-name", "cli"],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "OK   WriteBatch" in ok.stdout and "summary:" in ok.stdout and " 0 failed" in ok.stdout
    missing = tmp_path / "missing_table.json"  # writes to a table the destination never saw: a Task, exit 1
    missing.write_text(json.dumps({"alter_table": {"nowhere": {"columns": {"id": "INT"}, "primary_key": ["id"]}}}))
    failing = subprocess.run([str(BIN), "tester", "--input", str(missing),
                              "--address", grpc_server, "--configuration", str(conf), "--schema-name", "cli2"],
                             capture_output=True, text=True, timeout=300)
    assert failing.returncode == 1 and "FAIL AlterTable nowhere" in failing.stdout, failing.stdout
    listed = subprocess.run([str(BIN), "tables", "--root", configuration["root"]], capture_output=True, text=True)
    assert listed.returncode == 0 and "cli" in listed.stdout and "update_and_delete" in listed.stdout
    shown = subprocess.run([str(BIN), "show", "cli.update_and_delete", "--root", configuration["root"]],
                           capture_output=True, text=True)
    assert shown.returncode == 0 and "rows" in shown.stdout
    expected_rows = len(rows_of(configuration, "cli", "update_and_delete"))
    assert f"{expected_rows} rows" in shown.stdout


def run_command(configuration: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """A reading command on the configuration's root (S3: endpoint and credentials as a user gives them)."""
    s3 = ["--s3-endpoint", configuration["s3_endpoint"]] if "s3_endpoint" in configuration else []
    env = {**os.environ, "AWS_ACCESS_KEY_ID": configuration.get("aws_access_key_id", ""),
           "AWS_SECRET_ACCESS_KEY": configuration.get("aws_secret_access_key", "")}
    done = subprocess.run([str(BIN), *args, "--root", configuration["root"], *s3], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_tables_show_and_changes_on_both_backends(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Version 2 loads ids 1-5, version 3 renames 1, version 4 deletes 2: `show --version/--limit` and
    `changes --to-version` print exactly those versions' rows."""
    changes = {**configuration, "changes": "parquet"}
    t = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, changes, "inspect", t)
    row = lambda i, v: {"id": str(i), "v": v, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}  # noqa: E731
    write(stub, changes, "inspect", t, tmp_path, replace=[row(i, f"v{i}") for i in range(1, 6)])
    write(stub, changes, "inspect", t, tmp_path, replace=[row(1, "renamed")])
    write(stub, changes, "inspect", t, tmp_path, delete=[row(2, None)])
    listed = run_command(configuration, "tables").stdout.splitlines()
    assert [line.split() for line in listed[1:]] == [["inspect", "t", "4", "4", listed[1].split()[-1]]]
    shown = run_command(configuration, "show", "inspect.t", "--version", "2", "--limit", "3").stdout.splitlines()
    assert shown[0] == "inspect.t version 2: 5 rows"
    printed = [line.split()[:3] for line in shown[2:]]  # after the column header: index, id, v
    assert len(printed) == 3 and {(int(i), v) for _n, i, v in printed} <= {(i, f"v{i}") for i in range(1, 6)}
    latest = run_command(configuration, "show", "inspect.t").stdout.splitlines()
    assert latest[0] == "inspect.t version 4: 4 rows" and len(latest) == 2 + 4
    text = run_command(configuration, "changes", "inspect.t", "--from-version", "2", "--to-version", "3",
                       "--output", "jsonl").stdout
    events = sorted((e["_change_type"], e["id"], e["v"], e["_commit_version"]) for e in map(json.loads, text.splitlines()))
    assert events == [("update_postimage", 1, "renamed", 3), ("update_preimage", 1, "v1", 3)]


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_tester_plain_text_with_a_folder_of_inputs(grpc_server, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Every input of a folder runs, in name order, with plain-text batch files (uncompressed, unencrypted)."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    for name, ids in (("a_first", [1, 2, 3]), ("b_second", [7, 8])):
        (folder / f"{name}.json").write_text(json.dumps({
            "create_table": {name: {"columns": {"id": "INT", "v": "STRING"}, "primary_key": ["id"]}},
            "ops": [{"upsert": {name: [{"id": i, "v": f"v{i}"} for i in ids]}}]}))
    (folder / "configuration.json").write_text(json.dumps(configuration))
    done = subprocess.run([str(BIN), "tester", "--input", str(folder), "--address", grpc_server, "--plain-text",
                           "--schema-name", "plain"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.index("== a_first.json") < done.stdout.index("== b_second.json")
    schema = dict(re.findall(r"^PASS (\S+)\.json \(schema (plain_\d+_\S+)\)", done.stdout, re.MULTILINE))
    assert schema.keys() == {"a_first", "b_second"}, done.stdout  # each file in a schema of its own
    assert sorted((x["id"], x["v"]) for x in rows_of(configuration, schema["a_first"], "a_first")) == \
        [(1, "v1"), (2, "v2"), (3, "v3")]
    assert sorted((x["id"], x["v"]) for x in rows_of(configuration, schema["b_second"], "b_second")) == \
        [(7, "v7"), (8, "v8")]
    work = tmp_path / "work"  # the files --plain-text sends (the command removes its own): CSV text as it is
    work.mkdir()
    harness = Harness(grpc_server, "plain_again", configuration, plain_text=True, batch_file_type="csv", workdir=work)
    harness.run_file(folder / "a_first.json")
    assert harness.failures == 0
    (sent,) = work.iterdir()
    header, *lines = sent.read_text(encoding="utf-8").splitlines()
    assert sorted(header.split(",")) == ["_fivetran_deleted", "_fivetran_synced", "id", "v"] and len(lines) == 3


def test_bad_batch_files_answer_precisely_and_write_nothing(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    t = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "bad", t)
    store = TableStore(open_storage(spec_of(configuration)))
    before = store.load("bad", "t")
    good = write_csv(tmp_path / "good.csv.zstd.aes", ["id", "v", "_fivetran_synced", "_fivetran_deleted"],
                     [{"id": "1", "v": "x", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}], KEY)
    truncated = tmp_path / "truncated.csv.zstd.aes"
    truncated.write_bytes(good.read_bytes()[:-7])
    cases = [
        ({str(good): bytes(32)}, [str(good)], "good.csv.zstd.aes"),  # wrong key
        ({}, [str(good)], "no key for this file"),  # path missing from keys
        ({str(truncated): KEY}, [str(truncated)], "truncated.csv.zstd.aes"),
        ({str(good): KEY}, [str(good), str(tmp_path / "absent.csv.zstd.aes")], "file not found"),
    ]
    for keys, files, expected in cases:
        request = sdk.WriteBatchRequest(configuration=configuration, schema_name="bad", table=t, replace_files=files,
                                        keys=keys, file_params=params())
        with pytest.raises(grpc.RpcError) as err:
            stub.WriteBatch(request)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert expected in err.value.details() and "bad.t" in err.value.details()
    after = store.load("bad", "t")
    assert before is not None and after is not None and after.version == before.version and after.rows == 0


def test_unconvertible_values_succeed_with_a_warning(stub, configuration, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    t = table("t", [("id", "INT", True), ("n", "SHORT"), ("day", "NAIVE_DATE"), *SYS])
    create(stub, configuration, "conv", t)
    path = write_csv(tmp_path / "conv.csv.zstd.aes", [c.name for c in t.columns], [
        {"id": "1", "n": "70000", "day": "not a date", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"},
        {"id": "2", "n": "7", "day": "2024-02-29", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}], KEY)
    answer = stub.WriteBatch(sdk.WriteBatchRequest(configuration=configuration, schema_name="conv", table=t,
                                                   replace_files=[str(path)], keys={str(path): KEY}, file_params=params()))
    assert answer.WhichOneof("response") == "success"
    got = {r["id"]: r for r in rows_of(configuration, "conv", "t")}
    meta = json.loads(got[1]["_destination_meta"])
    assert got[1]["n"] is None and got[1]["day"] is None
    assert {(c["field"], c["change"], c["reason"]) for c in meta["changes"]} == {
        ("n", "NULLED", "DESTINATION_FIELD_SIZE_LIMITATION"), ("day", "NULLED", "DESTINATION_SERIALIZATION_ERROR")}
    assert json.loads(got[2]["_destination_meta"]) == {"version": meta["version"], "changes": []}
    warnings = [json.loads(line) for line in capsys.readouterr().out.splitlines()
                if line.startswith("{") and '"WARNING"' in line and "conv.t" in line]
    assert sorted(w["message"] for w in warnings) == [  # one line per column, with the count and the reason
        "[WriteBatch] conv.t: column 'day': 1 value(s) stored as NULL, DESTINATION_SERIALIZATION_ERROR (not "
        "convertible to the column type); recorded in _destination_meta",
        "[WriteBatch] conv.t: column 'n': 1 value(s) stored as NULL, DESTINATION_FIELD_SIZE_LIMITATION (over the "
        "type's size limit); recorded in _destination_meta"]


RECORDS = {"avro": ({"records_format": "avro"}, "AvroRecordsFormat"),
           "bluelabs": ({"records_format": "delimited", "records_variant": "bluelabs", "records_header_row": "true"},
                        "DelimitedRecordsFormat")}


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
@pytest.mark.parametrize("records", list(RECORDS))
def test_show_changes_and_validate_read_avro_and_delimited_tables(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                   records: str) -> None:
    """An Avro and a delimited table: `show`, `changes` (Parquet change files replayed against the table's files)
    and `validate` read them; records-mover loads the version's `_format_*` strictly."""
    from records_mover.records.records_directory import RecordsDirectory
    from records_mover.url.resolver import UrlResolver

    fields, mover_format = RECORDS[records]
    config = {**configuration, **fields, "changes": "parquet"}
    t = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, config, "inspect", t)
    row = lambda i, v: {"id": str(i), "v": v, "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}  # noqa: E731
    write(stub, config, "inspect", t, tmp_path, replace=[row(i, f"v,{i}") for i in range(1, 6)])
    write(stub, config, "inspect", t, tmp_path, replace=[row(1, "renamed")])
    latest = run_command(configuration, "show", "inspect.t").stdout.splitlines()
    assert latest[0] == "inspect.t version 3: 5 rows" and len(latest) == 2 + 5
    assert {tuple(line.split()[1:3]) for line in latest[2:]} == {("1", "renamed"), *((str(i), f"v,{i}") for i in range(2, 6))}
    text = run_command(configuration, "changes", "inspect.t", "--from-version", "2", "--to-version", "3",
                       "--output", "jsonl").stdout
    events = sorted((e["_change_type"], e["id"], e["v"]) for e in map(json.loads, text.splitlines()))
    assert events == [("update_postimage", 1, "renamed"), ("update_preimage", 1, "v,1")]
    run_command(configuration, "validate", "inspect.t")
    current = TableStore(open_storage(spec_of(configuration))).load("inspect", "t")
    assert current is not None and current.table.stored_format == fields["records_format"]
    directory = Path(configuration["root"]) / "inspect" / "t" / current.directory.rsplit("/", 1)[1]
    resolver = UrlResolver(boto3_session_getter=lambda: None, gcs_client_getter=lambda: None,
                           gcp_credentials_getter=lambda: None)
    found = RecordsDirectory(records_loc=resolver.directory_url(directory.as_uri() + "/"))
    assert type(found.load_format(fail_if_dont_understand=True)).__name__ == mover_format


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_a_table_keeps_the_format_it_was_created_with(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The field changed after CreateTable: the table's writes stay Avro (a retried CreateTable included); a table
    created afterwards is Parquet."""
    t = table("kept", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, {**configuration, "records_format": "avro"}, "fmt", t)
    create(stub, configuration, "fmt", t)  # a retry under the changed field: the same table
    row = {"id": "1", "v": "a", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
    write(stub, configuration, "fmt", t, tmp_path, replace=[row])
    create(stub, configuration, "fmt", table("later", [("id", "INT", True), *SYS]))
    store = TableStore(open_storage(spec_of(configuration)))
    kept, later = store.load("fmt", "kept"), store.load("fmt", "later")
    assert kept is not None and later is not None
    assert kept.table.stored_format == "avro" and [f.name.endswith(".avro") for f in kept.files] == [True]
    assert (Path(configuration["root"]) / "fmt" / "kept" / kept.directory.rsplit("/", 1)[1] / "_format_avro").exists()
    assert later.table.stored_format == "parquet" and later.files[0].name.endswith(".parquet")
    assert rows_of(configuration, "fmt", "kept")[0]["v"] == "a"


@pytest.mark.parametrize("configuration", ["local"], indirect=True)
def test_records_mover_reads_our_directory(stub, configuration, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """records-mover's own reader: the format, the schema (round-tripping exactly) and the manifest."""
    from records_mover.records.records_directory import RecordsDirectory
    from records_mover.records.schema import RecordsSchema
    from records_mover.url.resolver import UrlResolver

    t = table("rm", [("id", "INT", True), ("amount", "DECIMAL", False, (12, 2)), ("at", "UTC_DATETIME"), *SYS])
    create(stub, configuration, "mover", t)
    current = TableStore(open_storage(spec_of(configuration))).load("mover", "rm")
    assert current is not None
    directory = Path(configuration["root"]) / "mover" / "rm" / current.directory.rsplit("/", 1)[1]
    resolver = UrlResolver(boto3_session_getter=lambda: None, gcs_client_getter=lambda: None,
                           gcp_credentials_getter=lambda: None)
    records = RecordsDirectory(records_loc=resolver.directory_url(directory.as_uri() + "/"))
    assert type(records.load_format(fail_if_dont_understand=True)).__name__ == "ParquetRecordsFormat"
    schema = records.load_schema_json_obj()
    assert [(f.name, f.field_type) for f in schema.fields] == [
        ("id", "integer"), ("amount", "decimal"), ("at", "datetimetz"), ("_fivetran_synced", "datetimetz"),
        ("_fivetran_deleted", "boolean"), ("_destination_meta", "string")]
    raw = json.loads((directory / "_schema.json").read_text())
    assert RecordsSchema.from_data(raw).to_data() == raw
    assert [e["meta"]["content_length"] for e in records.get_manifest()["entries"]] == \
        [f.bytes for f in current.files]
