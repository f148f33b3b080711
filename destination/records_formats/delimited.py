"""Delimited data files (records spec `delimited`), written and read exactly as the variant's hints say.

Text of each type (the hints' formats; `SS` carries six fraction digits, as records-mover writes it):
BOOLEAN `true`/`false`; integers in decimal; DECIMAL plain (never an exponent), all scale digits; FLOAT/DOUBLE
the shortest text that reads back to the same value, NaN and infinities as `NaN`, `Infinity`, `-Infinity`;
NAIVE_DATE `dateformat`; NAIVE_TIME `timeonlyformat`; NAIVE_DATETIME `datetimeformat`; UTC_DATETIME
`datetimeformattz` in UTC (its `OF` as `+0000`; without `OF` the text is UTC); BINARY standard base64 (RFC 4648,
padded); STRING/JSON/XML as is. NULL is the empty field (the records spec has no null hint; records-mover's
pandas reader and Redshift's EMPTYASNULL read it so).

Values the variant cannot hold are written as NULL and recorded in that row's `_destination_meta` (NULLED,
DESTINATION_SERIALIZATION_ERROR), never altered silently: an empty string or empty BINARY (it would read as
NULL), a NUL character, and, where the variant neither quotes nor escapes (vertica), the delimiter, the record
terminator, CR or LF.

Quoting and escaping: bluelabs escapes the escape character, the delimiter, CR, LF and the terminator with `\\`;
csv and bigquery quote (minimal) a value holding the delimiter, the quote, CR or LF, doubling its quotes; vertica
does neither. Writing: Arrow makes each type's text, polars quotes or escapes it and its CSV writer (quoting off)
joins the fields (1M rows of the benchmark's table in about 3.5 CPU seconds, gzip included; Arrow's join kernels
took about 5). Reading uses pyarrow's CSV parser with the same hints (vertica: its terminator read as LF).
"""
from __future__ import annotations

import bz2
import io
from codecs import BOM_UTF8
from decimal import Decimal
from typing import BinaryIO, cast

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from isal import igzip
from isal.igzip_lib import IsalError

from destination.model import row_meta
from destination.model.conversion import NULLED, SERIALIZATION_ERROR, Failure, b64decode_array
from destination.model.table_model import DESTINATION_META, TableDef
from destination.model.type_mapping import arrow_schema
from destination.records_formats.hints import PYTHON_ENCODING, SUFFIX, Hints
from destination.runtime.arrow_memory import arrow_owned
from destination.runtime.errors import BadRequest

FORMAT_FILE = "_format_delimited"
GZIP_LEVEL = 1  # ISA-L's (igzip, standard gzip): a fifth of zlib level 1's time for as many bytes; a GZIP hint allows any level
_STANDARD_TERMINATORS = ("\n", "\r\n", "\r")
_FLOAT_WORDS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def suffix(hints: Hints) -> str:
    return SUFFIX[hints["compression"]]  # type: ignore[index]


def arrow_format(hint: str) -> str:
    """A date/time hint as a strftime format (`SS` → `%S`, which Arrow writes with the microseconds)."""
    out = hint.replace("YYYY", "%Y").replace("MM", "%m").replace("DD", "%d").replace("HH24", "%H")
    return out.replace("HH", "%H").replace("MI", "%M").replace("SS", "%S").replace("OF", "%z")


def _unholdable(hints: Hints) -> list[str]:
    """Characters a string value may not contain in this variant (besides it being empty)."""
    chars = ["\x00"]
    if hints["quoting"] is None and hints["escape"] is None:
        chars += [str(hints["field-delimiter"]), str(hints["record-terminator"]), "\r", "\n"]
    return chars


def check(table_def: TableDef, hints: Hints) -> None:
    """Refuse (configuration time) a table whose header row this variant cannot write."""
    if not hints["header-row"]:
        return
    for name in [*table_def.column_names, DESTINATION_META]:
        bad = [c for c in _unholdable(hints) if c in name]
        if bad:
            raise BadRequest(f"table {table_def.name!r}, column {name!r}: the header row cannot hold {bad[0]!r} "
                             "in this variant; set header-row false")


