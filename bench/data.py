"""The benchmark's table and its rows, generated as Fivetran's tester writes them (text values, null and unmodified
markers), vectorized with pyarrow so ten million rows take seconds.

Twenty columns mix every Fivetran DataType; the key is `id` (LONG). Values come from seeded generators, so a run
is reproducible; strings come from pools (taken by random index) so generation never loops over rows in Python.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from destination.tester.batchgen import UNMODIFIED_STRING

COLUMNS: list[tuple[str, str, tuple[int, int] | None]] = [
    ("id", "LONG", None), ("flag", "BOOLEAN", None), ("small", "SHORT", None), ("count", "INT", None),
    ("big", "LONG", None), ("amount", "DECIMAL", (18, 4)), ("ratio", "FLOAT", None), ("score", "DOUBLE", None),
    ("day", "NAIVE_DATE", None), ("local_at", "NAIVE_DATETIME", None), ("created_at", "UTC_DATETIME", None),
    ("at_time", "NAIVE_TIME", None), ("payload", "BINARY", None), ("doc", "XML", None), ("name", "STRING", None),
    ("attrs", "JSON", None), ("city", "STRING", None), ("price", "DECIMAL", (38, 10)), ("email", "STRING", None),
    ("notes", "STRING", None),
]
KEY = "id"
SYNCED, DELETED = "_fivetran_synced", "_fivetran_deleted"
START, END, ACTIVE = "_fivetran_start", "_fivetran_end", "_fivetran_active"
TMAX = "9999-12-31T23:59:59.999Z"
NULLABLE = ("name", "notes", "doc", "ratio", "day")  # ~5 % NULL each (notes 10 %)
UPDATABLE = ("flag", "count", "amount", "score", "name", "notes", "city")  # an update sets these, others unmodified


def system_columns(history: bool) -> list[tuple[str, str]]:
    if history:
        return [(SYNCED, "UTC_DATETIME"), (START, "UTC_DATETIME"), (END, "UTC_DATETIME"), (ACTIVE, "BOOLEAN")]
    return [(SYNCED, "UTC_DATETIME"), (DELETED, "BOOLEAN")]


def column_names(history: bool) -> list[str]:
    return [c[0] for c in COLUMNS] + [c[0] for c in system_columns(history)]


def _pool(rng: np.random.Generator, n: int, make) -> pa.Array:  # type: ignore[no-untyped-def]
    return pa.array([make(i, rng) for i in range(n)], pa.string())


@dataclass
class Pools:
    payload: pa.Array
    doc: pa.Array
    name: pa.Array
    attrs: pa.Array
    city: pa.Array
    notes: pa.Array

    @staticmethod
    def make(seed: int = 1) -> Pools:
        rng = np.random.default_rng(seed)
        first = ["Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Ken", "Dennis", "Frances", "Margaret"]
        last = ["Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Thompson", "Ritchie", "Allen"]
        return Pools(
            payload=_pool(rng, 4096, lambda i, r: base64.b64encode(r.bytes(int(r.integers(8, 24)))).decode()),
            doc=_pool(rng, 1024, lambda i, r: f'<item id="{i}"><v>{int(r.integers(0, 10**6))}</v></item>'),
            name=_pool(rng, 2048, lambda i, r: f"{first[i % len(first)]} {last[(i // 10) % len(last)]} {i}"),
            attrs=_pool(rng, 1024, lambda i, r: json.dumps({"tier": i % 7, "tags": ["a", "b"][: i % 3],
                                                            "score": round(float(r.random()), 3)})),
            city=_pool(rng, 256, lambda i, r: ["Oslo", "Lima", "Pune", "Kyiv", "Rome", "Quito", "Accra"][i % 7]
                       + (f" {i}" if i > 6 else "")),
            notes=_pool(rng, 1024, lambda i, r: f'note {i}, said "{["fine", "late", "ok, done"][i % 3]}"'),
        )


def _pick(pool: pa.Array, rng: np.random.Generator, n: int) -> pa.Array:
    return pool.take(pa.array(rng.integers(0, len(pool), n)))


def _decimal_text(rng: np.random.Generator, n: int, digits: int, scale: int) -> pa.Array:
    whole = pa.array(rng.integers(-(10 ** digits), 10 ** digits, n)).cast(pa.string())
    frac = pc.utf8_lpad(pa.array(rng.integers(0, 10 ** min(scale, 18), n)).cast(pa.string()), min(scale, 18), "0")
    return pc.binary_join_element_wise(whole, frac, ".")


def _with_nulls(values: pa.Array, rng: np.random.Generator, rate: float) -> pa.Array:
    return pc.if_else(pa.array(rng.random(len(values)) < rate), pa.scalar(None, values.type), values)


def _instants(rng: np.random.Generator, n: int, start_us: int, span_us: int, unit: str, fmt: str) -> pa.Array:
    step = 1000 if unit == "ms" else 1
    values = pa.array((start_us + rng.integers(0, span_us, n)) // step, pa.int64()).cast(pa.timestamp(unit))
    return pc.strftime(values, format=fmt)


def user_values(ids: np.ndarray, seed: int, pools: Pools) -> dict[str, pa.Array]:
    """Typed-as-text values of the 20 columns for `ids` (NULL where a value is missing)."""
    rng = np.random.default_rng(seed)
    n = len(ids)
    us_2020 = 1_577_836_800_000_000
    year = 365 * 86_400_000_000
    v: dict[str, pa.Array] = {
        "id": pa.array(ids, pa.int64()).cast(pa.string()),
        "flag": pa.array(rng.random(n) < 0.5).cast(pa.string()),
        "small": pa.array(rng.integers(-30000, 30000, n), pa.int16()).cast(pa.string()),
        "count": pa.array(rng.integers(0, 2**31 - 1, n), pa.int32()).cast(pa.string()),
        "big": pa.array(rng.integers(-(2**62), 2**62, n), pa.int64()).cast(pa.string()),
        "amount": _decimal_text(rng, n, 12, 4),
        "ratio": pa.array(rng.random(n).astype(np.float32) * 100).cast(pa.string()),
        "score": pa.array(rng.normal(0, 1e6, n)).cast(pa.string()),
        "day": pa.array(rng.integers(0, 20000, n), pa.int32()).cast(pa.date32()).cast(pa.string()),
        "local_at": _instants(rng, n, us_2020, 4 * year, "us", "%Y-%m-%dT%H:%M:%S"),
        "created_at": _instants(rng, n, us_2020, 4 * year, "ms", "%Y-%m-%dT%H:%M:%SZ"),
        "at_time": pa.array(rng.integers(0, 86400, n), pa.int32()).cast(pa.time32("s")).cast(pa.string()),
        "payload": _pick(pools.payload, rng, n),
        "doc": _pick(pools.doc, rng, n),
        "name": _pick(pools.name, rng, n),
        "attrs": _pick(pools.attrs, rng, n),
        "city": _pick(pools.city, rng, n),
        "price": _decimal_text(rng, n, 17, 10),
        "email": pc.binary_join_element_wise("user", pa.array(ids, pa.int64()).cast(pa.string()), "@example.com", ""),
        "notes": _pick(pools.notes, rng, n),
    }
    for name in NULLABLE:
        v[name] = _with_nulls(v[name], rng, 0.10 if name == "notes" else 0.05)
    return v


def instant_text(epoch_ms: int) -> str:
    return str(pc.strftime(pa.array([epoch_ms], pa.int64()).cast(pa.timestamp("ms")), format="%Y-%m-%dT%H:%M:%SZ")[0])


def text_table(values: dict[str, pa.Array], names: list[str]) -> pa.Table:
    """All columns as text, in `names` order (NULL stays null: each file format writes it its own way)."""
    return pa.table({n: values[n] for n in names})


def plain_rows(ids: np.ndarray, seed: int, pools: Pools, synced: str) -> dict[str, pa.Array]:
    v = user_values(ids, seed, pools)
    v[SYNCED] = pa.array([synced] * len(ids), pa.string())
    v[DELETED] = pa.array(["false"] * len(ids), pa.string())
    return v


def history_rows(ids: np.ndarray, seed: int, pools: Pools, synced: str, start: str) -> dict[str, pa.Array]:
    v = user_values(ids, seed, pools)
    n = len(ids)
    v[SYNCED] = pa.array([synced] * n, pa.string())
    v[START] = pa.array([start] * n, pa.string())
    v[END] = pa.array([TMAX] * n, pa.string())
    v[ACTIVE] = pa.array(["true"] * n, pa.string())
    return v


def partial_update(values: dict[str, pa.Array], keep: tuple[str, ...]) -> dict[str, pa.Array]:
    """An update row: the `keep` columns (and the key and system columns) set, every other column unmodified."""
    n = len(values[KEY])
    out = dict(values)
    for name, _t, _p in COLUMNS:
        if name != KEY and name not in keep:
            out[name] = pa.array([UNMODIFIED_STRING] * n, pa.string())
    return out


def delete_rows(ids: np.ndarray, synced: str, history: bool) -> dict[str, pa.Array]:
    """Delete files carry the key and system columns; other columns are NULL."""
    n = len(ids)
    out: dict[str, pa.Array] = {name: pa.nulls(n, pa.string()) for name, _t, _p in COLUMNS}
    out[KEY] = pa.array(ids, pa.int64()).cast(pa.string())
    out[SYNCED] = pa.array([synced] * n, pa.string())
    if history:
        out[START] = pa.nulls(n, pa.string())
        out[END] = pa.array([synced] * n, pa.string())
        out[ACTIVE] = pa.array(["false"] * n, pa.string())
    else:
        out[DELETED] = pa.nulls(n, pa.string())
    return out
