"""CSV byte integrity: every value arrives byte for byte whatever the reader's buffer boundaries (issue 15 §1), and
the bytes a library could alter silently (BOM, NUL, lone CR, U+2028/U+2029, invalid UTF-8) are kept or refused or
NULLed with a change record, as the table in docs/reference/types.md "Bytes of text values" says. Plus guards on the pyarrow behaviour the reader relies on."""
from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from destination.batch_files.csvrows import PARSE_OPTIONS, iter_row_chunks, parse_rows, read_rows, row_end_exact
from destination.batch_files.reader import CSV_BLOCK, FileFormat, iter_batch_file
from destination.changes.replay import _csv_texts, _json_texts
from destination.model.table_model import ColumnDef, TableDef
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, seal
from tests.batchfiles import FMT, PLAIN

KEY = bytes(range(32))
COLUMNS = [ColumnDef("id", "INT", True), ColumnDef("s", "STRING")]
MIB = 1 << 20


def reader_boundaries(size: int) -> list[int]:
    """Every buffer boundary a CSV reader might use below `size`: our block size's multiples, powers of two from
    64 KiB to 16 MiB, and multiples of 1,000,000 bytes."""
    points = set(range(CSV_BLOCK, size, CSV_BLOCK)) | {1 << p for p in range(16, 25)} | set(range(10**6, size, 10**6))
    return sorted(b for b in points if b < size)


def quoted(value: bytes) -> bytes:
    return b'"' + value.replace(b'"', b'""') + b'"'


FILLER = b'lorem "ipsum"\rdolor\nsit\r\namet, ' * 40  # quotes, lone CR, lone LF, CRLF and commas in every value


def crlf_file(size: int, header: bytes = b"id,s\r\n") -> tuple[bytes, list[bytes]]:
    """CSV plaintext (`header`, then rows of id,s) of about `size` bytes whose quoted values hold CR, LF and CRLF, with a CRLF
    inside a value straddling every reader boundary (its CR the last byte before it, its LF the first after)."""
    out = bytearray(header)
    values: list[bytes] = []
    for boundary in reader_boundaries(size):
        while boundary - len(out) > 3 * len(FILLER):  # ordinary rows up to near the boundary
            values.append(FILLER)
            out += b"%d,%s\r\n" % (len(values), quoted(FILLER))
        prefix = b"%d," % (len(values) + 1) + b'"'
        # the value's text before its straddling CRLF: plain letters, so its length is its quoted length
        head = b"x" * (boundary - 1 - len(out) - len(prefix))
        value = head + b"\r\n" + FILLER
        values.append(value)
        out += prefix + quoted(value)[1:] + b"\r\n"
        assert out[boundary - 1:boundary + 1] == b"\r\n"
    return bytes(out), values


def decode(data: bytes, fmt: FileFormat = PLAIN, columns: list[ColumnDef] = COLUMNS, tmp_path: Path | None = None
           ) -> tuple[pa.Table, list]:
    blocks = list(iter_batch_file("/in/memory.csv", columns, fmt, KEY, ["id"], source=io.BytesIO(data)))
    return pa.concat_tables([b.table for b in blocks]), [f for b in blocks for f in b.failures]


def test_a_crlf_straddling_every_reader_boundary_arrives_byte_for_byte() -> None:
    plain, values = crlf_file(17 * MIB)
    for label, data, fmt in (("plain", plain, PLAIN), ("zstd+aes", seal(plain, KEY), FMT)):
        table, failures = decode(data, fmt)
        assert failures == []
        assert table.column("id").to_pylist() == list(range(1, len(values) + 1)), label
        got = table.column("s").to_pylist()
        altered = [i for i, (a, b) in enumerate(zip(got, values, strict=True)) if a.encode() != b]
        assert altered == [], f"{label}: {len(altered)} values altered, first at row {altered[:1]}"


def test_the_arcion_change_file_reader_keeps_straddling_crlfs() -> None:
    body, values = crlf_file(3 * MIB, header=b"")  # a snapshot change file: x columns in table order, no header
    table = TableDef("t", tuple(COLUMNS))
    texts = _csv_texts(body, {"kind": "snapshot", "include_header": False, "null_token": "NULL"}, table)
    assert [v.encode() for v in texts["s"].to_pylist()] == values


def test_the_arcion_json_change_file_reader_keeps_unicode_line_separators() -> None:
    """Arcion JSON lines hold non-ASCII unescaped; only LF ends a line (not U+2028, U+2029 or U+0085)."""
    value = "a\u2028b\u2029c\x85d\r"
    data = json.dumps({"id": "1", "s": value}, ensure_ascii=False).encode() + b"\n"
    texts = _json_texts(data, "snapshot", TableDef("t", tuple(COLUMNS)))
    assert texts["s"].to_pylist() == [value]