def _polars(arr: pa.Array) -> pl.Series:
    series = pl.from_arrow(arr)
    assert isinstance(series, pl.Series)  # an Arrow array is always a Series
    return series


def _decimal_text(arr: pa.Array) -> pa.Array:
    """Plain decimal text with every scale digit. Arrow's cast writes a small value with an exponent (`1E-10`);
    polars never does, and is faster, but holds 128-bit decimals only."""
    if pa.types.is_decimal128(arr.type):
        return _polars(arr).cast(pl.String).to_arrow()
    text = arr.cast(pa.string())
    exp = pc.fill_null(pc.match_substring(text, "E"), False)
    if not pc.any(exp).as_py():
        return text
    values = text.to_pylist()
    for i in pc.indices_nonzero(exp).to_pylist():
        values[i] = format(Decimal(values[i]), "f")
    return pa.array(values, pa.string())


_ISO = {"YYYY-MM-DD", "YYYY-MM-DD HH24:MI:SS", "YYYY-MM-DD HH:MI:SS"}
_ISO_OF = {"YYYY-MM-DD HH:MI:SSOF", "YYYY-MM-DD HH24:MI:SSOF"}


def _dated(arr: pa.Array, hint: str) -> pa.Array:
    """A date or timestamp column's text: Arrow's own text where the hint is ISO order (far faster than strftime;
    timestamps in UTC with six fraction digits), strftime for the other orders."""
    naive = arr.cast(pa.timestamp("us")) if pa.types.is_timestamp(arr.type) else arr
    if hint in _ISO:
        return naive.cast(pa.string())
    if hint in _ISO_OF:
        return pc.binary_join_element_wise(naive.cast(pa.string()), "+0000", "")
    return pc.strftime(arr, arrow_format(hint))


def _text(arr: pa.Array, hints: Hints) -> pa.Array:
    """The column's text, NULL for NULL."""
    t = arr.type
    if pa.types.is_boolean(t):
        return pc.if_else(arr, "true", "false")
    if pa.types.is_integer(t):
        return arr.cast(pa.string())
    if pa.types.is_floating(t):
        text = arr.cast(pa.string())
        for word, spelled in _FLOAT_WORDS.items():
            text = pc.if_else(pc.equal(text, word), spelled, text)
        return text
    if pa.types.is_decimal(t):
        return _decimal_text(arr)
    if pa.types.is_date32(t):
        return _dated(arr, str(hints["dateformat"]))
    if pa.types.is_time64(t):
        return arr.cast(pa.string())  # HH:MM:SS.ffffff, the one lossless timeonlyformat's text
    if pa.types.is_timestamp(t):
        return _dated(arr, str(hints["datetimeformattz"] if t.tz else hints["datetimeformat"]))
    if pa.types.is_binary(t):
        return _polars(arr).bin.encode("base64").to_arrow()
    return arr


def _unheld(arr: pa.Array, hints: Hints, col_type: str) -> pa.Array | None:
    """A mask of the values the variant cannot hold (an empty field is NULL; a character it cannot write), or None
    for a type whose every value it holds."""
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return pc.equal(pc.binary_length(arr), 0)
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None
    bad = pc.equal(arr, "")
    if col_type != "META":
        for ch in _unholdable(hints):
            bad = pc.or_(bad, pc.match_substring(arr, ch))
    return bad


def unheld_values(table: pa.Table, table_def: TableDef, hints: Hints) -> dict[str, int]:
    """Column → how many of its values `write` would store as NULL (empty text or binary, a character the
    variant cannot write); columns losing none are left out."""
    lost: dict[str, int] = {}
    for col in table_def.columns:
        bad = _unheld(table.column(col.name).combine_chunks(), hints, col.type)
        count = int(pc.sum(pc.fill_null(bad, False)).as_py() or 0) if bad is not None else 0
        if count:
            lost[col.name] = count
    return lost


