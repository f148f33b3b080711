"""Placement: a table's data files are non-overlapping key ranges in key order (destination.model.key_order), each about
the target size. This module cuts a write into units of work over those ranges, from the table's file statistics
and a sample of the request's keys; it reads no data.

A unit is a key range [lo, hi) with the stored files that overlap it. The units tile the whole key space:
- every file (or group of small neighbouring files being compacted) starts a unit at its first key, so a request
  key is routed to the one file that can hold it, and files no key is routed to are not read at all;
- a gap between files that receives more than a unit's worth of new keys (an append of new, growing keys; the
  first load into an empty table) is cut into units of about the target's rows, at sampled keys;
- a file receiving more than a unit's worth of keys inside its range is cut too: each of its units reads the file
  and keeps its own part (such units always rewrite their part of the file).
Files are compacted in size tiers: a file's level is how many times TIER_FAN_IN divides its size below the target
(level 0: from a quarter of the target up; level 1: a sixteenth to a quarter; ...; at most MAX_LEVEL). When
TIER_FAN_IN or more neighbouring small files (level 1 or more, fitting one target file together) reach together a
lower level than each of them has (TIER_FAN_IN files of one level always do), one unit rewrites them together,
whether or not the request touches them, into a file of that lower level. So the many small
files of small syncs are merged geometrically: a row is rewritten by compaction at most MAX_LEVEL times in its life
(each rewrite lowers its file's level by one at least), never once per sync, and a small sync rewrites only the
small files that hold its keys; a single append still rewrites no file.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.model.key_order import KeyJson, count_bounds_below, keys_from_json, keys_to_json, sort_keys
from destination.model.table_model import TableDef
from destination.on_disk.datafiles import DataFile

TARGET_FILE_BYTES = 64 << 20  # the default target data-file size (configuration field target_file_size)
TIER_FAN_IN = 4  # this many neighbouring files of one level, fitting one target file, are compacted together
MAX_LEVEL = 8  # the smallest files' level: under target / 4**8 (1 KiB of a 64 MiB target) all are one level
ROWS_PER_BYTE_UNKNOWN = 1 / 100  # a table without stored rows: rows per target byte guessed at 100 bytes a row


@dataclass(frozen=True, kw_only=True)
class KeySample:
    """Keys of the request (entity-key columns, any order) and how many request rows each stands for."""

    keys: pa.Table
    weights: np.ndarray

    @staticmethod
    def exact(keys: pa.Table) -> KeySample:
        return KeySample(keys=keys, weights=np.ones(keys.num_rows, dtype=np.int64))


@dataclass(frozen=True, kw_only=True)
class PlannedUnit:
    lo: KeyJson | None  # inclusive; None: unbounded
    hi: KeyJson | None  # exclusive; None: unbounded
    files: tuple[DataFile, ...] = ()  # stored files overlapping [lo, hi)
    compact: bool = False  # rewrite `files` whether or not the request touches them (compaction, split files)


@dataclass
class Plan:
    """The units in key order and their boundaries (the lo of every unit but the first) as a table of keys."""

    units: list[PlannedUnit]
    bounds: pa.Table

    def unit_of(self, keys: pa.Table) -> np.ndarray:
        """The unit each key (entity-key columns) falls in."""
        return count_bounds_below(keys, self.bounds)


def in_key_order(files: Sequence[DataFile], table_def: TableDef) -> list[DataFile]:
    """The files with rows, sorted by first key (their ranges do not overlap)."""
    stored = [f for f in files if f.rows and f.first_key is not None]
    if len(stored) <= 1:
        return stored
    firsts = keys_from_json([f.first_key for f in stored if f.first_key is not None], table_def)
    order = pc.sort_indices(firsts, sort_keys=sort_keys(table_def, with_start=False))
    return [stored[i] for i in order.to_pylist()]


def _key(key: KeyJson | None) -> KeyJson:
    assert key is not None, "a file placed in key ranges has its first and last key"
    return key


def target_rows(files: Sequence[DataFile], target_bytes: int, bytes_per_row: float | None = None) -> int:
    """Rows in a target-size file, from the table's own bytes per row (else `bytes_per_row`, else a guess)."""
    rows, size = sum(f.rows for f in files), sum(f.bytes for f in files)
    if rows and size:
        per_byte = rows / size
    else:
        per_byte = 1 / bytes_per_row if bytes_per_row else ROWS_PER_BYTE_UNKNOWN
    return max(1, int(target_bytes * per_byte))


def level(size: int, target_bytes: int) -> int:
    """A file's size tier: 0 from target / TIER_FAN_IN up, k below target / TIER_FAN_IN**k, at most MAX_LEVEL."""
    k = 0
    bound = target_bytes / TIER_FAN_IN
    while size < bound and k < MAX_LEVEL:
        k += 1
        bound /= TIER_FAN_IN
    return k


def _segments(files: list[DataFile], target_bytes: int) -> list[tuple[tuple[DataFile, ...], bool]]:
    """Files in key order grouped into segments: (files, compact). A compacting segment is the shortest run from a
    file of at least TIER_FAN_IN small neighbours (level above 0) that fit one target file and together reach a
    lower level than each of them has: TIER_FAN_IN files of one level always do; files of two levels side by side
    (syncs whose sizes straddle a level's bound) do once enough of them lie there, so they never pile up. Every
    rewrite lowers the level of each row it rewrites, hence the bound; a small file is never merged into a much
    larger neighbour for a few rows (the tail of a table of small syncs, rewritten by every sync). Every other file
    is a segment of its own."""
    levels = [level(f.bytes, target_bytes) for f in files]
    segments: list[tuple[tuple[DataFile, ...], bool]] = []
    i = 0
    while i < len(files):
        end = _compaction_end(files, levels, i, target_bytes)
        if end is None:
            segments.append(((files[i],), False))
            i += 1
        else:
            segments.append((tuple(files[i:end]), True))
            i = end
    return segments


