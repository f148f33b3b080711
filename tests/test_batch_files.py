"""Batch-file decoding: every DataType from CSV and Parquet, markers, dialect, and every error case."""
from __future__ import annotations

import datetime as dt
import decimal
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import BinaryIO, cast

import pyarrow as pa
import pytest

from destination.batch_files.reader import CSV_BLOCK, FileFormat, iter_batch_file
from destination.model.table_model import ColumnDef
from destination.protocol import common
from destination.rpc.proto_convert import table_from_proto
from destination.runtime.errors import BadBatchFile, BadRequest
from destination.storage.base import Storage
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING
from tests.batchfiles import FMT, PLAIN, write_csv, write_parquet

UTC = dt.UTC
COLUMNS = [
    ColumnDef("id", "INT", True), ColumnDef("b", "BOOLEAN"), ColumnDef("s16", "SHORT"), ColumnDef("i64", "LONG"),
    ColumnDef("dec", "DECIMAL", precision=38, scale=10), ColumnDef("f32", "FLOAT"), ColumnDef("f64", "DOUBLE"),
    ColumnDef("d", "NAIVE_DATE"), ColumnDef("ndt", "NAIVE_DATETIME"), ColumnDef("utc", "UTC_DATETIME"),
    ColumnDef("bin", "BINARY"), ColumnDef("x", "XML"), ColumnDef("s", "STRING"), ColumnDef("j", "JSON"),
    ColumnDef("t", "NAIVE_TIME"),
]
ROW = {"id": "1", "b": "true", "s16": "-7", "i64": "9223372036854775807", "dec": "12345678901234567890.0123456789",
       "f32": "1.5", "f64": "-2.25E-10", "d": "9999-12-31", "ndt": "0001-01-01T00:00:00", "utc": "2024-02-03T12:44:22.123456Z",
       "bin": "3q2+7w==", "x": "<a>x</a>", "s": 'say "hi", \\n\nnext line', "j": '{"k": [1, 2]}', "t": "23:59:59.999999"}
EXPECTED = {"id": 1, "b": True, "s16": -7, "i64": 9223372036854775807,
            "dec": decimal.Decimal("12345678901234567890.0123456789"), "f32": 1.5, "f64": -2.25e-10,
            "d": dt.date(9999, 12, 31), "ndt": dt.datetime(1, 1, 1), "utc": dt.datetime(2024, 2, 3, 12, 44, 22, 123456, tzinfo=UTC),
            "bin": b"\xde\xad\xbe\xef", "x": "<a>x</a>", "s": 'say "hi", \\n\nnext line', "j": '{"k": [1, 2]}',
            "t": dt.time(23, 59, 59, 999999)}
KEY = bytes(range(32))


def decode(path: Path, fmt: FileFormat = FMT, key: bytes | None = KEY, columns=COLUMNS):  # type: ignore[no-untyped-def]
    blocks = list(iter_batch_file(str(path), list(columns), fmt, key, ["id"]))
    table = pa.concat_tables([b.table for b in blocks])
    unmod = {k: v for b in blocks for k, v in b.unmodified.items()}
    return table, unmod, [f for b in blocks for f in b.failures]


def _row(table: pa.Table, i: int = 0) -> dict:
    row = {k: v[i] for k, v in table.to_pydict().items()}
    if row.get("utc") is not None:
        row["utc"] = row["utc"].astimezone(UTC)
    return row


def test_every_type_from_csv(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "f.csv.zstd.aes", [c.name for c in COLUMNS], [ROW], KEY)
    table, unmod, failures = decode(path)
    assert failures == [] and unmod == {}
    assert table.column_names == [c.name for c in COLUMNS]
    assert _row(table) == EXPECTED


def test_every_type_from_parquet(tmp_path: Path) -> None:
    raw = dict(ROW, bin="not base64!")  # the Avro writer sends the bytes themselves
    path = write_parquet(tmp_path / "f.parquet.zstd.aes", [c.name for c in COLUMNS], [raw], {"bin"}, KEY)
    table, _unmod, failures = decode(path, FileFormat(True, "ZSTD", NULL_STRING, UNMODIFIED_STRING, "parquet"))
    assert failures == []
    assert _row(table) == dict(EXPECTED, bin=b"not base64!")


