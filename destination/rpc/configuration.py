"""The configuration form, its tests, and a request's configuration → the StorageSpec of its root (the change-file
fields are parsed by destination.changes.change_settings)."""
from __future__ import annotations

import re

from destination.catalogs.catalog_settings import (
    CATALOG_FIELD,
    DEFAULT_CATALOG_NAME,
    GLUE,
    GLUE_ENDPOINT_FIELD,
    GLUE_KEY_FIELD,
    GLUE_REGION_FIELD,
    GLUE_SECRET_FIELD,
    KINDS,
    NAME_FIELD,
    NO_CATALOG,
    REST,
    REST_CLIENT_ID_FIELD,
    REST_CLIENT_SECRET_FIELD,
    REST_OAUTH_URI_FIELD,
    REST_SCOPE_FIELD,
    REST_TOKEN_FIELD,
    REST_URI_FIELD,
    REST_WAREHOUSE_FIELD,
    SQL,
    URI_FIELD,
)
from destination.changes.change_settings import CHANGE_FORMATS, FULL, IMAGES, OFF
from destination.on_disk.options import (
    KEEP_VERSIONS,
    LAYOUT_FIELD,
    LAYOUTS,
    MIN_AGE_FIELD,
    MIN_AGE_SECONDS,
    TABLE_FORMATS_FIELD,
    VERSIONS_FIELD,
)
from destination.on_disk.placement import TARGET_FILE_BYTES
from destination.protocol import common, form_field_names
from destination.records_formats.choice import DEFAULT, HINT_FIELDS, NONE, VARIANT_FIELD
from destination.records_formats.choice import FORMAT_FIELD as RECORDS_FORMAT_FIELD
from destination.records_formats.codec import RECORDS_FORMATS
from destination.records_formats.hints import DEFAULT_VARIANT, OFFERED_VARIANTS, OVERRIDABLE
from destination.runtime.errors import UserActionRequired
from destination.runtime.settings import ServerOptions
from destination.storage.base import StorageSpec

TEST_STORAGE = "storage"
TEST_SPARK = "spark"
TEST_CATALOG = "catalog"


