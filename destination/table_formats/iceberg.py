"""The Iceberg table format: every committed records version N is an Iceberg snapshot of the table rooted at the
table's folder `<T>/`, over the same data files (Parquet, or Avro for an `avro` table) where they were first written.

Layout (all under `<T>/metadata/`, readable without a catalog service):

- `v<N>.metadata.json`: the table metadata of records version N, created with `create_exclusive` (the commit
  point: a second writer of N finds it there, deletes what it wrote and does nothing). Its current snapshot has
  snapshot id N, summary `records-version` = N and timestamp = the records commit time.
- `version-hint.text`: the number N of the latest metadata file (moved forward only), the way pyiceberg's
  `StaticTable.from_metadata("<T>")` and DuckDB's `iceberg_scan('<T>')` find it. The metadata file can also be
  registered in a catalog (e.g. pyiceberg's SqlCatalog `register_table`).
- `snap-<N>-<uuid>.avro` (manifest list) and `<uuid>-m<N>.avro` (manifest): ONE manifest per snapshot, listing
  every live file (ADDED when new in N, EXISTING when carried from the previous snapshot) and the files N removed
  (DELETED). A commit reads one manifest list and one manifest, and the Parquet footers of the new files only (an
  Avro file's entry has its rows and size, no column statistics); when this process made the previous snapshot it
  only checks that those two are there (destination/table_formats/last_commits.py: it keeps the snapshot's live
  entries, used while the newest metadata file is still the one it wrote): its cost follows the live files and the
  change, never the number of versions (but the metadata file, read and parsed by each commit, holds every retained
  snapshot).

Retention: snapshots of records versions before `oldest_retained` are left out of the new metadata (time travel
to them fails, by id and by timestamp), and their metadata file, manifest list and manifest are deleted right
after the commit (each snapshot's manifest is its own: nothing retained shares them).

Schema: field ids are stable per column name; a type change Iceberg allows as a promotion (int → long, float →
double, decimal precision widened at the same scale) keeps the id, any other change (STRING → INT) gets a new id.
The ids come from the table definition (destination/model/field_ids.py), the same the data files carry as
`PARQUET:field_id`, so a reader mapping by id reads each column right. Each snapshot names its schema, so time travel
reads an old snapshot with the schema it was written with. Files written before the ids carry none: the name
mapping `schema.name-mapping.default` maps every column name to its current id. A limit that follows for those:
time travel through the latest metadata to a snapshot before a non-promotable type change reads that column as
null (the name now maps to the new id); that version's own metadata file (`metadata/v<K>.metadata.json`, kept while
K is retained) reads it with its values.

| Fivetran        | Parquet (data file)   | Iceberg            | notes                                          |
|-----------------|-----------------------|--------------------|------------------------------------------------|
| BOOLEAN         | boolean               | boolean            |                                                |
| SHORT           | int16 (INT32, INT(16))| int                | Iceberg has no 16-bit integer                  |
| INT / LONG      | int32 / int64         | int / long         |                                                |
| DECIMAL(p,s)    | decimal128            | decimal(p,s)       | p ≤ 38 (a scale above p: decimal(s,s))         |
| DECIMAL(p,s)    | decimal256            | (left out)         | 38 < p ≤ 76: Iceberg decimals stop at 38; the  |
|                 |                       |                    | column is not in the Iceberg schema, readers   |
|                 |                       |                    | skip it (listed in `fivetran.columns-left-out`)|
| FLOAT / DOUBLE  | float / double        | float / double     |                                                |
| NAIVE_DATE      | date32                | date               |                                                |
| NAIVE_DATETIME  | timestamp[us]         | timestamp          |                                                |
| UTC_DATETIME    | timestamp[us, UTC]    | timestamptz        |                                                |
| NAIVE_TIME      | time64[us]            | (left out)         | Spark refuses a table with a `time` field, and |
|                 |                       |                    | no other type reads TIME(MICROS) bytes         |
| BINARY          | binary                | binary             |                                                |
| STRING/JSON/XML | string                | string             | the Fivetran type is in the field's `doc`      |
| (internal)      | `_destination_meta`   | string             | the destination's per-row metadata             |

Why each type is what it is, reader by reader: docs/reference/types.md "Types in Delta Lake and Iceberg".

Every field is optional (our Parquet columns are nullable, and Iceberg identifier fields must be required), so the
primary key is not in `identifier-field-ids`: it is in each key field's `doc` ("STRING, primary key") and in the
table property `fivetran.primary-key` (a JSON list of names).
"""
from __future__ import annotations

