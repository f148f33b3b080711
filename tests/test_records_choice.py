"""The records format as a configuration choice: the fields of the form, their checks (a Task naming the field),
the format kept in a table's definition (old definitions read as Parquet), the table formats each format allows
and the catalog refused where no Iceberg table is written."""
from __future__ import annotations

import json

import pytest

from destination.catalogs.catalog_settings import catalog_settings
from destination.catalogs.kinds import check_store_options
from destination.model.table_model import ColumnDef, TableDef
from destination.on_disk.options import describes, store_options
from destination.records_formats.choice import RecordsChoice, records_choice
from destination.rpc.configuration import configuration_form, unknown_fields_message
from destination.runtime.errors import BadRequest, UserActionRequired

CSV_ISO = {"records_format": "delimited", "records_variant": "csv", "records_dateformat": "YYYY-MM-DD",
           "records_datetimeformat": "YYYY-MM-DD HH24:MI:SS", "records_datetimeformattz": "YYYY-MM-DD HH:MI:SSOF"}
TABLE = TableDef(name="t", columns=(ColumnDef("id", "INT", primary_key=True), ColumnDef("s", "STRING")))


def test_the_choice_defaults_to_parquet_and_takes_avro_and_the_delimited_variants_with_their_overrides() -> None:
    assert records_choice({}) == RecordsChoice("parquet")
    assert records_choice({"records_format": "AVRO "}) == RecordsChoice("avro")
    bluelabs = records_choice({"records_format": "delimited", "records_variant": "bluelabs",
                               "records_compression": "none", "records_header_row": "true",
                               "records_encoding": "default"})
    assert bluelabs.overrides == (("compression", None), ("header-row", True))
    assert bluelabs.codec.hints["compression"] is None and bluelabs.codec.suffix == ".csv"
    assert records_choice({**CSV_ISO, "records_compression": "bzip"}).codec.suffix == ".csv.bz2"
    assert records_choice({**CSV_ISO, "records_header_row": "FALSE"}).codec.hints["header-row"] is False


@pytest.mark.parametrize(("configuration", "field", "cause"), [
    ({"records_format": "orc"}, "records_format", "'orc' is not one of parquet, avro, delimited"),
    ({"records_format": "delimited"}, "records_variant", "needs a variant"),
    ({"records_format": "delimited", "records_variant": "dumb"}, "records_variant", "cannot hold a comma"),
    ({"records_format": "delimited", "records_variant": "csv"}, "records_dateformat", "two-digit year"),
    ({**CSV_ISO, "records_datetimeformattz": "MM/DD/YY HH24:MI"}, "records_datetimeformattz", "refused"),
    ({**CSV_ISO, "records_compression": "lzo"}, "records_compression", "LZO"),
    ({**CSV_ISO, "records_header_row": "yes"}, "records_header_row", "'yes' is neither true nor false"),
])
def test_a_refused_choice_names_its_field_and_cause(configuration: dict[str, str], field: str, cause: str) -> None:
    with pytest.raises(UserActionRequired, match=f"configuration field '{field}'.*{cause}"):
        records_choice(configuration)
    with pytest.raises(UserActionRequired, match=f"'{field}'"):  # every request's configuration is checked
        store_options(configuration, is_s3=False)


def test_a_definition_keeps_its_format_and_one_written_before_the_choice_reads_as_parquet() -> None:
    old = json.loads(json.dumps(TABLE.to_json()))
    assert "records_format" not in old  # a Parquet table's _table.json is as before
    assert TableDef.from_json(old).stored_format == "parquet"
    stamped = records_choice(CSV_ISO).stamp(TABLE)
    again = TableDef.from_json(json.loads(json.dumps(stamped.to_json())))
    assert (again.records_format, again.records_variant) == ("delimited", "csv")
    assert dict(again.records_hints)["dateformat"] == "YYYY-MM-DD" and len(again.records_hints) == 13
    assert again == TABLE  # not part of the comparison: a retried CreateTable after the field changed matches
    assert TABLE.stored_format == "parquet"  # a requested definition (not stamped) reads as Parquet


