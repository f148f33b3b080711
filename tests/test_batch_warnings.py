"""WARNING lines of a write: batch files Fivetran would not send but that are still read (naming the file), and
values stored as NULL (per column, with the count and the reason, never the values)."""
from __future__ import annotations

from pathlib import Path

import pytest

from destination.protocol import sdk
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import write_csv
from tests.conftest import change_options
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import SYS, create, write


@pytest.mark.parametrize("compression", ["ZSTD", "GZIP"])
def test_a_file_declared_compressed_but_plain_is_read_with_a_warning(stub, configuration, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      capsys, compression: str) -> None:
    t = table("t", [("id", "INT", True), ("v", "STRING"), *SYS])
    create(stub, configuration, "plain", t)
    path = write_csv(tmp_path / "plain.csv", [c.name for c in t.columns],
                     [{"id": "1", "v": "a", "_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}],
                     compression="off")
    request = sdk.WriteBatchRequest(configuration=configuration, schema_name="plain", table=t, replace_files=[str(path)],
                                    file_params=sdk.FileParams(compression=sdk.Compression.Value(compression),
                                                               encryption=sdk.Encryption.Value("NONE"),
                                                               null_string=NULL_STRING,
                                                               unmodified_string=UNMODIFIED_STRING))
    assert stub.WriteBatch(request).WhichOneof("response") == "success"
    assert [row["v"] for row in rows_of(configuration, "plain", "t")] == ["a"]
    assert (f'"level": "WARNING", "message": "batch file {str(path)!r} is declared {compression} but is not '
            f'compressed; read as uncompressed"') in capsys.readouterr().out


def test_values_that_did_not_convert_are_one_warning_per_column_with_count_and_reason(  # type: ignore[no-untyped-def]
        stub, grpc_endpoint, configuration, tmp_path: Path, capsys, monkeypatch) -> None:
    t = table("t", [("id", "INT", True), ("n", "INT"), ("b", "BINARY"), ("v", "STRING"), *SYS])
    create(stub, configuration, "nulled", t)
    synced = {"_fivetran_synced": "2024-01-01T00:00:00Z", "_fivetran_deleted": "false"}
    rows = [{"id": "1", "n": "secret-a", "b": "!!secret!!", "v": "x", **synced},
            {"id": "2", "n": "secret-b", "b": "AQI=", "v": "y", **synced},
            {"id": "3", "n": "7", "b": "AQI=", "v": "z", **synced}]
    capsys.readouterr()
    # into the empty table (Spark load tasks), a merge decoded on the driver, a merge decoded in Spark map tasks
    service = grpc_endpoint[1]
    for small_request_bytes in (16 << 20, 16 << 20, 0):
        change_options(service, monkeypatch, small_request_bytes=small_request_bytes)
        write(stub, configuration, "nulled", t, tmp_path, rows)
        out = capsys.readouterr().out
        assert ("[WriteBatch] nulled.t: column 'n': 2 value(s) stored as NULL, DESTINATION_SERIALIZATION_ERROR "
                "(not convertible to the column type); recorded in _destination_meta") in out, out
        assert ("[WriteBatch] nulled.t: column 'b': 1 value(s) kept as their raw bytes (not valid base64), "
                "DESTINATION_SERIALIZATION_ERROR (not convertible to the column type); recorded in _destination_meta"
                ) in out, out
        assert out.count('"level": "WARNING"') == 2 and "secret" not in out, out
        assert ("decode_task_s" in out) == (small_request_bytes == 0), out  # the path taken