import io
import json
import uuid
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Final

import pyarrow.parquet as pq
from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    MetricsMode,
    StatisticsCollector,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil, TableMetadataV2
from pyiceberg.table.name_mapping import MappedField, NameMapping, create_mapping_from_schema
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import MetadataLogEntry, Operation, Snapshot, SnapshotLogEntry, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from destination.model import field_ids
from destination.model.table_model import AVRO, DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import decimal_storage
from destination.on_disk import layout
from destination.records_formats.codec import format_of_name
from destination.runtime import logs
from destination.runtime.errors import DestinationError
from destination.runtime.pools import shared_pool
from destination.storage.base import Storage, StorageSpec
from destination.table_formats.last_commits import LastCommits
from destination.table_formats.version import ICEBERG, FormatLog, LakeFile, LakeVersion, left_out_text

METADATA = "metadata"
HINT = "version-hint.text"
RECORDS_VERSION = "records-version"  # snapshot summary: the records version the snapshot is
NAME_MAPPING = "schema.name-mapping.default"
PRIMARY_KEY = "fivetran.primary-key"
LEFT_OUT = field_ids.ICEBERG_LEFT_OUT
COMMENT = "comment"
MAX_ICEBERG_DECIMAL = 38
_AVRO_CODEC: Final = "deflate"
READ_THREADS = 8  # new files' footers and kept files' checks at once, for all Iceberg commits of the process
PREFETCHED = 32  # new files whose footers a commit reads ahead
_LEFT_OUT_ID = -1  # the statistics' stand-in id of a Parquet column the Iceberg schema leaves out
_SIMPLE_TYPES: dict[str, IcebergType] = {
    "BOOLEAN": BooleanType(), "SHORT": IntegerType(), "INT": IntegerType(), "LONG": LongType(),
    "FLOAT": FloatType(), "DOUBLE": DoubleType(), "NAIVE_DATE": DateType(), "NAIVE_DATETIME": TimestampType(),
    "UTC_DATETIME": TimestamptzType(), "BINARY": BinaryType(), "STRING": StringType(),
    "JSON": StringType(), "XML": StringType(),
}


def iceberg_type(col: ColumnDef) -> IcebergType | None:
    """The column's Iceberg type; None: none that the readers accept over its Parquet bytes (a decimal of more than
    38 digits; a time of day, module doc "Types")."""
    if col.type == "DECIMAL":
        precision, scale = decimal_storage(col)
        return DecimalType(precision, scale) if precision <= MAX_ICEBERG_DECIMAL else None
    return _SIMPLE_TYPES.get(col.type)


def iceberg_schema(table: TableDef) -> Schema:
    """The table's Iceberg schema, as its metadata files write it (the catalogs list its columns)."""
    return _schema_for(table, 0).schema


def left_out_comment(table: TableDef) -> str | None:
    """The table's `comment` (what Spark's DESCRIBE shows) naming the columns left out of the schema; None: none."""
    return left_out_text(table, "Iceberg", iceberg_type)


def file_io_properties(spec: StorageSpec) -> dict[str, str]:
    """pyiceberg FileIO properties reaching the store of `spec` (for readers: `StaticTable.from_metadata(...,
    properties=...)`, a catalog's properties); empty for a local root."""
    if not spec.is_s3:
        return {}
    props = {"s3.access-key-id": spec.access_key_id, "s3.secret-access-key": spec.secret_access_key,
             "s3.force-virtual-addressing": "false"}
    if spec.s3_endpoint:
        props["s3.endpoint"] = spec.s3_endpoint
    if spec.s3_region:
        props["s3.region"] = spec.s3_region
    return {k: v for k, v in props.items() if v}


