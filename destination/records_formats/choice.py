"""The configuration's records format (`records_format`, `records_variant` and the hint fields `records_<hint>`):
checked when a request's configuration is read, and stamped into a table's definition when it is created. A
table keeps the format it was created with; changing the fields affects tables created afterwards."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from destination.model.table_model import PARQUET, TableDef
from destination.records_formats import hints as records_hints
from destination.records_formats.codec import RECORDS_FORMATS, Codec, codec
from destination.runtime.errors import BadRequest, UserActionRequired

FORMAT_FIELD = "records_format"
VARIANT_FIELD = "records_variant"
DEFAULT = "default"  # a hint field's value for the variant's own hint
NONE = "none"  # the compression field's value for no compression
# each hint a table may override (records_formats/hints.py OVERRIDABLE), by its configuration field
HINT_FIELDS = {hint: "records_" + hint.replace("-", "_") for hint in records_hints.OVERRIDABLE}


@dataclass(frozen=True)
class RecordsChoice:
    """A configuration's records format, variant and hint overrides (hashable: a part of the store's options)."""
    records_format: str = PARQUET
    variant: str | None = None
    overrides: tuple[tuple[str, records_hints.HintValue], ...] = ()

    @property
    def codec(self) -> Codec:
        return codec(self.records_format, self.variant, dict(self.overrides) or None)

    def stamp(self, table: TableDef) -> TableDef:
        """A requested definition (CreateTable) with this format, or BadRequest naming the table and column this
        format cannot hold."""
        chosen = self.codec
        chosen.check(table)
        return replace(table, records_format=chosen.records_format, records_variant=chosen.variant,
                       records_hints=tuple(chosen.hints.items()))


def _hint_value(hint: str, text: str) -> records_hints.HintValue:
    if hint == "header-row":
        if text.lower() not in ("true", "false"):
            raise BadRequest(f"header-row {text!r} is neither true nor false")
        return text.lower() == "true"
    if hint == "compression" and text.lower() == NONE:
        return None
    return text.upper() if hint in ("compression", "encoding") else text


def configuration_field(name: str) -> str:
    return f"configuration field {name!r}"


def records_choice(configuration: Mapping[str, str],
                   named: Callable[[str], str] = configuration_field) -> RecordsChoice:
    """The configuration's choice, checked as the codecs decide; a refused value is a UserActionRequired naming
    its field as `named` calls it (`reformat` names its command-line options)."""
    fmt = (configuration.get(FORMAT_FIELD) or "").strip().lower() or PARQUET
    if fmt not in RECORDS_FORMATS:
        raise UserActionRequired(f"{named(FORMAT_FIELD)}: {fmt!r} is not one of {', '.join(RECORDS_FORMATS)}")
    if fmt != "delimited":
        return RecordsChoice(fmt)
    variant = (configuration.get(VARIANT_FIELD) or "").strip().lower()
    if not variant:
        raise UserActionRequired(f"{named(VARIANT_FIELD)}: records_format 'delimited' needs a "
                                 f"variant ({', '.join(records_hints.OFFERED_VARIANTS)})")
    overrides: dict[str, records_hints.HintValue] = {}
    for hint, name in HINT_FIELDS.items():
        text = (configuration.get(name) or "").strip()
        if text and text.lower() != DEFAULT:
            try:
                overrides[hint] = _hint_value(hint, text)
            except BadRequest as e:
                raise UserActionRequired(f"{named(name)}: {e}") from None
    choice = RecordsChoice(fmt, variant, tuple(overrides.items()))
    try:
        choice.codec  # noqa: B018 - resolving the hints checks them
    except BadRequest as e:
        raise UserActionRequired(f"{named(_field_named(str(e)))}: {e}") from None
    return choice


def _field_named(message: str) -> str:
    """The configuration field a codec's refusal is about: the first hint it names, else the variant."""
    found = [(message.find(hint), -len(hint), name) for hint, name in HINT_FIELDS.items() if hint in message]
    return min(found)[2] if found else VARIANT_FIELD