def configuration_form() -> common.ConfigurationFormResponse:
    text = common.TextField
    fields = [
        common.FormField(name="root", label="Root (local path or s3://bucket/prefix)", required=False,
                         text_field=text.PlainText,
                         description="Where tables are written. Empty: the server's --root."),
        common.FormField(name="s3_endpoint", label="S3 endpoint", required=False, text_field=text.PlainText,
                         description="For S3-compatible stores, e.g. http://127.0.0.1:8333. Empty: AWS."),
        common.FormField(name="s3_region", label="S3 region", required=False, text_field=text.PlainText,
                         default_value="us-east-1"),
        common.FormField(name="aws_access_key_id", label="AWS access key id", required=False, text_field=text.PlainText),
        common.FormField(name="aws_secret_access_key", label="AWS secret access key", required=False,
                         text_field=text.Password),
        common.FormField(name="target_file_size", label="Target data-file size", required=False,
                         text_field=text.PlainText, default_value=format_size(TARGET_FILE_BYTES),
                         description="The size data files are written at (e.g. 64MiB, 256MiB): a table is held in "
                                     "files of about this size in key order, and a write's Spark tasks each work "
                                     "on about one file, so smaller files mean more parallelism and less memory "
                                     "per task, larger ones fewer files."),
        common.FormField(name="changes", label="Change files", required=False, default_value=OFF,
                         dropdown_field=common.DropdownField(dropdown_field=list(CHANGE_FORMATS)),
                         description="Also write the rows each version inserted, updated and deleted under "
                                     "<table>/changes/v<N>/: Arcion realtime CSV or JSON, or Parquet in the Delta "
                                     "change data feed style."),
        common.FormField(name="changes_image", label="Arcion images", required=False, default_value=FULL,
                         dropdown_field=common.DropdownField(dropdown_field=list(IMAGES)),
                         description="full: whole before and after rows; minimal: changed columns and the key, "
                                     "as Arcion's realtime examples."),
        common.FormField(name="changes_null_token", label="Arcion CSV null token", required=False,
                         text_field=text.PlainText, default_value="NULL",
                         description="Written unquoted for NULL; a string equal to it is always quoted."),
        common.FormField(name="changes_include_header", label="Arcion CSV header row", required=False,
                         toggle_field=common.ToggleField(), default_value="false"),
        common.FormField(name="changes_emit_noop_updates", label="Keep no-op updates", required=False,
                         toggle_field=common.ToggleField(), default_value="false",
                         description="Also write updates that change nothing but _fivetran_synced."),
        common.FormField(name=LAYOUT_FIELD, label="Version layout", required=False,
                         dropdown_field=common.DropdownField(dropdown_field=list(LAYOUTS)),
                         description="complete: every v<N>/ holds all its data files (any Parquet reader of the "
                                     "directory sees the table; on S3 the table is stored once per retained version). "
                                     "referencing: v<N>/ holds the files it wrote and its _manifest lists the others "
                                     "where they are (each file stored once; manifest readers only). Empty: "
                                     "referencing on S3, complete on a local disk."),
        common.FormField(name=VERSIONS_FIELD, label="Versions kept", required=False, text_field=text.PlainText,
                         default_value=str(KEEP_VERSIONS),
                         description="Older versions are removed once superseded for the minimum age."),
        common.FormField(name=MIN_AGE_FIELD, label="Minimum age of a removed version (seconds)", required=False,
                         text_field=text.PlainText, default_value=str(int(MIN_AGE_SECONDS)),
                         description="How long readers of a superseded version can still read its files."),
        common.FormField(name=TABLE_FORMATS_FIELD, label="Table formats", required=False, text_field=text.PlainText,
                         default_value="delta,iceberg",
                         description="Also make every version a version of a Delta Lake table (_delta_log/, with "
                                     "the change data feed when changes are on) and of an Iceberg table "
                                     "(metadata/) at the table's folder: delta,iceberg (default), delta, "
                                     "iceberg or none."),
        *records_form_fields(),
        *catalog_form_fields(),
    ]
    tests = [common.ConfigurationTest(name=TEST_STORAGE, label="Writing, reading and deleting a probe object"),
             common.ConfigurationTest(name=TEST_SPARK, label="Running a Spark job"),
             common.ConfigurationTest(name=TEST_CATALOG, label="Reading the catalog (when one is chosen)")]
    return common.ConfigurationFormResponse(schema_selection_supported=False, table_selection_supported=False,
                                            fields=fields, tests=tests)


def records_form_fields() -> list[common.FormField]:
    """`records_format`, then the delimited variant and its hint overrides, shown only for delimited."""
    def dropdown(name: str, label: str, values: list[str], description: str, default: str | None = None) \
            -> common.FormField:
        return common.FormField(name=name, label=label, required=False, default_value=default or values[0],
                                dropdown_field=common.DropdownField(dropdown_field=values), description=description)

    hint_fields = [dropdown(field_name, f"Hint {hint}",
                            [DEFAULT, *(NONE if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                                        for v in OVERRIDABLE[hint])],
                            f"The {hint} hint of the data files; default: the variant's.")
                   for hint, field_name in HINT_FIELDS.items()]
    delimited = [dropdown(VARIANT_FIELD, "Delimited variant", list(OFFERED_VARIANTS),
                          "records-mover's variant: its complete hints are written in _format_delimited. csv needs "
                          "the date and time hints overridden (its defaults lose the century and the seconds).",
                          DEFAULT_VARIANT),
                 *hint_fields]
    chooser = dropdown(RECORDS_FORMAT_FIELD, "Records format", list(RECORDS_FORMATS),
                       "The data files of tables created from now on (a table keeps the format it was created "
                       "with): parquet (Delta Lake and Iceberg metadata too), avro (Iceberg metadata too: read by "
                       "Iceberg's Java library, not pyiceberg or DuckDB) or delimited (neither).")
    return [chooser, common.FormField(
        name=f"{RECORDS_FORMAT_FIELD}_delimited", label="Delimited records", required=False,
        conditional_fields=common.ConditionalFields(
            condition=common.VisibilityCondition(condition_field=RECORDS_FORMAT_FIELD, string_value="delimited"),
            fields=delimited))]