def _field_text(field: pl.Expr, hints: Hints) -> tuple[pl.Expr, pl.Expr]:
    """(whether a value needs quoting or escaping, the value quoted or escaped as the hints say). Written here
    rather than by a CSV writer's quoting: Python's csv module leaves a CR unescaped when the terminator is LF (its
    reader then splits the record there), and neither Arrow's nor polars' writer escapes with a character."""
    delimiter, terminator = str(hints["field-delimiter"]), str(hints["record-terminator"])
    specials = list(dict.fromkeys(delimiter + "\r\n" + terminator))
    if hints["quoting"] is None and hints["escape"] is not None:
        escape = str(hints["escape"])
        escaped = field
        for ch in [escape, *specials]:  # the escape character first, so the escapes added are not escaped again
            escaped = escaped.str.replace_all(ch, escape + ch, literal=True)
        return _holds_any(field, [escape, *specials]), escaped
    if hints["quoting"] == "minimal" and hints["doublequote"] and hints["escape"] is None:
        quote = str(hints["quotechar"])
        needs = _holds_any(field, [quote, *specials])
        quoted = pl.concat_str([pl.lit(quote), field.str.replace_all(quote, quote + quote, literal=True), pl.lit(quote)])
        return needs, pl.when(needs).then(quoted).otherwise(field)
    if hints["quoting"] is not None or hints["doublequote"]:
        raise BadRequest(f"quoting {hints['quoting']!r} with doublequote {hints['doublequote']!r} and escape "
                         f"{hints['escape']!r}: not a combination this writer knows")
    return pl.lit(False), field


def _holds_any(field: pl.Expr, chars: list[str]) -> pl.Expr:
    held = field.str.contains(chars[0], literal=True)
    for ch in chars[1:]:
        held = held | field.str.contains(ch, literal=True)
    return held


def _records_bytes(texts: list[pa.Array], free_text: list[bool], hints: Hints) -> bytes:
    """The file's text (UTF-8): fields joined by the delimiter, each record ended by the terminator, NULL as the
    empty field. Polars' CSV writer (Rust, in threads) joins the fields as they are (quoting off): in about 40 % of
    the CPU time of Arrow's join kernels, on the benchmark's table."""
    names = [f"f{i}" for i in range(len(texts))]
    frame = pl.from_arrow(pa.table(texts, names=names))
    assert isinstance(frame, pl.DataFrame)  # an Arrow table is always a DataFrame
    # only text values can hold a delimiter, quote or line break; numbers, dates and base64 never do
    free = [name for name, is_free in zip(names, free_text, strict=True) if is_free]
    rules = {name: _field_text(pl.col(name), hints) for name in free}
    needs = frame.select([needs_it.any().alias(name) for name, (needs_it, _) in rules.items()]) if free else None
    frame = frame.with_columns([rules[name][1].alias(name) for name in free if needs is not None and needs[name][0]])
    out = io.BytesIO()
    frame.write_csv(out, include_header=False, separator=str(hints["field-delimiter"]),
                    line_terminator=str(hints["record-terminator"]), quote_style="never", null_value="")
    return out.getvalue()


def _compress(data: bytes, hints: Hints) -> bytes:
    if hints["compression"] == "GZIP":
        return igzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if hints["compression"] == "BZIP":
        return bz2.compress(data)
    return data


def as_stored(table: pa.Table, table_def: TableDef, hints: Hints) -> pa.Table:
    """`table`'s rows as `write` stores them and a reader reads them back: the values the variant cannot hold NULL,
    each recorded in `_destination_meta`; a key's is refused (BadRequest). What a change file says of a row must be
    what the table holds. Only text and binary columns can hold such values: only they are looked at."""
    check(table_def, hints)
    schema = arrow_schema(list(table_def.columns))
    table = table.select(schema.names)
    changes: dict[int, list[Failure]] = {}
    keys = {c.name for c in table_def.entity_key}
    for name in schema.names:
        arr = table.column(name).combine_chunks()
        col = table_def.column(name)
        bad = _unheld(arr, hints, col.type if col else "META")
        if bad is None or not pc.any(pc.fill_null(bad, False)).as_py():
            continue
        bad = pc.fill_null(bad, False)
        if name in keys:  # a NULLed key would no longer match its row: refused, nothing written
            raise BadRequest(f"table {table_def.name!r}, key column {name!r}: {pc.sum(bad).as_py()} key value(s) "
                             "this delimited variant cannot store (empty text, or a character it cannot write); "
                             "a key is never NULLed: choose another records_variant or records_format")
        for row in pc.indices_nonzero(bad).to_pylist():
            changes.setdefault(row, []).append(Failure(row, name, NULLED, SERIALIZATION_ERROR))
        table = table.set_column(table.schema.get_field_index(name), name, pc.if_else(bad, pa.scalar(None, arr.type), arr))
    if changes:
        meta_at = table.schema.get_field_index(DESTINATION_META)
        meta = row_meta.add_changes(table.column(DESTINATION_META).combine_chunks(), changes, version=None)
        table = table.set_column(meta_at, DESTINATION_META, meta)
    return table