class IcebergFormat:
    """The Iceberg writer of the TableFormat protocol (destination/table_formats/version.py)."""

    name = ICEBERG
    folders: tuple[str, ...] = (METADATA,)
    reads_change_data: bool = False

    def log(self, storage: Storage, prefix: str) -> FormatLog:
        """The `metadata/v<N>.metadata.json` files; a hint left behind by a crash between the commit and the
        hint's move is moved forward here (not read when the newest file is the one this process committed last:
        it moved the hint there before keeping that commit)."""
        versions = _metadata_versions(storage, prefix)
        if versions and _LAST_COMMITS.unverified(storage.url(prefix), versions[-1]) is None:
            _move_hint(storage, prefix, versions[-1])
        return FormatLog(tuple(versions), ())

    def commit(self, storage: Storage, prefix: str, version: LakeVersion, oldest_retained: int,
               log: FormatLog | None = None) -> None:
        versions = list(log.versions) if log is not None else _metadata_versions(storage, prefix)
        # a log taken for this commit left the hint at its newest file (`log`)
        self.commit_on(storage, prefix, version, oldest_retained, versions,
                       hint=versions[-1] if log is not None and versions else None)

    def commit_on(self, storage: Storage, prefix: str, version: LakeVersion, oldest_retained: int,
                  versions: list[int], hint: int | None = None) -> None:
        """`commit` on top of the metadata files `versions` (as listed before: another writer may have committed
        since); `hint`: the number the hint holds, when known (else it is read before it is moved)."""
        if versions and versions[-1] >= version.version:
            return  # there already (or a newer one: this version was caught up by another writer)
        io_ = StorageFileIO(storage, gather=True)
        table = storage.url(prefix)
        reads = shared_pool("iceberg-reads", READ_THREADS)
        candidate = _LAST_COMMITS.unverified(table, versions[-1]) if versions else None
        there = reads.submit(storage.all_exist, candidate.needs) if candidate is not None else None
        footers = _Footers(reads, storage, prefix, version)  # beside the reads of the previous snapshot below
        try:
            kept = previous = None
            if versions:
                newest = _metadata_path(prefix, versions[-1])
                body = storage.read_bytes(newest)
                previous = _parse_metadata(storage.url(newest), body)
                kept = _LAST_COMMITS.state(table, versions[-1], lambda: body)
                if kept is not None and (kept is not candidate or there is None or not there.result()):
                    kept = None  # its manifest list or manifest is gone (another process deleting the folder): read it
            commit = _Commit(storage, prefix, io_, version, previous, oldest_retained, kept.live if kept else None,
                             footers)
            metadata = commit.build()
        finally:
            footers.cancel()
        data = metadata.model_dump_json(exclude_none=True).encode("utf-8")
        storage.write_all(io_.gathered)  # the manifest and the manifest list, side by side
        storage.sync_directories([f"{prefix}/{METADATA}", prefix])  # its manifests durable before it (a local disk)
        if not storage.create_exclusive(_metadata_path(prefix, version.version), data):
            _LAST_COMMITS.forget(table)
            for path in commit.written:  # another writer committed this version first: its files stand
                storage.delete(path)
            return
        _move_hint(storage, prefix, version.version, hint)
        _LAST_COMMITS.keep(table, version.version, data, _Kept(commit.live, tuple(commit.written)))
        commit.delete_retired(versions)
        logs.info(f"iceberg: version {version.version} committed ({len(version.files)} live files, "
                  f"{commit.added} added, {commit.removed} removed, {len(commit.retired)} snapshots retired)")


def table_location(storage: Storage, prefix: str) -> str:
    return storage.url(prefix).rstrip("/")


def _metadata_path(prefix: str, version: int) -> str:
    return f"{prefix}/{METADATA}/v{version}.metadata.json"


