"""The delimited variants' complete hints, as records-mover defines them, and the overrides a table may set.

Every `_format_delimited` carries all 13 hints (the variant's defaults merged with the overrides), so readers never
fall back on defaults. Defaults: records-mover `DelimitedRecordsFormat.base_hints_from_variant` (the spec's table
differs in places; output-formats.md §1.4). Overrides are checked here, at configuration time: a hint whose value
would lose information (a two-digit year, minutes without seconds, a 12-hour clock without seconds, an encoding
that cannot hold every character) is refused, naming the hint, the value and a lossless choice.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from destination.runtime.errors import BadRequest

HintValue = str | bool | None
Hints = dict[str, HintValue]

_BASE: Hints = {
    "header-row": False, "field-delimiter": ",", "record-terminator": "\n", "compression": "GZIP", "quoting": None,
    "quotechar": '"', "doublequote": False, "escape": None, "encoding": "UTF8", "dateformat": "YYYY-MM-DD",
    "timeonlyformat": "HH24:MI:SS", "datetimeformat": "YYYY-MM-DD HH:MI:SS", "datetimeformattz": "YYYY-MM-DD HH:MI:SSOF",
}
_VARIANTS: dict[str, Hints] = {
    "dumb": {"field-delimiter": ",", "record-terminator": "\n", "quoting": None, "doublequote": False},
    "csv": {"field-delimiter": ",", "quoting": "minimal", "doublequote": True, "quotechar": '"',
            "dateformat": "MM/DD/YY", "datetimeformat": "MM/DD/YY HH24:MI", "datetimeformattz": "MM/DD/YY HH24:MI",
            "timeonlyformat": "HH24:MI:SS", "header-row": True},
    "bigquery": {"field-delimiter": ",", "quoting": "minimal", "doublequote": True, "quotechar": '"', "header-row": True,
                 "datetimeformat": "YYYY-MM-DD HH:MI:SS", "datetimeformattz": "YYYY-MM-DD HH:MI:SS"},
    "bluelabs": {"field-delimiter": ",", "escape": "\\", "quoting": None, "doublequote": False,
                 "dateformat": "YYYY-MM-DD", "datetimeformat": "YYYY-MM-DD HH24:MI:SS"},
    "vertica": {"field-delimiter": "\001", "record-terminator": "\002", "quoting": None, "doublequote": False,
                "escape": None, "compression": None, "timeonlyformat": "HH24:MI:SS"},
}
VARIANTS = tuple(_VARIANTS)
DEFAULT_VARIANT = "bluelabs"  # records-mover's (DelimitedRecordsFormat's default variant)


def _holds_a_comma(hints: Hints) -> bool:
    """Whether a field can hold the delimiter `,` (quoted or escaped); `_destination_meta` (JSON) always has one."""
    return hints["quoting"] is not None or hints["escape"] is not None or hints["field-delimiter"] != ","


# the variants a configuration may choose: quoting, escape and delimiter define a variant (no override changes
# them), so one whose fields cannot hold a comma is refused whatever the overrides (records-mover's `dumb`)
OFFERED_VARIANTS = tuple(v for v, own in _VARIANTS.items() if _holds_a_comma({**_BASE, **own}))

# the hints a table may override, each with its lossless values (those records-mover and the spec allow)
_DATE = ("YYYY-MM-DD", "MM-DD-YYYY", "DD-MM-YYYY")
_TIME = ("HH24:MI:SS", "HH:MI:SS")
_DATETIME = ("YYYY-MM-DD HH24:MI:SS", "YYYY-MM-DD HH:MI:SS")
_DATETIMETZ = ("YYYY-MM-DD HH:MI:SSOF", "YYYY-MM-DD HH24:MI:SSOF", "YYYY-MM-DD HH:MI:SS", "YYYY-MM-DD HH24:MI:SS")
OVERRIDABLE: dict[str, tuple[HintValue, ...]] = {
    "compression": ("GZIP", "BZIP", None),
    "header-row": (True, False),
    "encoding": ("UTF8", "UTF8BOM", "UTF16", "UTF16LE", "UTF16BE", "UTF16BOM"),
    "dateformat": _DATE, "timeonlyformat": _TIME, "datetimeformat": _DATETIME, "datetimeformattz": _DATETIMETZ,
}
# why a value the spec allows is refused (it cannot hold every value exactly)
_LOSSY = {
    "MM/DD/YY": "a two-digit year holds one century only", "DD/MM/YY": "a two-digit year holds one century only",
    "MM/DD/YY HH24:MI": "a two-digit year and no seconds", "YYYY-MM-DD HH12:MI AM": "no seconds",
    "HH12:MI AM": "no seconds", "HH24:MI": "no seconds", "LATIN1": "it cannot hold every character",
    "CP1252": "it cannot hold every character", "LZO": "records-mover cannot name or read LZO files",
}
LOSSLESS_CHOICE = {"dateformat": "YYYY-MM-DD", "timeonlyformat": "HH24:MI:SS",
                   "datetimeformat": "YYYY-MM-DD HH24:MI:SS", "datetimeformattz": "YYYY-MM-DD HH:MI:SSOF"}

PYTHON_ENCODING = {"UTF8": "utf-8", "UTF8BOM": "utf-8-sig", "UTF16": "utf-16", "UTF16LE": "utf-16-le",
                   "UTF16BE": "utf-16-be", "UTF16BOM": "utf-16"}
SUFFIX = {"GZIP": ".csv.gz", "BZIP": ".csv.bz2", None: ".csv"}  # records-mover's generate_filename


def resolve(variant: str, overrides: Mapping[str, Any] | None = None) -> Hints:
    """The complete hints of `variant` with `overrides`, or BadRequest naming the variant, hint and cause."""
    if variant not in _VARIANTS:
        raise BadRequest(f"records_variant {variant!r}: unknown; choose one of {', '.join(VARIANTS)}")
    hints: Hints = {**_BASE, **_VARIANTS[variant]}
    for name, value in (overrides or {}).items():
        if name not in _BASE:
            raise BadRequest(f"records_variant {variant!r}: unknown hint {name!r}")
        if name not in OVERRIDABLE:
            raise BadRequest(f"records_variant {variant!r}: hint {name!r} defines the variant and cannot be "
                             f"overridden; choose the variant that has the {name} you need")
        if value not in OVERRIDABLE[name]:
            cause = _LOSSY.get(str(value), "not a value the records spec allows")
            raise BadRequest(f"records_variant {variant!r}: hint {name}={value!r} refused: {cause}; "
                             f"allowed: {', '.join(repr(v) for v in OVERRIDABLE[name])}")
        hints[name] = value
    if not _holds_a_comma(hints):
        raise BadRequest(f"records_variant {variant!r}: neither quotes nor escapes its fields, so it cannot hold "
                         "a comma, and every row's _destination_meta (JSON) has one; choose "
                         f"{', '.join(v for v in OFFERED_VARIANTS if _VARIANTS[v]['field-delimiter'] == ',')}")
    for name, lossless in LOSSLESS_CHOICE.items():
        value = hints[name]
        if value not in OVERRIDABLE[name]:
            raise BadRequest(f"records_variant {variant!r}: its {name} {value!r} loses information "
                             f"({_LOSSY.get(str(value), 'not exact')}); override it, e.g. {name}={lossless!r}")
    return hints


def format_document(variant: str, hints: Hints) -> dict[str, Any]:
    """The content of `_format_delimited` (the records spec's detailed form)."""
    return {"type": "delimited", "variant": variant, "hints": dict(hints)}
