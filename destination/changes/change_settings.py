"""The change-file settings of a request's configuration (form fields `changes*`), validated once per request.

A frozen dataclass: Spark tasks receive it with their job's context (spark_jobs.contracts.JobContext).
"""
from __future__ import annotations

from dataclasses import dataclass

from destination.runtime.errors import UserActionRequired

OFF, ARCION_CSV, ARCION_JSON, PARQUET = "off", "arcion-csv", "arcion-json", "parquet"
CHANGE_FORMATS = (OFF, ARCION_CSV, ARCION_JSON, PARQUET)
FULL, MINIMAL = "full", "minimal"
IMAGES = (FULL, MINIMAL)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


@dataclass(frozen=True)
class ChangeSettings:
    format: str = OFF
    image: str = FULL  # Arcion only: full before/after images, or the seed's minimal realtime images
    null_token: str = "NULL"  # Arcion CSV only
    include_header: bool = False  # Arcion CSV only
    emit_noop_updates: bool = False  # keep updates that change nothing but `_fivetran_synced`

    @property
    def enabled(self) -> bool:
        return self.format != OFF

    @property
    def is_arcion(self) -> bool:
        """Arcion events carry running operation totals, so their files are formatted in a second pass."""
        return self.format in (ARCION_CSV, ARCION_JSON)


def _flag(configuration: dict[str, str], name: str) -> bool:
    text = (configuration.get(name) or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UserActionRequired(f"configuration field {name!r} is {text!r}; expected true or false")


def change_settings(configuration: dict[str, str]) -> ChangeSettings:
    """Parse and check the `changes*` fields; a bad value is a Task naming the field."""
    fmt = (configuration.get("changes") or OFF).strip().lower()
    if fmt not in CHANGE_FORMATS:
        raise UserActionRequired(f"configuration field 'changes' is {fmt!r}; expected one of {', '.join(CHANGE_FORMATS)}")
    image = (configuration.get("changes_image") or FULL).strip().lower()
    if image not in IMAGES:
        raise UserActionRequired(f"configuration field 'changes_image' is {image!r}; expected full or minimal")
    null_token = configuration.get("changes_null_token")
    if null_token is None or null_token == "":
        null_token = "NULL"
    if any(ch in null_token for ch in ',"\r\n'):
        raise UserActionRequired("configuration field 'changes_null_token' must not contain a comma, a double quote "
                                 "or a line break (it is written unquoted)")
    return ChangeSettings(format=fmt, image=image, null_token=null_token,
                          include_header=_flag(configuration, "changes_include_header"),
                          emit_noop_updates=_flag(configuration, "changes_emit_noop_updates"))