def test_a_row_larger_than_the_chunk_takes_a_chunk_of_its_own() -> None:
    big = (b"a\r\n\"b," * (5 * MIB // 6))[: 5 * MIB]  # more than two 2 MiB blocks
    plain = b"id,s\n1,x\n2," + quoted(big) + b"\n3,y\n"
    chunks = list(iter_row_chunks(io.BytesIO(plain), 1 << 16))
    assert b"".join(chunks) == plain
    assert any(len(c) > 5 * MIB for c in chunks) and all(row_end_exact(c + b"\0") == len(c) for c in chunks)
    table, _ = decode(plain)
    assert table.column("s").to_pylist() == ["x", big.decode(), "y"]


def random_rows(rng: random.Random, n: int) -> tuple[bytes, list[list[str]]]:
    """CSV text in pyarrow's dialect, RFC 4180 and not (quotes inside unquoted values, text after a closing
    quote), with LF, CR and CRLF line ends; and the values pyarrow must read from it."""
    out, rows = [], []
    for _ in range(n):
        fields, texts = [], []
        for _col in range(3):
            kind = rng.random()
            text = "".join(rng.choice(["a", "b", ",", '"', "\r", "\n", "\r\n", "é", " "])
                           for _ in range(rng.randint(0, 6)))
            if kind < 0.6:
                fields.append('"' + text.replace('"', '""') + '"')
                texts.append(text)
            elif kind < 0.8:  # unquoted: no delimiter or line end; a quote only after the first character
                plain = "z" + "".join(ch for ch in text if ch not in ',\r\n')
                fields.append(plain)
                texts.append(plain)
            else:  # text after the closing quote continues the value
                tail = "t" + "".join(ch for ch in text if ch not in ',\r\n')
                fields.append('"' + text.replace('"', '""') + '"' + tail)
                texts.append(text + tail)
        out.append(",".join(fields) + rng.choice(["\n", "\r", "\r\n"]))
        rows.append(texts)
    return "".join(out).encode(), rows


def test_guard_pyarrow_reads_one_block_byte_for_byte_with_the_quote_rules_the_cutter_assumes() -> None:
    """The reader relies on pyarrow's CSV parser, given a whole chunk as one block, to (1) keep every value byte
    for byte with the quote rules csvrows.row_end_exact follows; (2) take a quoted value left open at the end of its
    input to that end (so a chunk cut inside a value is seen: its last value ends with the cut's line end); and on
    (3) read_csv dropping a BOM that starts its input. If a pyarrow upgrade changes any of these, this fails before
    data is altered. Chunks cut as small as 1 byte make every guessed cut wrong somewhere: parse_rows must still
    give exactly the whole-file parse."""
    rng = random.Random(15)
    names = ["a", "b", "c"]
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names})
    for trial in range(300):
        data, rows = random_rows(rng, rng.randint(1, 12))
        whole = read_rows(data, names, convert)
        assert [list(r.values()) for r in whole.to_pylist()] == rows, f"trial {trial}: pyarrow read other values"
        chunks = list(iter_row_chunks(io.BytesIO(data), rng.randint(1, 40)))
        assert b"".join(chunks) == data
        parts = pa.concat_tables(parse_rows(iter(chunks), lambda c: read_rows(c, names, convert), "c"))
        assert parts.equals(whole), f"trial {trial}: a chunk ended inside a row"
    open_value = read_rows(b'x,y,"open\r\nvalue\n', names, convert)
    assert open_value.column("c").to_pylist() == ["open\r\nvalue\n"], "a value left open no longer keeps the end"
    with pytest.raises(pa.ArrowInvalid):
        read_rows(b'x,"open\n', names, convert)
    bom = b"\xef\xbb\xbf"
    raw = pacsv.read_csv(io.BytesIO(bom + b"x,y,z\n"), read_options=pacsv.ReadOptions(column_names=names),
                         parse_options=PARSE_OPTIONS, convert_options=convert)
    assert raw.column("a").to_pylist() == ["x"], "read_csv no longer drops a leading BOM: read_rows' guard is moot"
    assert read_rows(bom + b"x,y,z\n", names, convert).column("a").to_pylist() == ["\ufeffx"]


ODD_VALUES = {
    "nul": "a\x00b",
    "lone_cr": "line\rnext",
    "line_separators": "a\u2028b\u2029c",
    "bom_inside": "\ufeffstarts with a BOM",
    "crlf": "a\r\nb",
}