def write(table: pa.Table, table_def: TableDef, out: BinaryIO, hints: Hints) -> pa.Table:
    """Write `table` (columns, then `_destination_meta`) as one delimited file; returns the rows as stored
    (`as_stored`)."""
    table = as_stored(table, table_def, hints)
    schema = arrow_schema(list(table_def.columns))
    texts = [_text(table.column(i).combine_chunks(), hints) for i in range(table.num_columns)]
    free_text = [pa.types.is_string(f.type) for f in schema]
    body = _records_bytes(texts, free_text, hints)
    if hints["header-row"]:
        body = _records_bytes([pa.array([n], pa.string()) for n in schema.names], [True] * len(schema), hints) + body
    encoding = PYTHON_ENCODING[str(hints["encoding"])]
    out.write(_compress(body if encoding == "utf-8" else body.decode("utf-8").encode(encoding), hints))
    return table


def _parser_input(data: bytes, hints: Hints) -> pa.Buffer | None:
    """The file's UTF-8 text as Arrow's CSV parser is to read it, in Arrow's memory (`arrow_owned`); None for a
    table's zero-row file without a header row (the parser refuses an empty input). The caller's bytes can go as soon
    as this returns: the parse then holds one copy of the text, not two."""
    terminator = str(hints["record-terminator"])
    if terminator not in _STANDARD_TERMINATORS:
        if hints["quoting"] is not None or hints["escape"] is not None:
            raise BadRequest(f"record-terminator {terminator!r} with quoting or escape: not a variant this reads")
        # neither quoted nor escaped: no value holds the terminator, CR or LF (write NULLs them), so LF can stand in
        data = data.replace(terminator.encode("utf-8"), b"\n")
    if not data and not hints["header-row"]:
        return None
    if data.startswith(BOM_UTF8):  # Arrow's parser drops a BOM that starts its input; here it is the first value's
        data = BOM_UTF8 + data
    return arrow_owned(data)


def _columns(text: pa.Buffer | None, names: list[str], hints: Hints, table: str) -> list[pa.Array]:
    """Each field's text (NULL for an empty field), parsed from `_parser_input`'s text as the hints say."""
    if text is None:
        return [pa.array([], pa.string()) for _ in names]
    delimiter, header = str(hints["field-delimiter"]), bool(hints["header-row"])
    quoted = hints["quoting"] is not None
    parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=str(hints["quotechar"]) if quoted else False,
                               double_quote=bool(hints["doublequote"]), escape_char=hints["escape"] or False,
                               newlines_in_values=True, ignore_empty_lines=False)
    read_options = pacsv.ReadOptions(column_names=None if header else names, block_size=1 << 26)
    convert = pacsv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=True,
                                   null_values=[""], quoted_strings_can_be_null=True)
    try:
        parsed = pacsv.read_csv(pa.BufferReader(text), read_options, parse, convert)
    except pa.ArrowInvalid as e:  # Arrow's message ends with the record's text: row data, left out
        reason = ": ".join(str(e).split(": ")[:2])
        raise BadRequest(f"table {table!r}: a delimited data file does not parse: {reason}") from None
    found = parsed.column_names
    columns = [parsed.column(i).combine_chunks() for i in range(parsed.num_columns)]
    if found != names or len(columns) != len(names):  # not the found names: a first row read as a header is a row
        place = next((i for i, (a, b) in enumerate(zip(found, names, strict=False)) if a != b), None)
        where = f"its header's column {place + 1} is not {names[place]!r}" if place is not None else \
            f"{len(found)} columns, not the table's {len(names)}"
        raise BadRequest(f"table {table!r}: a delimited data file's columns are not the table's {names!r} ({where})")
    return columns