def _metadata_versions(storage: Storage, prefix: str) -> list[int]:
    """Records versions with a metadata file, ascending."""
    found: list[int] = []
    for path in storage.list_starting_with(f"{prefix}/{METADATA}/v"):
        name = path.rsplit("/", 1)[-1]
        number = name[1:-len(".metadata.json")] if name.endswith(".metadata.json") else ""
        if number.isdigit():
            found.append(int(number))
    return sorted(found)


def newest_metadata_version(storage: Storage, prefix: str) -> int | None:
    """The newest records version with a metadata file (a listing: readers follow the hint instead)."""
    versions = _metadata_versions(storage, prefix)
    return versions[-1] if versions else None


def _parse_metadata(url: str, body: bytes) -> TableMetadataV2:
    try:
        metadata = TableMetadataUtil.parse_raw(body.decode("utf-8"))
    except ValueError as exc:
        raise DestinationError(f"Iceberg metadata {url} cannot be read: {exc}") from exc
    if not isinstance(metadata, TableMetadataV2):
        raise DestinationError(f"Iceberg metadata {url} is format version {metadata.format_version}, "
                               "not the 2 this destination writes")
    return metadata


@dataclass(frozen=True)
class _Kept:
    """The live manifest entries of the snapshot this process committed last to a table, as pyiceberg would read them
    back (sequence numbers and snapshot ids filled in). They are used while the files a reader of the snapshot opens
    are there (`needs`: the manifest list and manifest), as reading them back would fail otherwise: a process deleting
    the folder (a format move, a rebuild) removes them before the metadata file. The metadata itself is not kept:
    parsed, it takes about 6 KB per retained snapshot (its file is read for the comparison anyway)."""

    live: list[ManifestEntry]
    needs: tuple[str, ...]

    @property
    def statistics(self) -> int:
        """What the entries hold: each file's statistics are a few values per column."""
        return sum(len(entry.data_file.value_counts or {}) + 1 for entry in self.live)


# instead of the manifest list and manifest read back by pyiceberg (about 3 ms of CPU per small sync here, two
# requests one after another on S3); an entry's statistics take about 1 KB per column, so the kept entries are
# bounded by their columns in all (about 50 MB)
_LAST_COMMITS: LastCommits[_Kept] = LastCommits(weight=lambda kept: kept.statistics, max_weight=50_000)


def _move_hint(storage: Storage, prefix: str, version: int, known: int | None = None) -> None:
    """Point the hint at `version` unless it points at a newer one already (`known`: the number it holds, when
    known; else it is read)."""
    path = f"{prefix}/{METADATA}/{HINT}"
    if known is None:
        try:
            current = storage.read_bytes(path).decode("utf-8").strip()
        except FileNotFoundError:
            current = ""
        known = int(current) if current.isdigit() else None
    if known is None or known < version:
        storage.write_bytes(path, str(version).encode("utf-8"))


class _Footers:
    """The Parquet footers a commit's new entries take their statistics from. Those of the first PREFETCHED files
    in the version's own folder (its new files) are read side by side in `pool` as the commit starts, while it reads
    the previous snapshot: on S3 one round trip's time beside the others, not one per file after them. Any other
    is read when asked for (a version rewriting thousands of files holds a few footers at a time, not all)."""

    def __init__(self, pool: Executor, storage: Storage, prefix: str, version: LakeVersion) -> None:
        self._storage = storage
        own = f"{layout.version_dir_name(version.version)}/"
        new = [f for f in version.files if f.path.startswith(own) and format_of_name(f.path) != AVRO]
        self._reading: dict[str, Future[pq.FileMetaData]] = {
            storage.url(f"{prefix}/{f.path}"): pool.submit(self._read, f"{prefix}/{f.path}", f.bytes)
            for f in new[:PREFETCHED]}

    def footer(self, path: str, url: str, size: int) -> pq.FileMetaData:
        reading = self._reading.pop(url, None)
        return reading.result() if reading is not None else self._read(path, size)

    def cancel(self) -> None:
        """The reads not started yet are dropped (the commit ended, or failed)."""
        for reading in self._reading.values():
            reading.cancel()
        self._reading.clear()

    def _read(self, path: str, size: int) -> pq.FileMetaData:
        with self._storage.open_input(path, size) as source:
            return pq.read_metadata(source)