def test_odd_bytes_in_csv_values_are_kept_byte_for_byte() -> None:
    body = b"".join(b"%d,%s\n" % (i, quoted(v.encode())) for i, v in enumerate(ODD_VALUES.values()))
    unquoted_bom = b"99,\xef\xbb\xbfunquoted\n"
    table, failures = decode(b"\xef\xbb\xbfid,s\n" + body + unquoted_bom)
    assert failures == []
    assert table.column("s").to_pylist() == [*ODD_VALUES.values(), "\ufeffunquoted"]


def test_a_bom_at_the_start_of_a_chunk_stays_in_the_value() -> None:
    convert = pacsv.ConvertOptions(column_types={"id": pa.string(), "s": pa.string()})
    assert read_rows(b"\xef\xbb\xbf1,x\n", ["id", "s"], convert).to_pylist() == [{"id": "\ufeff1", "s": "x"}]


def test_invalid_utf8_in_csv_becomes_null_with_a_change_record() -> None:
    data = b'id,s\n1,"ok"\n2,"bad \xff\xfe byte"\n3,\xc3\n4,"caf\xc3\xa9"\n'
    table, failures = decode(data)
    assert table.column("s").to_pylist() == ["ok", None, None, "café"]
    assert [(f.row, f.field, f.change) for f in failures] == [(1, "s", "NULLED"), (2, "s", "NULLED")]


def test_invalid_utf8_in_a_parquet_string_column_becomes_null_with_a_change_record() -> None:
    sink = io.BytesIO()
    pq.write_table(_parquet_with_bad_utf8(), sink)
    fmt = FileFormat(False, "OFF", NULL_STRING, UNMODIFIED_STRING, "parquet")
    blocks = list(iter_batch_file("/in/memory.parquet", COLUMNS, fmt, None, ["id"], source=io.BytesIO(sink.getvalue())))
    assert blocks[0].table.column("s").to_pylist() == ["ok", None, "a\x00\u2028"]
    assert [(f.row, f.field, f.change) for f in blocks[0].failures] == [(1, "s", "NULLED")]


def _parquet_with_bad_utf8() -> pa.Table:
    """A Parquet string column holding bytes that are not UTF-8 (as a buggy writer could produce)."""
    values = pa.array([b"ok", b"\xff\xfe", "a\x00\u2028".encode()], pa.binary())
    text = pa.StringArray.from_buffers(len(values), values.buffers()[1], values.buffers()[2])
    return pa.table({"id": pa.array(["1", "2", "3"]), "s": text})


def test_odd_bytes_through_the_server_are_stored_as_the_table_says(stub, configuration, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Through gRPC and the store: odd bytes kept byte for byte; a value that is not UTF-8 stored as NULL with a
    NULLED change in _destination_meta and counted in the write's WARNING line (its bytes never logged)."""
    from destination.protocol import sdk
    from tests.rpc_helpers import rows_of, table
    from tests.test_write_path import SYS, create, params

    t = table("odd", [("id", "INT", True), ("s", "STRING"), *SYS])
    create(stub, configuration, "bytes", t)
    values = list(ODD_VALUES.values())
    rows = [b"%d,%s" % (i, quoted(v.encode())) for i, v in enumerate(values)] + [b'%d,"bad \xff\xfe"' % len(values)]
    plain = b"\xef\xbb\xbfid,s,_fivetran_synced,_fivetran_deleted\r\n" + b"".join(
        row + b",2024-01-01T00:00:00Z,false\r\n" for row in rows)
    path = tmp_path / "odd.csv.zstd.aes"
    path.write_bytes(seal(plain, KEY))
    answer = stub.WriteBatch(sdk.WriteBatchRequest(configuration=configuration, schema_name="bytes", table=t,
                                                   replace_files=[str(path)], keys={str(path): KEY},
                                                   file_params=params()))
    assert answer.WhichOneof("response") == "success"
    got = {r["id"]: r for r in rows_of(configuration, "bytes", "odd")}
    assert [got[i]["s"] for i in range(len(values))] == values
    assert all(json.loads(got[i]["_destination_meta"])["changes"] == [] for i in range(len(values)))
    bad = got[len(values)]
    assert bad["s"] is None
    assert json.loads(bad["_destination_meta"])["changes"] == [
        {"field": "s", "change": "NULLED", "reason": "DESTINATION_SERIALIZATION_ERROR"}]
    warnings = [line for line in capsys.readouterr().out.splitlines() if '"WARNING"' in line and "bytes.odd" in line]
    assert len(warnings) == 1 and "'s': 1" in warnings[0]
    assert not any(trace in warnings[0] for trace in ("\\ufffd", "\ufffd", "\\xff")), "the value was logged"