def test_a_table_the_format_cannot_hold_is_refused_naming_its_column() -> None:
    bad = TableDef(name="t", columns=(ColumnDef("id", "INT", primary_key=True), ColumnDef("a-b", "STRING")))
    with pytest.raises(BadRequest, match="table 't', column 'a-b': not an Avro field name"):
        records_choice({"records_format": "avro"}).stamp(bad)
    assert records_choice({}).stamp(bad).stored_format == "parquet"


def test_the_form_offers_the_formats_and_shows_the_variant_and_hints_for_delimited_only() -> None:
    fields = {f.name: f for f in configuration_form().fields}
    assert list(fields["records_format"].dropdown_field.dropdown_field) == ["parquet", "avro", "delimited"]
    assert fields["records_format"].default_value == "parquet"
    (shown,) = [f.conditional_fields for f in fields.values() if f.HasField("conditional_fields")
                and f.conditional_fields.condition.condition_field == "records_format"]
    assert shown.condition.string_value == "delimited"
    inner = {f.name: f for f in shown.fields}
    assert list(inner["records_variant"].dropdown_field.dropdown_field) == ["csv", "bigquery", "bluelabs", "vertica"]
    assert set(inner) == {"records_variant", "records_compression", "records_header_row", "records_encoding",
                          "records_dateformat", "records_timeonlyformat", "records_datetimeformat",
                          "records_datetimeformattz"}
    for name, field in inner.items():  # every value the form offers is one the check accepts
        for value in field.dropdown_field.dropdown_field:
            records_choice({**CSV_ISO, "records_variant": "bluelabs", name: value})
    assert unknown_fields_message(CSV_ISO) is None


def test_the_forms_own_defaults_choose_records_movers_variant_and_no_variant_offered_is_refused_whatever_its_hints() -> None:
    from records_mover.records import DelimitedRecordsFormat

    fields = {f.name: f for f in configuration_form().fields}
    (shown,) = [f.conditional_fields.fields for f in fields.values() if f.HasField("conditional_fields")
                and f.conditional_fields.condition.string_value == "delimited"]
    defaults = {"records_format": "delimited", **{f.name: f.default_value for f in shown}}
    assert defaults["records_variant"] == DelimitedRecordsFormat().variant == "bluelabs"
    assert records_choice(defaults).variant == "bluelabs"  # a user who only picks delimited is not refused
    offered = list(next(f for f in shown if f.name == "records_variant").dropdown_field.dropdown_field)
    # every variant records-mover defines: offered exactly when some hint overrides make it one the check accepts
    for variant in ("bluelabs", "csv", "bigquery", "vertica", "dumb"):
        tries = [{**defaults, "records_variant": variant}, {**CSV_ISO, "records_variant": variant}]
        accepted = []
        for configuration in tries:
            try:
                accepted.append(records_choice(configuration))
            except UserActionRequired:
                pass
        assert (variant in offered) == bool(accepted), variant
    assert "dumb" not in offered


def test_table_formats_apply_where_the_format_allows_and_a_catalog_needs_a_format_with_iceberg() -> None:
    both = ("delta", "iceberg")
    for records_format, described in (("parquet", both), ("", both), ("avro", ("iceberg",)), ("delimited", ())):
        assert tuple(f for f in both if describes(f, records_format)) == described
    sql = catalog_settings({"catalog": "sql", "catalog_uri": "sqlite:///c.db"})
    with pytest.raises(UserActionRequired, match=r"'catalog'.*records_format 'delimited' have no Iceberg"):
        check_store_options(sql, store_options(CSV_ISO, is_s3=False))
    assert check_store_options(sql, store_options({}, is_s3=False)).records == RecordsChoice("parquet")
    assert check_store_options(sql, store_options({"records_format": "avro"}, is_s3=False)).records == \
        RecordsChoice("avro")