@dataclass
class _FieldPlan:
    schema: Schema
    last_column_id: int
    left_out: dict[str, int]  # the columns Iceberg has no type for, and the ids the name mapping gives them


def _schema_for(table: TableDef, schema_id: int) -> _FieldPlan:
    """The Iceberg schema of `table`, with the field ids its data files carry (destination/model/field_ids.py). A column
    left out of the schema keeps its id in the name mapping (DuckDB misreads the columns after an unmapped one)."""
    assigned = field_ids.assign(table)
    ids = {name: field_id for name, field_id, _ in assigned.field_ids}
    fields: list[NestedField] = []
    left_out: dict[str, int] = {}
    for col in [*table.columns, ColumnDef(DESTINATION_META, "STRING")]:
        field_type = iceberg_type(col)
        if field_type is None:
            left_out[col.name] = ids[col.name]
            continue
        doc = "destination row metadata" if col.name == DESTINATION_META else col.ddl()
        fields.append(NestedField(ids[col.name], col.name, field_type, required=False,
                                  doc=doc + (", primary key" if col.primary_key else "")))
    return _FieldPlan(Schema(*fields, schema_id=schema_id), assigned.last_field_id, left_out)


def _name_mapping(schema: Schema, left_out: dict[str, int], older: list[Schema]) -> str:
    """Every column name of the data files a retained snapshot lists: the current schema's, the columns left out,
    and columns of older retained schemas since dropped (a reader mapping an old file fails on a name the mapping
    lacks), newest schema first."""
    mapped = create_mapping_from_schema(schema)
    ids = dict(left_out)
    current = {f.name for f in schema.fields}
    for old in sorted(older, key=lambda s: -s.schema_id):
        for f in old.fields:
            if f.name not in current and f.name not in ids:
                ids[f.name] = f.field_id
    extra = [MappedField.model_validate({"field-id": field_id, "names": [name]}) for name, field_id in ids.items()]
    return NameMapping([*mapped, *extra]).model_dump_json()