def catalog_form_fields() -> list[common.FormField]:
    """The `catalog` dropdown, then each kind's fields as ConditionalFields shown only when that kind is chosen."""
    text = common.TextField

    def shown_for(kind: str, fields: list[common.FormField]) -> common.FormField:
        return common.FormField(name=f"{CATALOG_FIELD}_{kind}", label=f"{kind} catalog", required=False,
                                conditional_fields=common.ConditionalFields(
                                    condition=common.VisibilityCondition(condition_field=CATALOG_FIELD,
                                                                         string_value=kind),
                                    fields=fields))

    sql = [
        common.FormField(name=URI_FIELD, label="Catalog database (SQLAlchemy URL)", required=True,
                         text_field=text.Password,
                         description="Where Iceberg's JDBC catalog tables are: sqlite:////path/catalog.db on one "
                                     "machine, postgresql+psycopg://user:password@host:5432/db for a team. Spark, "
                                     "Trino and Flink read the same tables with their JDBC catalog."),
        common.FormField(name=NAME_FIELD, label="Catalog name", required=False, text_field=text.PlainText,
                         default_value=DEFAULT_CATALOG_NAME,
                         description="The catalog_name the entries are written under (a JDBC catalog reads the "
                                     "entries of its own name)."),
    ]
    glue = [
        common.FormField(name=GLUE_REGION_FIELD, label="Glue region", required=False, text_field=text.PlainText,
                         description="Empty: the S3 region."),
        common.FormField(name=GLUE_ENDPOINT_FIELD, label="Glue endpoint", required=False, text_field=text.PlainText,
                         description="Empty: AWS's endpoint for the region."),
        common.FormField(name=GLUE_KEY_FIELD, label="Glue access key id", required=False, text_field=text.PlainText,
                         description="Empty: the S3 credentials."),
        common.FormField(name=GLUE_SECRET_FIELD, label="Glue secret access key", required=False,
                         text_field=text.Password, description="Empty: the S3 secret."),
    ]
    rest = [
        common.FormField(name=REST_URI_FIELD, label="REST catalog URL", required=True, text_field=text.PlainText,
                         description="The Iceberg REST catalog's base URL (the one before /v1/), e.g. "
                                     "https://<account>.snowflakecomputing.com/polaris/api/catalog for Snowflake "
                                     "Open Catalog, http://lakekeeper:8181/catalog for Lakekeeper."),
        common.FormField(name=REST_WAREHOUSE_FIELD, label="Warehouse", required=False, text_field=text.PlainText,
                         description="The warehouse (catalog) to register the tables in, as the catalog names it."),
        common.FormField(name=REST_CLIENT_ID_FIELD, label="OAuth2 client id", required=False,
                         text_field=text.PlainText, description="With the client secret: OAuth2 client credentials."),
        common.FormField(name=REST_CLIENT_SECRET_FIELD, label="OAuth2 client secret", required=False,
                         text_field=text.Password),
        common.FormField(name=REST_TOKEN_FIELD, label="Bearer token", required=False, text_field=text.Password,
                         description="Instead of client credentials: a token sent as it is."),
        common.FormField(name=REST_SCOPE_FIELD, label="OAuth2 scope", required=False, text_field=text.PlainText,
                         description="Empty: catalog. Polaris and Snowflake Open Catalog: PRINCIPAL_ROLE:<role>."),
        common.FormField(name=REST_OAUTH_URI_FIELD, label="OAuth2 token endpoint", required=False,
                         text_field=text.PlainText, description="Empty: the catalog's <URL>/v1/oauth/tokens."),
    ]
    dropdown = common.FormField(
        name=CATALOG_FIELD, label="Catalog", required=False, default_value=NO_CATALOG,
        dropdown_field=common.DropdownField(dropdown_field=list(KINDS)),
        description="Register every table in a catalog and keep its entry on the latest version: none (default), "
                    "sql (Iceberg's JDBC catalog tables in SQLite or PostgreSQL), glue (AWS Glue) or rest (an "
                    "Iceberg REST catalog: Polaris, Snowflake Open Catalog, Lakekeeper, Gravitino, Unity).")
    return [dropdown, shown_for(SQL, sql), shown_for(GLUE, glue), shown_for(REST, rest)]