def test_markers_empty_strings_and_shuffled_header(tmp_path: Path) -> None:
    cols = [ColumnDef("id", "INT", True), ColumnDef("s", "STRING"), ColumnDef("n", "LONG")]
    rows = [{"id": "1", "s": "", "n": None}, {"id": "2", "s": None, "n": UNMODIFIED_STRING},
            {"id": "3", "s": NULL_STRING + "x", "n": "5"}]
    # a real string equal to the null marker text arrives quoted (it is longer than 24 characters)
    path = tmp_path / "m.csv"
    header = "n,s,id\n"
    body = f'{NULL_STRING},"",1\n"{UNMODIFIED_STRING}",{NULL_STRING},2\n5,"{NULL_STRING}",3\n'
    path.write_text(header + body)
    table, unmod, _ = decode(path, PLAIN, None, cols)
    assert table.column("s").to_pylist() == ["", None, NULL_STRING]
    assert table.column("n").to_pylist() == [None, None, 5]
    assert unmod["n"].to_pylist() == [False, True, False]
    assert "s" not in unmod
    _ = rows


def test_gzip_and_uncompressed_files(tmp_path: Path) -> None:
    cols = ["id", "s"]
    rows = [{"id": str(i), "s": f"v{i}"} for i in range(10)]
    for name, key, compression, fmt in [
        ("g.csv.gz.aes", KEY, "gzip", FileFormat(True, "GZIP", NULL_STRING, UNMODIFIED_STRING)),
        ("p.csv", None, "off", PLAIN),
    ]:
        path = write_csv(tmp_path / name, cols, rows, key, compression)
        table, _, _ = decode(path, fmt, key, COLUMNS[:1] + [ColumnDef("s", "STRING")])
        assert table.column("s").to_pylist() == [f"v{i}" for i in range(10)]


def test_a_staged_copy_decodes_like_the_file(tmp_path: Path, storage: Storage) -> None:
    """Executors on other machines read the file's copy staged in the table's storage (`source`), not its path:
    every encryption and compression must decode the same from it (the path only names the file in errors)."""
    cols = ["id", "s"]
    rows = [{"id": str(i), "s": f"v{i}"} for i in range(10)]
    columns = COLUMNS[:1] + [ColumnDef("s", "STRING")]
    for name, key, compression, fmt in [
        ("z.csv.zstd.aes", KEY, "zstd", FMT),
        ("z.csv.zstd", None, "zstd", FileFormat(False, "ZSTD", NULL_STRING, UNMODIFIED_STRING)),
        ("g.csv.gz", None, "gzip", FileFormat(False, "GZIP", NULL_STRING, UNMODIFIED_STRING)),
        ("p.csv", None, "off", PLAIN),
    ]:
        path = write_csv(tmp_path / name, cols, rows, key, compression)
        storage.write_bytes(f"_staging/{name}", path.read_bytes())
        path.unlink()
        source = cast(BinaryIO, storage.open_stream(f"_staging/{name}"))
        blocks = list(iter_batch_file(f"/elsewhere/{name}", columns, fmt, key, ["id"], source=source))
        assert pa.concat_tables([b.table for b in blocks]).column("s").to_pylist() == [f"v{i}" for i in range(10)], name


@pytest.fixture
def good_file(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "good.csv.zstd.aes", ["id", "s"], [{"id": str(i), "s": "x" * 50} for i in range(2000)], KEY)


def test_wrong_key_is_a_clear_error(good_file: Path) -> None:
    with pytest.raises(BadBatchFile) as err:
        decode(good_file, key=bytes(32))
    assert "good.csv.zstd.aes" in str(err.value) and ("padding" in str(err.value) or "wrong key" in str(err.value))


def test_missing_key_is_a_clear_error(good_file: Path) -> None:
    with pytest.raises(BadBatchFile, match="no key for this file"):
        decode(good_file, key=None)


def test_truncated_file_is_a_clear_error(good_file: Path, tmp_path: Path) -> None:
    data = good_file.read_bytes()
    for cut in (len(data) - 16, len(data) - 5, 10):
        short = tmp_path / f"short{cut}.csv.zstd.aes"
        short.write_bytes(data[:cut])
        with pytest.raises(BadBatchFile) as err:
            decode(short)
        assert short.name in str(err.value)