class _Commit:
    """One version's snapshot on top of the previous metadata: the files it writes (manifest, manifest list), the
    metadata it commits, and what it retires."""

    def __init__(self, storage: Storage, prefix: str, io_: StorageFileIO, version: LakeVersion,
                 previous: TableMetadataV2 | None, oldest_retained: int, previous_live: list[ManifestEntry] | None,
                 footers: _Footers) -> None:
        self.storage, self.prefix, self.io, self.version = storage, prefix, io_, version
        self.footers = footers
        self.previous, self.oldest_retained = previous, oldest_retained
        self.previous_live = previous_live  # the previous snapshot's live entries when known; None: read them
        self.live: list[ManifestEntry] = []  # this snapshot's live entries, as a reader of its manifest finds them
        self.location = table_location(storage, prefix)
        self.written: list[str] = []  # storage paths this commit wrote before its commit point
        self.retired: list[Snapshot] = []
        self.added = self.removed = 0

    def build(self) -> TableMetadataV2:
        prev = self.previous
        number = self.version.version
        timestamp_ms = int(self.version.committed_at * 1000)
        current_schema = prev.schema() if prev else None
        schema_ids = [s.schema_id for s in prev.schemas] if prev else []
        plan = _schema_for(self.version.table, max(schema_ids, default=-1) + 1)
        schema = plan.schema
        if current_schema is not None and current_schema.fields == schema.fields:
            schema = current_schema
        sequence_number = (prev.last_sequence_number if prev else 0) + 1
        parent = prev.current_snapshot() if prev else None
        manifests = self._write_manifests(schema, parent, sequence_number)
        manifest_list = self._write_manifest_list(manifests, parent, sequence_number)
        snapshot = Snapshot.model_validate({
            "snapshot-id": number, "parent-snapshot-id": parent.snapshot_id if parent else None,
            "sequence-number": sequence_number, "timestamp-ms": timestamp_ms, "manifest-list": manifest_list,
            "summary": self._summary(manifests), "schema-id": schema.schema_id})
        kept = [s for s in (prev.snapshots if prev else []) if _records_version(s) >= self.oldest_retained]
        self.retired = [s for s in (prev.snapshots if prev else []) if _records_version(s) < self.oldest_retained]
        kept_ids = {s.snapshot_id for s in kept}
        schemas = [s for s in (prev.schemas if prev else [])
                   if s.schema_id in {k.schema_id for k in kept} and s.schema_id != schema.schema_id]
        properties = {
            **(dict(prev.properties) if prev else {}),
            NAME_MAPPING: _name_mapping(schema, plan.left_out, schemas),
            PRIMARY_KEY: json.dumps([c.name for c in self.version.table.columns if c.primary_key]),
            LEFT_OUT: json.dumps(plan.left_out),
        }
        properties.pop(COMMENT, None)
        comment = left_out_comment(self.version.table)
        if comment is not None:
            properties[COMMENT] = comment
        metadata_log = [e for e in (prev.metadata_log if prev else [])
                        if _version_of_metadata_file(e.metadata_file) >= self.oldest_retained]
        if prev and parent is not None and _records_version(parent) >= self.oldest_retained:
            metadata_log.append(MetadataLogEntry.model_validate({
                "metadata-file": self._url(_metadata_path(self.prefix, _records_version(parent))),
                "timestamp-ms": prev.last_updated_ms}))
        snapshot_log = [*(e for e in (prev.snapshot_log if prev else []) if e.snapshot_id in kept_ids),
                        SnapshotLogEntry.model_validate({"snapshot-id": number, "timestamp-ms": timestamp_ms})]
        return TableMetadataV2.model_validate({
            "location": self.location,
            "table-uuid": prev.table_uuid if prev else uuid.uuid5(uuid.NAMESPACE_URL, self.location),
            "last-updated-ms": max(timestamp_ms, prev.last_updated_ms if prev else 0),
            "last-column-id": max(plan.last_column_id, prev.last_column_id if prev else 0),
            "schemas": [*schemas, schema], "current-schema-id": schema.schema_id,
            "partition-specs": [UNPARTITIONED_PARTITION_SPEC], "default-spec-id": UNPARTITIONED_PARTITION_SPEC.spec_id,
            "last-partition-id": 999, "properties": properties, "current-snapshot-id": number,
            "snapshots": [*kept, snapshot], "snapshot-log": snapshot_log, "metadata-log": metadata_log,
            "sort-orders": [UNSORTED_SORT_ORDER], "default-sort-order-id": UNSORTED_SORT_ORDER.order_id,
            "refs": {MAIN_BRANCH: SnapshotRef.model_validate({"snapshot-id": number, "type": SnapshotRefType.BRANCH})},
            "last-sequence-number": sequence_number,
        })

    def _url(self, path: str) -> str:
        return self.storage.url(path)

    def _write_manifests(self, schema: Schema, parent: Snapshot | None, sequence_number: int) -> list[ManifestFile]:
        """One manifest: the parent's live entries this version keeps (EXISTING) or removed (DELETED), and the
        version's new files (ADDED)."""
        wanted = {self._url(f"{self.prefix}/{f.path}"): f for f in self.version.files}
        carried = self.previous_live if self.previous_live is not None else [
            e for m in (parent.manifests(self.io) if parent else [])
            for e in m.fetch_manifest_entry(self.io, discard_deleted=True)]
        carried_urls = {e.data_file.file_path for e in carried}
        new = [url for url in wanted if url not in carried_urls]
        if not carried and not new:
            return []
        path = f"{self.prefix}/{METADATA}/{uuid.uuid4()}-m{self.version.version}.avro"
        output = self.io.new_output(self._url(path))
        number = self.version.version
        with write_manifest(2, UNPARTITIONED_PARTITION_SPEC, schema, output, number, _AVRO_CODEC) as writer:
            for entry in carried:
                if entry.data_file.file_path in wanted:
                    writer.existing(entry)
                    self.live.append(ManifestEntry.from_args(
                        status=ManifestEntryStatus.EXISTING, snapshot_id=entry.snapshot_id,
                        sequence_number=entry.sequence_number, file_sequence_number=entry.file_sequence_number,
                        data_file=entry.data_file))
                else:
                    writer.delete(entry)
                    self.removed += 1
            for url in new:
                data_file = self._data_file(schema, url, wanted[url])
                data_file.spec_id = UNPARTITIONED_PARTITION_SPEC.spec_id  # a reader sets it from the manifest
                writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=number,
                                                   data_file=data_file))
                # an ADDED entry's sequence numbers are the manifest's (inherited when read)
                self.live.append(ManifestEntry.from_args(
                    status=ManifestEntryStatus.ADDED, snapshot_id=number, sequence_number=sequence_number,
                    file_sequence_number=sequence_number, data_file=data_file))
                self.added += 1
        self.written.append(path)
        return [writer.to_manifest_file()]

    def _data_file(self, schema: Schema, url: str, file: LakeFile) -> DataFile:
        """A new file's entry: a Parquet file's statistics from its footer (columns mapped by name); an Avro file's
        (the `avro` records format) its rows and size only (Avro keeps no column statistics: readers scan it)."""
        if format_of_name(url) == AVRO:
            return DataFile.from_args(
                content=DataFileContent.DATA, file_path=url, file_format=FileFormat.AVRO, partition=Record(),
                record_count=file.rows, file_size_in_bytes=file.bytes, sort_order_id=None,
                equality_ids=None, key_metadata=None)
        footer = self.footers.footer(self.io.path_of(url), url, file.bytes)
        by_path = parquet_path_to_id_mapping(schema)
        columns = {footer.schema.column(i).path for i in range(footer.num_columns)}
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=_stats_plan(schema, collect=footer.num_rows > 0),
            parquet_column_mapping={path: by_path.get(path, _LEFT_OUT_ID) for path in columns})
        stats.column_sizes.pop(_LEFT_OUT_ID, None)
        return DataFile.from_args(
            content=DataFileContent.DATA, file_path=url, file_format=FileFormat.PARQUET,
            partition=stats.partition(UNPARTITIONED_PARTITION_SPEC, schema), file_size_in_bytes=file.bytes,
            sort_order_id=None, equality_ids=None, key_metadata=None,
            **stats.to_serialized_dict())

    def _write_manifest_list(self, manifests: list[ManifestFile], parent: Snapshot | None,
                             sequence_number: int) -> str:
        number = self.version.version
        path = f"{self.prefix}/{METADATA}/snap-{number}-{uuid.uuid4()}.avro"
        url = self._url(path)
        with write_manifest_list(2, self.io.new_output(url), number, parent.snapshot_id if parent else None,
                                 sequence_number, _AVRO_CODEC) as writer:
            writer.add_manifests(manifests)
        self.written.append(path)
        return url

    def _summary(self, manifests: list[ManifestFile]) -> Summary:
        files = self.version.files
        operation = (Operation.APPEND if not self.removed else
                     Operation.DELETE if not self.added else Operation.OVERWRITE)
        deleted_rows = sum(m.deleted_rows_count or 0 for m in manifests)
        added_rows = sum(m.added_rows_count or 0 for m in manifests)
        return Summary(operation, **{
            RECORDS_VERSION: str(self.version.version), "records-operation": self.version.operation,
            "added-data-files": str(self.added), "deleted-data-files": str(self.removed),
            "added-records": str(added_rows), "deleted-records": str(deleted_rows),
            "total-data-files": str(len(files)), "total-records": str(sum(f.rows for f in files)),
            "total-files-size": str(sum(f.bytes for f in files)), "total-delete-files": "0",
            "total-position-deletes": "0", "total-equality-deletes": "0"})

    def delete_retired(self, metadata_versions: list[int]) -> None:
        """After the commit: the retired snapshots' manifest lists and manifests, and the metadata files of
        versions before `oldest_retained` (a crash's leftovers included)."""
        for snapshot in self.retired:
            try:
                manifests = snapshot.manifests(self.io)
            except FileNotFoundError:
                manifests = []
            for manifest in manifests:
                self.storage.delete(self.io.path_of(manifest.manifest_path))
            self.storage.delete(self.io.path_of(snapshot.manifest_list))
        for number in metadata_versions:
            if number < self.oldest_retained:
                self.storage.delete(_metadata_path(self.prefix, number))


