"""Tiered compaction (destination.on_disk.placement): a table written by many small syncs keeps files whose sizes
follow the tiers, and each row is rewritten by compaction a bounded number of times over its life, not once per
sync. The planner decides; a model written here applies its decisions to file statistics (no Spark) and counts, per
sync, the bytes each row's file was rewritten, against the bound the tiers promise."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest

from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk.datafiles import DataFile
from destination.on_disk.placement import KeySample, plan_units

pytestmark = pytest.mark.unit

KEY = TableDef("t", (ColumnDef("id", "LONG", primary_key=True),))
TARGET = 64 << 20
FAN_IN = 4  # the tiers' factor as documented (docs/design/write-path.md), written here apart from the code's


@dataclass
class ModelFile:
    """A file of the model: its key range, size and, per sync that wrote its rows, how often they were rewritten."""
    first: int
    last: int
    size: int
    rewrites: list[int] = field(default_factory=list)  # one entry per sync whose rows the file holds

    def stats(self, name: str) -> DataFile:
        return DataFile(name=name, rows=self.last - self.first + 1, bytes=self.size, bucket=None,
                        first_key=[self.first], last_key=[self.last])


def _level(size: int) -> int:
    """The documented tiers: level k holds sizes in [target / 4**(k+1), target / 4**k)."""
    return 0 if size >= TARGET / FAN_IN else min(8, math.floor(math.log(TARGET / size, FAN_IN)))


def _sync(files: list[ModelFile], first: int, rows: int, size: int) -> int:
    """One append of `rows` new keys from `first` (a file of `size` bytes), planned by the real planner; the units
    it marks compacting are merged in the model. Returns the bytes compaction rewrote."""
    names = {f"f{i}": f for i, f in enumerate(files)}
    sample = KeySample.exact(pa.table({"id": pa.array(np.arange(first, first + rows), pa.int64())}))
    plan = plan_units([f.stats(n) for n, f in names.items()], sample, KEY, TARGET)
    rewritten = 0
    for unit in plan.units:
        if not unit.compact:
            continue
        merged = [names[d.name] for d in unit.files]
        for f in merged:
            files.remove(f)
        rewritten += sum(f.size for f in merged)
        files.append(ModelFile(min(f.first for f in merged), max(f.last for f in merged), sum(f.size for f in merged),
                               [n + 1 for f in merged for n in f.rewrites]))
    files.append(ModelFile(first, first + rows - 1, size, [0]))
    files.sort(key=lambda f: f.first)
    return rewritten


@pytest.mark.parametrize(("syncs", "rows", "size"), [(2000, 50, 9_000), (1000, 500, 90_000)])
def test_small_appends_rewrite_each_row_a_bounded_number_of_times(syncs: int, rows: int, size: int) -> None:
    files: list[ModelFile] = []
    rewritten = []
    for s in range(syncs):
        rewritten.append(_sync(files, s * rows, rows, size))
    bound = _level(size)  # each compaction lowers a row's level by one at least
    worst = max(n for f in files for n in f.rewrites)
    assert worst <= bound, f"a sync's rows were rewritten {worst} times (bound {bound})"
    amplification = (sum(rewritten) + syncs * size) / (syncs * size)
    assert amplification <= bound + 1, amplification
    # a sync rewrites only small files: the median sync none, none ever more than one target file
    assert float(np.median(rewritten)) == 0 and max(rewritten) <= TARGET
    # the sizes follow the tiers: a run of FAN_IN neighbours of one level above 0 is compacted by the next write, so
    # no level holds more than FAN_IN files side by side, and the table holds few small files whatever its age
    levels = [_level(f.size) for f in files]
    for k in set(levels) - {0}:
        run = longest = 0
        for lv in levels:
            run = run + 1 if lv == k else 0
            longest = max(longest, run)
        assert longest <= FAN_IN, (k, levels)
    assert sum(lv > 0 for lv in levels) <= (FAN_IN - 1) * 8, levels
    assert all(a.last < b.first for a, b in itertools.pairwise(files)), "files overlap"
    assert sum(f.last - f.first + 1 for f in files) == syncs * rows


def test_a_small_file_is_not_merged_into_a_much_larger_neighbour() -> None:
    """The tail of a table of small syncs: one large file and a few small appends after it. Compacting them
    together would rewrite the large file for a few rows."""
    files = [ModelFile(0, 99_999, 20 << 20, [0])]
    rewritten = [_sync(files, 100_000 + s * 50, 50, 9_000) for s in range(3)]
    assert rewritten == [0, 0, 0]
    assert _sync(files, 100_150, 50, 9_000) == 0  # the fourth small file: four of one level, not yet planned
    assert _sync(files, 100_200, 50, 9_000) == 4 * 9_000, "the four small files are merged, the large one is not"
    assert files[0].size == 20 << 20


def test_syncs_whose_sizes_straddle_a_level_bound_are_compacted_too() -> None:
    """Appends alternating just under and just over a level's bound (64 MiB / 4**7 = 4 KiB): no four neighbours
    share a level, yet the files do not pile up, and the rewrite bound holds for both sizes."""
    files: list[ModelFile] = []
    sizes = [4_000, 4_200] * 500
    rewritten = [_sync(files, s * 50, 50, size) for s, size in enumerate(sizes)]
    levels = [_level(f.size) for f in files]
    assert sum(lv > 0 for lv in levels) <= (FAN_IN - 1) * 8 + FAN_IN, levels
    assert max(n for f in files for n in f.rewrites) <= _level(4_000)
    assert (sum(rewritten) + sum(sizes)) / sum(sizes) <= _level(4_000) + 1