_ISAL_ERROR = cast(type[Exception], IsalError)  # an exception class; isal 1.9's stub calls it an instance

_TIME_TEXT = r"^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}$"  # as `_text` writes a time of day


def _refuse_unless(text: pa.Array, fits: pa.Array, what: str) -> None:
    """ValueError when a value does not fit `what` (NULLs fit); how many, not which: values are row data."""
    misfits = int(pc.sum(pc.and_(pc.is_valid(text), pc.invert(pc.fill_null(fits, True)))).as_py() or 0)
    if misfits:
        raise ValueError(f"{misfits} value(s) not {what}")


def _from_text(text: pa.Array, dtype: pa.DataType, hints: Hints) -> pa.Array:
    if pa.types.is_boolean(dtype):
        _refuse_unless(text, pc.is_in(text, value_set=pa.array(["true", "false"])), "true or false")
        return pc.equal(text, "true")
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype):
        return text.cast(dtype)
    if pa.types.is_date32(dtype):
        return pc.strptime(text, arrow_format(str(hints["dateformat"])), "s").cast(dtype)
    if pa.types.is_time64(dtype):
        _refuse_unless(text, pc.match_substring_regex(text, _TIME_TEXT), "a time of day as HH24:MI:SS.ffffff")

        def part(a: int, b: int) -> pa.Array:
            return pc.utf8_slice_codeunits(text, a, b).cast(pa.int64())
        micros = pc.add(pc.multiply(pc.add(pc.multiply(pc.add(pc.multiply(part(0, 2), 60), part(3, 5)), 60),
                                           part(6, 8)), 1_000_000), part(9, 15))
        return micros.cast(dtype)
    if pa.types.is_timestamp(dtype):
        return text.cast(pa.timestamp("us", "UTC") if dtype.tz and hints["datetimeformattz"].endswith("OF")  # type: ignore[union-attr]
                         else pa.timestamp("us")).cast(dtype)
    if pa.types.is_binary(dtype):
        return pc.if_else(pc.is_null(text), pa.scalar(None, dtype), b64decode_array(pc.fill_null(text, "")))
    return text


def read(src: BinaryIO, table_def: TableDef, hints: Hints) -> pa.Table:
    """Read a delimited file written by `write` back into the data-file Arrow table, value for value."""
    schema = arrow_schema(list(table_def.columns))
    # the text's bytes live only until it is in Arrow's memory (reading a 287 MB bluelabs file peaked 1.18 GB above
    # the process's start with both held through the parse, 1.0 GB now: measured)
    columns = _columns(_parser_input(_utf8(src.read(), table_def, hints), hints), schema.names, hints, table_def.name)
    arrays = []
    for col, f in zip(columns, schema, strict=True):
        try:
            arrays.append(_from_text(col, f.type, hints))
        except (pa.ArrowInvalid, ValueError) as e:  # a damaged file, or one this codec did not write
            why = "a value that does not parse" if isinstance(e, pa.ArrowInvalid) else str(e)  # Arrow's names it
            raise BadRequest(f"table {table_def.name!r}, column {f.name!r}: a delimited data file does not read as "
                             f"{f.type}: {why}") from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _utf8(data: bytes, table_def: TableDef, hints: Hints) -> bytes:
    """A file's bytes decompressed and in UTF-8, as its hints say."""
    encoding = PYTHON_ENCODING[str(hints["encoding"])]
    try:  # the bytes are read: an OSError here is the decompressor's (not a gzip or bz2 stream), not the storage's
        if hints["compression"] == "GZIP":
            data = igzip.decompress(data)  # type: ignore[no-untyped-call]  # isal 1.9 leaves it unannotated
        elif hints["compression"] == "BZIP":
            data = bz2.decompress(data)
        if encoding != "utf-8":
            data = data.decode(encoding).encode("utf-8")
    except (OSError, EOFError, ValueError, _ISAL_ERROR) as e:  # truncated, damaged, or not in the hints' encoding
        raise BadRequest(f"table {table_def.name!r}: a delimited data file does not decompress or decode as its "
                         f"hints say ({hints['compression'] or 'uncompressed'}, {hints['encoding']}): "
                         f"{type(e).__name__}") from None
    return data