def _stats_plan(schema: Schema, collect: bool = True) -> dict[int, StatisticsCollector]:
    """pyiceberg's statistics of every schema field, and none of the Parquet columns left out of the schema.
    `collect` False (a zero-row file, whose footer holds no statistics): none at all, rather than pyiceberg's
    warning per column that they are missing."""
    plan = compute_statistics_plan(schema, {})
    if not collect:
        plan = {field_id: StatisticsCollector(field_id=c.field_id, iceberg_type=c.iceberg_type,
                                              mode=MetricsMode(MetricModeTypes.NONE), column_name=c.column_name)
                for field_id, c in plan.items()}
    plan[_LEFT_OUT_ID] = StatisticsCollector(field_id=_LEFT_OUT_ID, iceberg_type=StringType(),
                                             mode=MetricsMode(MetricModeTypes.NONE), column_name="")
    return plan


def _records_version(snapshot: Snapshot) -> int:
    value = snapshot.summary.get(RECORDS_VERSION) if snapshot.summary else None
    return int(value) if value is not None else snapshot.snapshot_id


def _version_of_metadata_file(url: str) -> int:
    name = url.rsplit("/", 1)[-1]
    number = name[1:-len(".metadata.json")] if name.startswith("v") and name.endswith(".metadata.json") else ""
    return int(number) if number.isdigit() else -1