def known_fields() -> list[str]:
    return form_field_names(list(configuration_form().fields))


def unknown_fields_message(configuration: dict[str, str]) -> str | None:
    """A warning naming the configuration's fields that the form does not know (a typo such as `rooot`), or None."""
    known = known_fields()
    unknown = sorted(set(configuration) - set(known))
    if not unknown:
        return None
    return (f"configuration field(s) {', '.join(map(repr, unknown))} unknown and ignored; "
            f"the known fields are {', '.join(known)}")


def _looks_like_mistyped_s3(root: str) -> bool:
    """`s3:/x`, `s3//x`, `S3://x`: never meant as a local folder named `s3:`."""
    lowered = root.lower()
    return not root.startswith("s3://") and (lowered.startswith("s3:") or lowered.startswith("s3//"))


_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1 << 10, "mb": 1000 ** 2, "mib": 1 << 20, "gb": 1000 ** 3,
               "gib": 1 << 30}
MIN_TARGET_FILE_BYTES = 64 << 10  # smaller files cost more in per-file overhead than any task could save
MAX_TARGET_FILE_BYTES = 4 << 30


def format_size(size: int) -> str:
    return f"{size >> 20}MiB" if size % (1 << 20) == 0 else f"{size >> 10}KiB" if size % 1024 == 0 else str(size)


def target_file_bytes(configuration: dict[str, str]) -> int:
    """The `target_file_size` field in bytes ("64MiB", "256 MB", "1GiB", a plain number of bytes); a Task names
    a value it cannot read or one out of bounds."""
    text = (configuration.get("target_file_size") or "").strip()
    if not text:
        return TARGET_FILE_BYTES
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise UserActionRequired(f"configuration field 'target_file_size' is {text!r}; write a size such as 64MiB, "
                                 "256MB or 1GiB")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if not MIN_TARGET_FILE_BYTES <= size <= MAX_TARGET_FILE_BYTES:
        raise UserActionRequired(f"configuration field 'target_file_size' is {text!r}; it must be between "
                                 f"{format_size(MIN_TARGET_FILE_BYTES)} and {format_size(MAX_TARGET_FILE_BYTES)}")
    return size


def storage_spec(configuration: dict[str, str], options: ServerOptions) -> StorageSpec:
    root = (configuration.get("root") or "").strip() or options.root
    if _looks_like_mistyped_s3(root):
        raise UserActionRequired(f"root {root!r} looks like a mistyped S3 URL: write s3://bucket/prefix "
                                 "(lower case, two slashes)")
    if root.startswith("s3a://") or root.startswith("s3n://"):
        raise UserActionRequired(f"root {root!r}: use the s3:// scheme")
    if "://" in root and not root.startswith("s3://"):
        raise UserActionRequired(f"root {root!r}: only local paths and s3://bucket/prefix are supported")
    return StorageSpec(
        root=root,
        s3_endpoint=(configuration.get("s3_endpoint") or "").strip(),
        s3_region=(configuration.get("s3_region") or "").strip(),
        access_key_id=(configuration.get("aws_access_key_id") or "").strip(),
        secret_access_key=configuration.get("aws_secret_access_key") or "",
        s3_retry_attempts=options.s3_retry_attempts,
    )
