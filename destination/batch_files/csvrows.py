"""CSV plaintext cut into chunks that end between rows, each parsed by pyarrow as one single block.

pyarrow's own block splitting alters or refuses data: its streaming reader drops the LF of a quoted CRLF whose CR
ends one block and whose LF starts the next (apache/arrow#51368, unreleased fix in #51394), and refuses a row that
spans more than two blocks ("straddling object straddles two block boundaries"). Here pyarrow never splits: chunks
end only at a row boundary (a line end outside quotes), are about `target` bytes, grow to hold a row that needs
more, and each is given to `read_csv` with a block size larger than the chunk. Memory stays a few chunks for files
of ordinary rows.

Finding a row end costs little: the cut is first guessed at the last line end with an even number of quotes before
it (right for RFC 4180 text, where every quote opens or closes a whole field or is doubled), and the guess is then
checked by pyarrow's own parse of the chunk. Had pyarrow ended the chunk inside a quoted value, its last value would
end with the chunk's final CR or LF (or the row would lack columns, an error). Only then, or where a value really
ends so, is the chunk scanned quote by quote with pyarrow's rules (a `"` opens a quoted value only at the start of
a field; inside one, a `"` closes it unless another `"` follows; LF, CR and CRLF end a line), and cut again.
tests/test_csv_bytes.py guards each pyarrow behaviour this relies on.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import wait
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from destination.runtime.pools import shared_pool

Chunk = bytes | bytearray  # a chunk of CSV bytes: its own buffer (bytearray) or a slice of one

READ_SIZE = 1 << 20
READ_AHEAD_THREADS = 8  # files read ahead at once in a process (more wait for a thread)
BOM = b"\xef\xbb\xbf"
MAX_BLOCK = (1 << 31) - 1  # read_csv's block size is an int32
QUOTE, COMMA, LF, CR = ord('"'), ord(","), ord("\n"), ord("\r")
PARSE_OPTIONS = pacsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                                   newlines_in_values=True)


class RowTooLarge(ValueError):
    """A row longer than read_csv can take in one block."""


def read_ahead(chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """The same chunks, the next one read (decrypted, decompressed, cut) in a pool thread while the caller parses.
    A read still running when the caller stops is waited for: the caller may close the stream next."""
    pool = shared_pool("csv-read-ahead", READ_AHEAD_THREADS)
    pending = pool.submit(next, chunks, None)
    try:
        while (chunk := pending.result()) is not None:
            pending = pool.submit(next, chunks, None)
            yield chunk
    finally:
        wait([pending])


def iter_row_chunks(stream: BinaryIO, target: int) -> Iterator[bytearray]:
    """The stream's bytes in order, in chunks of about `target` bytes, each cut where quote parity says a row ends
    (a guess that parse_rows checks); the last chunk ends with the data. A chunk grows to hold a longer row.
    The stream decompresses straight into each chunk's own buffer (no copies of whole chunks)."""
    carry: Chunk = b""  # the bytes after the last cut
    want = target
    while True:
        chunk = _fill(stream, carry, want)
        if len(chunk) < want:  # the end of the data
            if chunk:
                yield chunk
            return
        cut = row_end_by_parity(chunk)
        if not cut:  # no line end outside quotes yet: read on (doubling keeps the rescans linear)
            carry, want = chunk, 2 * len(chunk)
            continue
        carry = bytes(chunk[cut:])
        del chunk[cut:]
        want = max(target, len(carry) + READ_SIZE)
        yield chunk


def _fill(stream: BinaryIO, start: bytes | bytearray, size: int) -> bytearray:
    """A new buffer holding `start`, then up to `size` bytes in all from the stream (fewer only at its end)."""
    buffer = bytearray(size)
    buffer[:len(start)] = start
    held = len(start)
    with memoryview(buffer) as view:
        while held < size:
            got = stream.readinto(view[held:])  # type: ignore[attr-defined]
            if not got:
                break
            held += got
    del buffer[held:]
    return buffer


def row_end_by_parity(buf: Chunk) -> int:
    """Length of the prefix of `buf` up to its last line end that has an even number of quotes before it (0: none).
    The last byte is never taken: what follows it (an LF after a CR) is not known yet."""
    data = np.frombuffer(buf, dtype=np.uint8)
    odd = int(np.count_nonzero(data == QUOTE)) % 2  # quote parity before `end`, updated as `end` moves back
    end = len(buf) - 1
    odd ^= buf[end] == QUOTE
    while end > 0:
        line_end = buf.rfind(b"\n", 0, end)
        line_end = max(line_end, buf.rfind(b"\r", line_end + 1, end))  # a CR after it (files without CR: no scan)
        if line_end < 0:
            return 0
        odd ^= buf.count(b'"', line_end, end) % 2
        if not odd:
            return after_line_end(buf, line_end)
        opening = buf.rfind(b'"', 0, line_end)  # inside a quoted value: look before the quote that opened it
        odd ^= buf.count(b'"', opening, line_end) % 2
        end = opening
    return 0


def after_line_end(buf: Chunk, at: int) -> int:
    return at + 2 if buf[at] == CR and at + 1 < len(buf) and buf[at + 1] == LF else at + 1


