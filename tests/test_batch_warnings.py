"""Batch files that Fivetran would not send but that are still read: said in a WARNING line naming the file."""
from __future__ import annotations

from pathlib import Path

import pytest

from destination.protocol import sdk
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import write_csv
from tests.rpc_helpers import rows_of, table
from tests.test_write_path import SYS, create


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