def test_bad_padding_is_detected(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    iv = os.urandom(16)
    body = b"id\n1\n" + b"\x00" * 11  # 16 bytes whose last byte is not a valid PKCS#5 pad
    enc = Cipher(algorithms.AES(KEY), modes.CBC(iv)).encryptor()
    path = tmp_path / "pad.csv.aes"
    path.write_bytes(iv + enc.update(body) + enc.finalize())
    with pytest.raises(BadBatchFile, match="padding"):
        decode(path, FileFormat(True, "OFF", NULL_STRING, UNMODIFIED_STRING))


def test_corrupt_zstd_is_a_clear_error(tmp_path: Path) -> None:
    from tests.batchfiles import seal_raw

    path = tmp_path / "corrupt.csv.zstd.aes"
    path.write_bytes(seal_raw(b"\x28\xb5\x2f\xfd" + os.urandom(200), KEY))
    with pytest.raises(BadBatchFile, match=r"corrupt\.csv\.zstd\.aes"):
        decode(path)


def test_csv_without_header_or_key_columns(tmp_path: Path) -> None:
    empty = write_csv(tmp_path / "empty.csv.zstd.aes", [], [], KEY)
    empty.write_bytes(__import__("tests.batchfiles", fromlist=["seal"]).seal(b"", KEY))
    with pytest.raises(BadBatchFile, match="no header"):
        decode(empty)
    headerless = tmp_path / "nohead.csv"
    headerless.write_text("1,abc\n2,def\n")
    with pytest.raises(BadBatchFile, match="missing key column"):
        decode(headerless, PLAIN, None)
    nokey = write_csv(tmp_path / "nokey.csv.zstd.aes", ["s"], [{"s": "a"}], KEY)
    with pytest.raises(BadBatchFile, match=r"missing key column\(s\) \['id'\]"):
        decode(nokey)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BadBatchFile, match="file not found"):
        decode(tmp_path / "nowhere.csv.zstd.aes")


def test_unknown_type_is_rejected() -> None:
    table = common.Table(name="t")
    table.columns.add(name="a", type=99)
    with pytest.raises(BadRequest, match="unsupported data type"):
        table_from_proto(table)


_DECODE_AND_MEASURE = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    from destination.batch_files.reader import iter_batch_file
    from destination.model.table_model import ColumnDef
    from tests.batchfiles import FMT
    def rss_kb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    before = peak = rss_kb()
    cols = [ColumnDef("id", "LONG", True), ColumnDef("amount", "DOUBLE"), ColumnDef("name", "STRING"),
            ColumnDef("note", "STRING")]
    t = time.time(); rows = 0
    for block in iter_batch_file(sys.argv[1], cols, FMT, bytes(range(32)), ["id"]):
        rows += block.table.num_rows
        peak = max(peak, rss_kb())
    print(rows, (peak - before) / 1024, pa.default_memory_pool().max_memory() / 1e6, time.time() - t)
""")


def _big_file(path: Path, n: int) -> int:
    import io

    import numpy as np
    import pyarrow.csv as pacsv

    from destination.tester.batchgen import seal

    tbl = pa.table({"id": pa.array(np.arange(n)), "amount": pa.array(np.random.default_rng(1).random(n) * 1e6),
                    "name": pa.array(np.char.add("customer-name-", np.arange(n).astype(str))),
                    "note": pa.array(np.full(n, "lorem ipsum dolor sit amet, consectetur adipiscing"))})
    buf = io.BytesIO()
    pacsv.write_csv(tbl, buf)
    path.write_bytes(seal(buf.getvalue(), KEY))
    return len(buf.getvalue())


def test_large_file_decodes_in_bounded_memory(tmp_path: Path) -> None:
    """A 100 MB batch file (the largest the protocol sends) streams through the decoder: memory is reported, stays
    far below the file size, and does not grow with it (the same decode of a file half as large needs about as
    much; decoded whole, as one block, each of these bounds fails)."""
    results = []
    for n in (550_000, 1_100_000):
        path = tmp_path / f"big{n}.csv.zstd.aes"
        size = _big_file(path, n)
        out = subprocess.run([sys.executable, "-c", _DECODE_AND_MEASURE, str(path)], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).parent.parent)
        rows, rss_growth, arrow_peak, seconds = out.stdout.split()
        print(f"decoded {size / 1e6:.0f} MB ({rows} rows) in {float(seconds):.2f}s "
              f"({size / 1e6 / float(seconds):.0f} MB/s); peak RSS +{float(rss_growth):.0f} MB, "
              f"Arrow pool peak {float(arrow_peak):.0f} MB")
        assert int(rows) == n
        results.append((size, float(rss_growth), float(arrow_peak)))
        path.unlink()
    (small, small_rss, small_arrow), (large, large_rss, large_arrow) = results
    assert large >= 100_000_000 and large > 1.9 * small  # twice the bytes: a decode that grew with them shows it
    assert large_arrow < 8 * CSV_BLOCK / 1e6 and large_arrow <= small_arrow * 1.5  # a few blocks, whatever the file
    assert large_rss < small_rss * 1.5 + 20, "peak memory grew with the file size"
    assert large_rss < large / 1e6, "decoding held as much as the whole file"


def test_malformed_csv_errors_do_not_echo_row_values(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text("id,s\n1,secret-value-1\n2,secret-value-2,extra-secret\n")
    with pytest.raises(BadBatchFile) as err:
        decode(path, PLAIN, None, [ColumnDef("id", "INT", True), ColumnDef("s", "STRING")])
    assert "ragged.csv" in str(err.value) and "secret" not in str(err.value)