def row_end_exact(buf: Chunk) -> int:
    """Length of the longest prefix of `buf` (read from a row start) made of whole rows by pyarrow's quoting rules,
    quote by quote (0: none). The last byte is never taken, as in row_end_by_parity."""
    data = np.frombuffer(buf, dtype=np.uint8)
    outside_from = 0  # start of the current stretch outside quotes
    stretches: list[tuple[int, int]] = []  # [start, end) stretches outside quotes
    inside, skip_next = False, False
    for q in np.flatnonzero(data == QUOTE).tolist():
        if skip_next:
            skip_next = False
        elif inside:
            if q + 1 >= len(buf):
                break  # a closing or doubled quote: not known yet
            if data[q + 1] == QUOTE:
                skip_next = True
            else:
                inside, outside_from = False, q + 1
        elif q == 0 or data[q - 1] in (COMMA, LF, CR):
            inside = True
            stretches.append((outside_from, q))
    if not inside:
        stretches.append((outside_from, len(buf)))
    for start, end in reversed(stretches):
        end = min(end, len(buf) - 1)
        line_end = max(buf.rfind(b"\n", start, end), buf.rfind(b"\r", start, end))
        if line_end >= 0:
            return after_line_end(buf, line_end)
    return 0


def first_row_end(chunk: Chunk) -> int:
    """Length of the first row of a chunk, its line end included (the whole chunk if it has one row)."""
    pos, inside = 0, False
    while True:
        quote = chunk.find(b'"', pos)
        if inside:
            if quote < 0:
                return len(chunk)
            doubled = chunk[quote + 1:quote + 2] == b'"'
            inside, pos = doubled, quote + (2 if doubled else 1)
            continue
        line_end = min((at for at in (chunk.find(b"\n", pos), chunk.find(b"\r", pos)) if at >= 0), default=-1)
        if line_end >= 0 and (quote < 0 or line_end < quote):
            return after_line_end(chunk, line_end)
        if quote < 0:
            return len(chunk)
        inside, pos = quote == 0 or chunk[quote - 1] in (COMMA, LF, CR), quote + 1


def read_rows(chunk: Chunk, column_names: list[str], convert: pacsv.ConvertOptions) -> pa.Table:
    """A chunk of whole rows as a table of `column_names`, parsed by pyarrow as one block."""
    if chunk.startswith(BOM):  # read_csv drops a BOM that starts its input; here it is the first value's text
        chunk = b"\n" + chunk  # (an empty line, which the parser skips)
    if len(chunk) >= MAX_BLOCK:
        raise RowTooLarge(f"a row of {len(chunk)} bytes is larger than the CSV reader's 2 GiB limit")
    return pacsv.read_csv(pa.BufferReader(chunk), read_options=pacsv.ReadOptions(
        column_names=column_names, block_size=len(chunk) + 1, use_threads=False),
        parse_options=PARSE_OPTIONS, convert_options=convert)


def ends_between_rows(rows: pa.Table, last_column: str) -> bool:
    """Whether pyarrow's parse of a chunk that ends with a line end closed its last row there: a quoted value left
    open would have taken that line end as its last character (a legitimate value ending with CR or LF answers
    False too; the caller then rescans exactly)."""
    if not rows.num_rows:
        return True
    value = rows.column(last_column)[rows.num_rows - 1].as_py()
    if value is None:
        return True
    return not (value.endswith(("\r", "\n")) if isinstance(value, str) else value.endswith((b"\r", b"\n")))


class MalformedRows(ValueError):
    """pyarrow refused the rows of a chunk; the message names where they start in the plaintext."""


def parse_rows(chunks: Iterator[Chunk], parse: Callable[[Chunk], pa.Table], last_column: str,
               start: int = 0) -> Iterator[pa.Table]:
    """Parse chunks of whole rows (the first starting at a row start, `start` bytes into the data) with `parse`,
    whose tables must hold `last_column` (the rows' last column). A chunk whose end pyarrow did not take as a row
    end is cut again exactly, its tail going before the next chunk. Raises MalformedRows."""
    chunks = (chunk for chunk in chunks if chunk)
    carry: Chunk = b""
    offset = start
    pending = next(chunks, None)
    while pending is not None:
        following = next(chunks, None)
        data = carry + pending if carry else pending
        if following is None:  # the end of the data: whatever pyarrow makes of it is the whole file's parse
            yield _parse_at(parse, data, offset)
            return
        try:
            rows: pa.Table | None = parse(data)
        except pa.ArrowInvalid:  # a guessed cut can leave a row without its columns: cut exactly, parse again
            rows = None
        if rows is not None and ends_between_rows(rows, last_column):
            carry, offset = b"", offset + len(data)
            yield rows
        else:
            cut = row_end_exact(data)
            if cut:
                yield _parse_at(parse, data[:cut], offset)
            carry, offset = data[cut:], offset + cut
        pending = following


def _parse_at(parse: Callable[[Chunk], pa.Table], data: Chunk, offset: int) -> pa.Table:
    try:
        return parse(data)
    except pa.ArrowInvalid as exc:
        raise MalformedRows(f"in the rows from byte {offset} of the plaintext: {exc}") from None
