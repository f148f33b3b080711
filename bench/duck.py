"""The DuckDB baseline: the same change applied by DuckDB to the same Parquet table, the tool a data engineer would
pick instead of the server.

DuckDB reads the data files of the server's current version (the version the server's own request then changes),
reads the batch files as CSV (decrypted and decompressed to local plaintext first: DuckDB reads neither AES nor the
tester's framing; that step is timed too), applies the change in one SQL statement and writes the whole table back
as Parquet (snappy, as the server's files) to the backend's storage — S3 through DuckDB's httpfs extension against
the same S3 server. Semantics, as close as SQL allows:
- upsert: the batch row replaces the stored row of its key; update: only stored keys change; delete: the key's row
  goes. A column holding the unmodified marker, or missing from the file, keeps the stored value (NULL for a new
  key), as in the server; the null marker is NULL.
- differences: one row per key per batch is assumed (true of every generated change; the server applies repeated
  keys in order); `_destination_meta` is NULL on the rows the change writes (the server writes the row's version
  there); text values are not normalised (the server normalises JSON) and nothing checks a conversion: a value
  DuckDB cannot cast fails the statement.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import duckdb

from bench.baselines import Place, plaintext
from bench.batches import BatchFile
from bench.data import KEY
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING

DESTINATION_META = "_destination_meta"
Connection = duckdb.DuckDBPyConnection


@dataclass(frozen=True)
class S3Access:
    endpoint: str  # http://host:port
    access_key_id: str
    secret_access_key: str
    region: str = "us-east-1"


def _httpfs_extension() -> str:
    """The httpfs extension binary of PyPI's duckdb-extension-httpfs (DuckDB may not download it at run time)."""
    import duckdb_extension_httpfs

    found = sorted(Path(duckdb_extension_httpfs.__file__).parent.glob("extensions/*/httpfs.duckdb_extension"))
    if not found:
        raise RuntimeError("duckdb-extension-httpfs holds no httpfs.duckdb_extension: pip install -e '.[bench]'")
    return str(found[-1])


def connect(s3: S3Access | None, scratch: Path, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection on all cores, spilling to `scratch`; with `s3`, httpfs and a secret for the endpoint."""
    scratch.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "memory_limit": memory_limit, "temp_directory": str(scratch / "spill")})
    con.execute("SET TimeZone = 'UTC'")
    if s3 is not None:
        con.execute(f"LOAD '{_httpfs_extension()}'")
        parsed = urlparse(s3.endpoint)
        con.execute("CREATE SECRET bench_s3 (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL ?, "
                    "REGION ?)", [s3.access_key_id, s3.secret_access_key, parsed.netloc, parsed.scheme == "https",
                                  s3.region])
    return con


def readable(url: str) -> str:
    """A manifest URL as DuckDB reads it: file:///… as a path, s3://… as it is."""
    return unquote(urlparse(url).path) if url.startswith("file:") else url


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _value(column: str, duck_type: str) -> str:
    """The batch's text of `column` as the stored type; the unmodified marker keeps the stored value."""
    b, s = f"b.{_quoted(column)}", f"s.{_quoted(column)}"
    cast = f"from_base64({b})" if duck_type == "BLOB" else f"CAST({b} AS {duck_type})"
    return f"CASE WHEN {b} = {_literal(UNMODIFIED_STRING)} THEN {s} ELSE {cast} END"


def merge_rows(source: str, batch_csv: list[str], batch_columns: list[str], schema: list[tuple[str, str]],
               kind: str) -> str:
    """The SELECT of the table's rows after a `kind` (replace | update | delete) batch is applied to the rows of
    `source` (a relation: `read_parquet([...])`, or a parenthesised query, so changes chain)."""
    csv = ("read_csv([" + ", ".join(_literal(f) for f in batch_csv) + "], header = true, all_varchar = true, "
           f"delim = ',', quote = '\"', escape = '\"', nullstr = {_literal(NULL_STRING)})")
    key_type = dict(schema)[KEY]
    batch = f"(SELECT *, CAST({_quoted(KEY)} AS {key_type}) AS __key FROM {csv})"
    if kind == "delete":
        return f"SELECT s.* FROM {source} s ANTI JOIN {batch} b ON s.{_quoted(KEY)} = b.__key"
    columns = []
    for name, duck_type in schema:
        if name in batch_columns and name != DESTINATION_META:
            written = _value(name, duck_type)
        elif name == DESTINATION_META:
            written = f"CAST(NULL AS {duck_type})"
        else:
            written = f"s.{_quoted(name)}"
        columns.append(f"CASE WHEN b.__key IS NULL THEN s.{_quoted(name)} ELSE {written} END AS {_quoted(name)}")
    join = "FULL OUTER JOIN" if kind == "replace" else "LEFT JOIN"
    return f"SELECT {', '.join(columns)} FROM {source} s {join} {batch} b ON s.{_quoted(KEY)} = b.__key"


def merge_sql(stored: list[str], batch_csv: list[str], batch_columns: list[str], schema: list[tuple[str, str]],
              kind: str, out: str) -> str:
    """The COPY statement applying a `kind` (replace | update | delete) batch to the stored files."""
    files = "[" + ", ".join(_literal(f) for f in stored) + "]"
    rows = merge_rows(f"read_parquet({files})", batch_csv, batch_columns, schema, kind)
    return (f"COPY ({rows}) TO {_literal(out)} (FORMAT parquet, COMPRESSION snappy, PER_THREAD_OUTPUT true, "
            "OVERWRITE_OR_IGNORE true)")


def merge(con: duckdb.DuckDBPyConnection, stored: list[str], files: list[BatchFile], kind: str, out: Place,
          scratch: Path) -> float:
    """Seconds for DuckDB to apply the batch `files` of `kind` to the table in `stored` (URLs) and write the whole
    table to `out`; clearing `out` beforehand is not timed."""
    out.reset()
    work = scratch / "batch"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    csvs = []
    for i, f in enumerate(x for x in files if x.kind == kind):
        path = work / f"{i:04d}.csv"
        path.write_bytes(plaintext(f))
        csvs.append(str(path))
    schema = [(str(name), str(duck_type)) for name, duck_type, *_ in
              con.execute("DESCRIBE SELECT * FROM read_parquet(?)", [stored]).fetchall()]
    header = Path(csvs[0]).open("rb").readline().decode().rstrip("\n").split(",")
    con.execute(merge_sql(stored, csvs, header, schema, kind, out.url))
    seconds = time.perf_counter() - started
    shutil.rmtree(work, ignore_errors=True)
    return seconds


def read_rows(con: duckdb.DuckDBPyConnection, stored: list[str]) -> int:
    """Rows of the table in `stored`; every column is read (a full scan, not Parquet's row counts)."""
    return int(con.execute("SELECT count(*) FROM read_parquet(?) WHERE hash(COLUMNS(*)) IS NOT NULL",
                           [stored]).fetchone()[0])  # type: ignore[index]  # count(*) always returns one row