class StorageFileIO(FileIO):
    """pyiceberg's FileIO over our Storage, for the manifests this writer reads and writes: absolute URLs below
    the storage root map to its relative paths. `gather`: what is written is kept in `gathered` (path, bytes), for
    the caller to store side by side, instead of stored as each file closes."""

    def __init__(self, storage: Storage, gather: bool = False) -> None:
        super().__init__()
        self.storage = storage
        self.root = storage.url("").rstrip("/") + "/"
        self.gather = gather
        self.gathered: list[tuple[str, bytes]] = []

    def path_of(self, location: str) -> str:
        if not location.startswith(self.root):
            raise DestinationError(f"Iceberg file {location} is outside the storage root {self.root}")
        return location[len(self.root):]

    def new_input(self, location: str) -> InputFile:
        return _StorageInput(self, location)

    def new_output(self, location: str) -> OutputFile:
        return _StorageOutput(self, location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.storage.delete(self.path_of(location if isinstance(location, str) else location.location))


class _StorageInput(InputFile):
    def __init__(self, file_io: StorageFileIO, location: str) -> None:
        super().__init__(location)
        self.file_io = file_io

    def __len__(self) -> int:
        return self.file_io.storage.size(self.file_io.path_of(self.location))

    def exists(self) -> bool:
        return self.file_io.storage.exists(self.file_io.path_of(self.location))

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self.file_io.storage.read_bytes(self.file_io.path_of(self.location)))


class _Buffer(io.BytesIO):
    """Bytes written to an output: stored as one object when closed."""

    def __init__(self, output: _StorageOutput) -> None:
        super().__init__()
        self.output = output

    def close(self) -> None:
        if not self.closed:
            data = self.getvalue()
            file_io = self.output.file_io
            if file_io.gather:
                file_io.gathered.append((file_io.path_of(self.output.location), data))
            else:
                file_io.storage.write_bytes(file_io.path_of(self.output.location), data)
            self.output.length = len(data)
        super().close()


class _StorageOutput(OutputFile):
    def __init__(self, file_io: StorageFileIO, location: str) -> None:
        super().__init__(location)
        self.file_io = file_io
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def exists(self) -> bool:
        return self.file_io.storage.exists(self.file_io.path_of(self.location))

    def to_input_file(self) -> InputFile:
        return _StorageInput(self.file_io, self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        return _Buffer(self)