def _compaction_end(files: list[DataFile], levels: list[int], start: int, target_bytes: int) -> int | None:
    """Where the shortest compacting run from `start` ends (see _segments); None: no run starts there."""
    size, lowest = 0, MAX_LEVEL
    for j in range(start, len(files)):
        if levels[j] == 0 or size + files[j].bytes > target_bytes:
            return None
        size += files[j].bytes
        lowest = min(lowest, levels[j])
        if j + 1 - start >= TIER_FAN_IN and level(size, target_bytes) < lowest:
            return j + 1
    return None


def _cuts(weights: np.ndarray, per_unit: int) -> list[int]:
    """Positions (into sorted samples) where a new unit begins so each holds about `per_unit` rows."""
    cuts: list[int] = []
    acc = 0
    for i, w in enumerate(weights):
        if acc >= per_unit:
            cuts.append(i)
            acc = 0
        acc += int(w)
    return cuts


def plan_units(files: Sequence[DataFile], sample: KeySample, table_def: TableDef, target_bytes: int,
               bytes_per_row: float | None = None) -> Plan:
    """Units over the table's files for a request whose keys `sample` describes (module docstring);
    `bytes_per_row` sizes units when the table has no rows yet."""
    stored = in_key_order(files, table_def)
    per_unit = target_rows(stored, target_bytes, bytes_per_row)
    segments = _segments(stored, target_bytes)
    firsts_json = [_key(seg[0][0].first_key) for seg in segments]
    lasts_json = [_key(seg[0][-1].last_key) for seg in segments]
    firsts = keys_from_json(firsts_json, table_def)
    lasts = keys_from_json(lasts_json, table_def)

    order = pc.sort_indices(sample.keys, sort_keys=sort_keys(table_def, with_start=False))
    keys = sample.keys.take(order)
    weights = sample.weights[order.to_numpy()]
    at_or_after_first = count_bounds_below(keys, firsts)  # segments whose first key ≤ the key
    after_last = count_bounds_below(keys, lasts, inclusive=False)  # segments whose last key < the key
    inside = at_or_after_first == after_last + 1  # in the range of segment at_or_after_first - 1
    place = np.where(inside, 2 * at_or_after_first - 1, 2 * at_or_after_first)  # gap g → 2g, segment s → 2s + 1

    bound_positions: list[int] = []  # into `keys`: sampled keys that begin a unit
    bound_first_of: set[int] = set(range(1, len(segments)))  # segments whose first key begins a unit
    starts = np.searchsorted(place, np.arange(2 * len(segments) + 2))  # place is sorted: keys are
    for p in range(2 * len(segments) + 1):
        lo_i, hi_i = int(starts[p]), int(starts[p + 1])
        w = weights[lo_i:hi_i]
        total = int(w.sum())
        if p % 2 == 0:  # a gap
            if total <= per_unit:
                continue
            gap_cuts = [lo_i + c for c in _cuts(w, per_unit)]
            if p > 0:
                gap_cuts.insert(0, lo_i)  # its own units, not the previous file's
            bound_positions += gap_cuts
            if p // 2 < len(segments):
                bound_first_of.add(p // 2)  # the gap's last unit ends where the next file begins
        else:
            seg_files = segments[p // 2][0]
            stored_rows = sum(f.rows for f in seg_files)
            if total + stored_rows <= 2 * per_unit or total <= per_unit // 2:
                continue
            parts = math.ceil((total + stored_rows) / per_unit)
            bound_positions += [lo_i + c for c in _cuts(w, max(1, total // parts))]

    bound_keys = keys_to_json(keys.take(bound_positions), table_def) if bound_positions else []
    bounds_json = sorted_unique([*bound_keys, *(firsts_json[s] for s in bound_first_of)], table_def)
    bounds = keys_from_json(bounds_json, table_def)
    units = _units(bounds_json, bounds, segments, firsts, lasts, table_def)
    return Plan(units=units, bounds=bounds)


def sorted_unique(keys: list[KeyJson], table_def: TableDef) -> list[KeyJson]:
    """Keys in key order without repeats."""
    if not keys:
        return []
    table = keys_from_json(keys, table_def)
    order = pc.sort_indices(table, sort_keys=sort_keys(table_def, with_start=False)).to_pylist()
    out: list[KeyJson] = []
    ordered = table.take(order)
    below = count_bounds_below(ordered, ordered, inclusive=False)  # equal keys have equal counts
    seen = -1
    for i, k in enumerate(order):
        if below[i] != seen:
            out.append(keys[k])
            seen = int(below[i])
    return out


def _units(bounds_json: list[KeyJson], bounds: pa.Table, segments: list[tuple[tuple[DataFile, ...], bool]],
           firsts: pa.Table, lasts: pa.Table, table_def: TableDef) -> list[PlannedUnit]:
    count = len(bounds_json) + 1
    files_of: list[list[DataFile]] = [[] for _ in range(count)]
    compact = [False] * count
    first_unit = count_bounds_below(firsts, bounds)
    last_unit = count_bounds_below(lasts, bounds)
    for s, (seg_files, seg_compact) in enumerate(segments):
        a, b = int(first_unit[s]), int(last_unit[s])
        for u in range(a, b + 1):
            files_of[u] += seg_files
            compact[u] = compact[u] or seg_compact or a != b  # a file cut between units: each rewrites its part
    edges: list[KeyJson | None] = [None, *bounds_json, None]
    return [PlannedUnit(lo=edges[u], hi=edges[u + 1], files=tuple(files_of[u]), compact=compact[u])
            for u in range(count)]
