"""CSV plaintext cut into chunks that end between rows, each parsed by pyarrow as one single block.

pyarrow's own block splitting alters or refuses data: its streaming reader drops the LF of a quoted CRLF whose CR
ends one block and whose LF starts the next (apache/arrow#51368, unreleased fix in #51394), and refuses a row that
spans more than two blocks ("straddling object straddles two block boundaries"). Here pyarrow never splits: chunks
end only at a row boundary (a line end outside quotes), are about `target` bytes, grow to hold a row that needs
more, and each is given to `read_csv` with a block size larger than the chunk. Memory stays a few chunks for files
of ordinary rows.

Where a row ends is found with pyarrow's quoting rules (comma, `"` quote, doubled quotes, no escape character,
newlines in values; LF, CR and CRLF end a line): a `"` opens a quoted value only at the start of a field, and inside
one a `"` closes it unless another `"` follows. For RFC 4180 text (every quote opens or closes a whole field, or is
doubled) that is the parity of the quotes seen, which bytes.count gives fast; a chunk whose quotes are not of that
form (a quote inside an unquoted value, text after a closing quote) is scanned quote by quote instead.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

READ_SIZE = 1 << 20
BOM = b"\xef\xbb\xbf"
MAX_BLOCK = (1 << 31) - 1  # read_csv's block size is an int32
QUOTE, COMMA, LF, CR = ord('"'), ord(","), ord("\n"), ord("\r")
PARSE_OPTIONS = pacsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True, escape_char=False,
                                   newlines_in_values=True)


class RowTooLarge(ValueError):
    """A row longer than read_csv can take in one block."""


def read_ahead(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The same chunks, the next one read (decrypted, decompressed, cut) in a thread while the caller parses."""
    with ThreadPoolExecutor(1, thread_name_prefix="csv-read-ahead") as pool:
        pending = pool.submit(next, chunks, None)
        while (chunk := pending.result()) is not None:
            pending = pool.submit(next, chunks, None)
            yield chunk


def iter_row_chunks(stream: BinaryIO, target: int) -> Iterator[bytes]:
    """The stream's bytes in order, in chunks of about `target` bytes that each end at a row boundary (the last
    one at the end of the data). A row longer than `target` makes its chunk as long as the row."""
    pending = bytearray()
    want = target
    while True:
        while len(pending) < want:
            piece = stream.read(max(READ_SIZE, want - len(pending)))
            if not piece:
                if pending:
                    yield bytes(pending)
                return
            pending += piece
        cut = row_end(pending)
        if not cut:  # the buffer holds no complete row: read on until one ends (doubling keeps rescans linear)
            want = 2 * len(pending)
            continue
        yield bytes(pending[:cut])
        del pending[:cut]
        want = target


def row_end(buf: bytes | bytearray) -> int:
    """Length of the longest prefix of `buf` made of whole rows (0: none). The last byte is never taken as a row
    end: what follows it (an LF after a CR, a second quote) is not known yet."""
    data = np.frombuffer(buf, dtype=np.uint8)
    quotes = np.flatnonzero(data == QUOTE)
    cut = _row_end_by_parity(buf, quotes)
    if not _rfc_quotes(data, quotes[quotes < (cut or len(buf) - 1)]):
        cut = _row_end_exact(buf, quotes)
    return cut


def _row_end_by_parity(buf: bytes | bytearray, quotes: np.ndarray) -> int:
    end = len(buf) - 1
    while end > 0:
        line_end = max(buf.rfind(b"\n", 0, end), buf.rfind(b"\r", 0, end))
        if line_end < 0:
            return 0
        before = int(np.searchsorted(quotes, line_end))  # quotes before the line end
        if before % 2 == 0:
            return _after_line_end(buf, line_end)
        end = int(quotes[before - 1])  # inside a quoted value: look before the quote that opened it
    return 0


def _after_line_end(buf: bytes | bytearray, at: int) -> int:
    return at + 2 if buf[at] == CR and at + 1 < len(buf) and buf[at + 1] == LF else at + 1


def _rfc_quotes(data: np.ndarray, quotes: np.ndarray) -> bool:
    """Whether every quote (positions in data, read from a row start) opens a field, closes one or is doubled:
    then quote parity is pyarrow's quote state. Even-numbered quotes must follow a field or line start (or be
    the second of a doubled pair), odd-numbered ones must precede a field or line end (or a second quote)."""
    if not quotes.size:
        return True
    opening, closing = quotes[0::2], quotes[1::2]
    if opening[0] == 0:  # the chunk starts with a quote: a field start
        opening = opening[1:]
    if closing.size and closing[-1] + 1 >= data.size:  # the last byte: what follows is not known yet
        closing = closing[:-1]
    return bool(_EDGE[data[opening - 1]].all() and _EDGE[data[closing + 1]].all())


_EDGE = np.zeros(256, dtype=bool)  # bytes that may sit next to a quote that opens or closes a field
_EDGE[[COMMA, LF, CR, QUOTE]] = True


def _row_end_exact(buf: bytes | bytearray, quotes: np.ndarray) -> int:
    """pyarrow's quote state, quote by quote (only for chunks whose quotes are not all RFC 4180 ones)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    outside_from = 0  # start of the current stretch outside quotes
    stretches: list[tuple[int, int]] = []  # [start, end) stretches outside quotes
    inside, skip_next = False, False
    for q in quotes.tolist():
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
            return _after_line_end(buf, line_end)
    return 0


def first_row_end(chunk: bytes) -> int:
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
            return _after_line_end(chunk, line_end)
        if quote < 0:
            return len(chunk)
        inside, pos = quote == 0 or chunk[quote - 1] in (COMMA, LF, CR), quote + 1


def read_rows(chunk: bytes, column_names: list[str], convert: pacsv.ConvertOptions) -> pa.Table:
    """A chunk of whole rows as a table of `column_names`, parsed by pyarrow as one block."""
    if chunk.startswith(BOM):  # read_csv drops a BOM that starts its input; here it is the first value's text
        chunk = b"\n" + chunk  # (an empty line, which the parser skips)
    if len(chunk) >= MAX_BLOCK:
        raise RowTooLarge(f"a row of {len(chunk)} bytes is larger than the CSV reader's 2 GiB limit")
    return pacsv.read_csv(pa.BufferReader(chunk), read_options=pacsv.ReadOptions(
        column_names=column_names, block_size=len(chunk) + 1, use_threads=False),
        parse_options=PARSE_OPTIONS, convert_options=convert)
