"""Delta Lake over a table's records versions: `<T>/_delta_log/`, one Delta commit per records version, Delta
version N = records version N, the data files referenced where they were first written (paths relative to `<T>/`).

Who writes what. Our code writes each commit JSON (commitInfo, protocol and metaData when they change, add, remove,
cdc) through `Storage.create_exclusive`, so the commit point is create-if-absent on both backends: two writers
committing version N converge (the loser finds it and does nothing). delta-rs (`deltalake`) reads the table state
it diffs against (unless this process wrote the log's newest commit: `_LastCommits`) and writes the checkpoints.
deltalake 1.6.6's `create_write_transaction` was checked and not used for commits: it picks the version itself (read
version + 1), so it can neither write version N after a gap nor start a log at version K > 1, it has no `cdc`
action, and its commit is delta-rs's own put-if-absent, not ours.

Log shape:
- protocol: reader 3 / writer 7, readerFeatures [timestampNtz], writerFeatures [timestampNtz, changeDataFeed],
  written once and never changed (a feature may be supported without being used). delta-rs, DuckDB's delta
  extension (delta-kernel-rs) and polars read it.
- metaData: whenever the schema or the configuration changes (first entry, AlterTable, change feed turned on or
  off). Each column's Fivetran type and key flag are field metadata (`fivetran.type`, e.g. "DECIMAL(38,10)";
  `fivetran.primary_key`), the key columns also the table property `fivetran.primary_key` (a JSON list).
- checkpoints (`delta.checkpointInterval` = 10): at every version N divisible by 10, so a reader of the latest
  version replays at most 9 commits whatever the history's length; and at a table's first entry, so a log that
  starts at K > 1 (records versions retired before the formats were on) needs no commits 0..K-1 for any reader.
- a gap (the format's entry is M, the version N > M + 1: versions retired before they were caught up): version N
  is diffed against M's live files; Delta versions must be contiguous (delta-kernel refuses a log with a hole), so
  M+1..N-1 are written as commits changing nothing, and everything before N is then retired as below: the format
  does not offer versions it cannot show as they were.
- retention (`oldest_retained`): a checkpoint at the oldest retained Delta version, then every commit, checkpoint
  and checksum file before it is deleted. Older versions then fail to load ("No files in log segment" from
  delta-kernel), never reading missing files; `_last_checkpoint` keeps naming the newest checkpoint.
- commit timestamps: `commitInfo.timestamp` = the records commit time. delta-rs, delta-kernel and polars resolve a
  timestamp to a version by the commit file's modification time (delta-rs 1.6.6 does not read in-commit
  timestamps), which is when this writer committed it: the records commit time plus the sync delay, or the time of
  a catch-up.
- change data feed: `delta.enableChangeDataFeed` = true while the table's change files are on; a version's change
  files (`version.change_data`) become `cdc` actions; a version without them (a rewrite as a snapshot) has readers
  derive its changes from its add and remove actions, which carry their sizes for that.

Types (Fivetran → Delta schema). Delta has no time-of-day type and its decimals stop at 38 digits; declaring such a
column as another type was tried and fails or alters values (time64 as `long`: delta-rs reads the microseconds,
polars and DuckDB refuse the file; as `timestamp_ntz`: all three refuse; decimal256 as `string`: DuckDB returns a
float's digits, polars refuses; as decimal(38,s): every reader fails). So those columns are left out of the Delta
schema (readers skip Parquet columns the schema does not name), listed in the table property
`fivetran.columns_not_in_delta` (JSON list of "name TYPE") and named in `metaData.description`; read them from the
records directories.

| Fivetran         | Delta                 | deltalake (Arrow)   | DuckDB          | polars           |
|------------------|-----------------------|---------------------|-----------------|------------------|
| BOOLEAN          | boolean               | bool                | BOOLEAN         | Boolean          |
| SHORT/INT/LONG   | short/integer/long    | int16/int32/int64   | SMALLINT/INTEGER/BIGINT | Int16/Int32/Int64 |
| DECIMAL(p≤38,s)  | decimal(p,s)          | decimal128(p,s)     | DECIMAL(p,s)    | Decimal(p,s)     |
| DECIMAL(p>38,s)  | (not in the schema)   |                     |                 |                  |
| FLOAT / DOUBLE   | float / double        | float32 / float64   | FLOAT / DOUBLE  | Float32/Float64  |
| NAIVE_DATE       | date                  | date32              | DATE            | Date             |
| NAIVE_DATETIME   | timestamp_ntz         | timestamp[us]       | TIMESTAMP       | Datetime(us)     |
| UTC_DATETIME     | timestamp             | timestamp[us, UTC]  | TIMESTAMP WITH TIME ZONE | Datetime(us, UTC) |
| NAIVE_TIME       | (not in the schema)   |                     |                 |                  |
| BINARY           | binary                | binary              | BLOB            | Binary           |
| STRING/JSON/XML  | string                | string              | VARCHAR         | String           |
| _destination_meta| string                | string              | VARCHAR         | String           |

S3: `delta_storage_options` gives delta-rs the endpoint, region, credentials and plain http when the endpoint is
http. delta-rs writes only checkpoints and `_last_checkpoint` (plain puts of content that is the same whoever
writes it); commits go through our Storage.
"""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from destination.model.table_model import DESTINATION_META, ColumnDef, TableDef
from destination.model.type_mapping import decimal_storage
from destination.on_disk.layout import parse_version_dir
from destination.runtime.errors import StorageError, scrub
from destination.storage.base import Storage, StorageSpec
from destination.table_formats.last_commits import LastCommits
from destination.table_formats.version import DELTA, FormatLog, LakeVersion, left_out_text

LOG = "_delta_log"
CHANGE_DATA = "_change_data"  # the change data files the `cdc` actions name: _change_data/v<N>/ per version
CHECKPOINT_INTERVAL = 10
PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz", "changeDataFeed"]}
_COMMIT = re.compile(r"^(\d{20})\.json$")
_VERSIONED = re.compile(r"^(\d{20})\..+$")  # commits, checkpoints (single or multi-part), checksums
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.")  # single- and multi-part checkpoints
_SIMPLE_TYPES = {
    "BOOLEAN": "boolean", "SHORT": "short", "INT": "integer", "LONG": "long", "FLOAT": "float", "DOUBLE": "double",
    "NAIVE_DATE": "date", "NAIVE_DATETIME": "timestamp_ntz", "UTC_DATETIME": "timestamp", "BINARY": "binary",
    "STRING": "string", "JSON": "string", "XML": "string",
}
MAX_DELTA_DECIMAL = 38


def delta_type(column: ColumnDef) -> str | None:
    """The Delta type of a column; None: Delta has none that holds its values (module doc, "Types")."""
    if column.type == "DECIMAL":
        precision, scale = decimal_storage(column)
        return f"decimal({precision},{scale})" if precision <= MAX_DELTA_DECIMAL else None
    return _SIMPLE_TYPES.get(column.type)


def schema_json(table: TableDef) -> dict[str, Any]:
    """The Delta schema: the columns Delta can hold, in order, then `_destination_meta`."""
    fields: list[dict[str, Any]] = []
    for column in table.columns:
        kind = delta_type(column)
        if kind is not None:
            fields.append({"name": column.name, "type": kind, "nullable": True,
                           "metadata": {"fivetran.type": column.ddl(), "fivetran.primary_key": column.primary_key}})
    fields.append({"name": DESTINATION_META, "type": "string", "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def configuration(table: TableDef, change_feed: bool) -> dict[str, str]:
    """The table properties of a version's metaData."""
    config = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
              "fivetran.primary_key": json.dumps([c.name for c in table.columns if c.primary_key])}
    left_out = [f"{c.name} {c.ddl()}" for c in table.columns if delta_type(c) is None]
    if left_out:
        config["fivetran.columns_not_in_delta"] = json.dumps(left_out)
    if change_feed:
        config["delta.enableChangeDataFeed"] = "true"
    return config


def _left_out_description(table: TableDef) -> str | None:
    return left_out_text(table, "Delta", delta_type)


def delta_storage_options(spec: StorageSpec) -> dict[str, str]:
    """How delta-rs reaches the table: nothing for a local root; for S3 the endpoint, region and credentials."""
    if not spec.is_s3:
        return {}
    options = {"AWS_REGION": spec.s3_region or "us-east-1"}
    if spec.s3_endpoint:
        options["AWS_ENDPOINT_URL"] = spec.s3_endpoint
        if spec.s3_endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    if spec.access_key_id:
        options["AWS_ACCESS_KEY_ID"] = spec.access_key_id
        options["AWS_SECRET_ACCESS_KEY"] = spec.secret_access_key
    return options


@dataclass(frozen=True)
class _State:
    """What the format's latest entry holds, as the next commit diffs against it."""

    version: int
    files: dict[str, int]  # path relative to the table's folder -> bytes
    schema: dict[str, Any]
    configuration: dict[str, str]
    table_id: str


class DeltaFormat:
    """The Delta Lake writer of the TableFormat protocol (destination/table_formats/version.py)."""

    name = DELTA
    folders: tuple[str, ...] = (LOG, CHANGE_DATA)
    reads_change_data: bool = True

    def log(self, storage: Storage, prefix: str) -> FormatLog:
        names = _log_names(storage, prefix)
        return FormatLog(tuple(_commit_versions(names)), tuple(names))

    def commit(self, storage: Storage, prefix: str, version: LakeVersion, oldest_retained: int,
               log: FormatLog | None = None) -> None:
        listed = self.log(storage, prefix) if log is None else log
        names, commits = list(listed.names), list(listed.versions)
        number = version.version
        if not commits or commits[-1] < number:  # else: the log holds it already
            previous = _kept_state(storage, prefix, commits[-1], names) if commits else None
            if commits and previous is None:
                previous = _load_state(storage, prefix, commits[-1])
            fillers = range(commits[-1] + 1, number) if commits else range(0)
            for filler in fillers:
                storage.create_exclusive(_commit_path(prefix, filler), _filler_json(version))
            body, state = _commit_json(version, previous)
            if version.change_data:  # the change data files the commit names, durable before it (a local disk)
                folders = {f"{prefix}/{c.path.rpartition('/')[0]}" for c in version.change_data}
                storage.sync_directories([*sorted(folders), f"{prefix}/{CHANGE_DATA}", prefix])
            # a writer losing the race for version N finds it there and leaves it as it is
            if storage.create_exclusive(_commit_path(prefix, number), body) and not fillers:
                _LAST_COMMITS.keep(storage.url(prefix), number, body, state)
            else:
                _LAST_COMMITS.forget(storage.url(prefix))
            names = [*names, *(f"{v:020d}.json" for v in (*fillers, number))]
            if previous is None or number % CHECKPOINT_INTERVAL == 0:
                _checkpoint(storage, prefix, number)  # the first: a log starting at K needs no 0..K-1
            if fillers:
                oldest_retained = max(oldest_retained, number)
        _retire(storage, prefix, names, oldest_retained)


def _kept_state(storage: Storage, prefix: str, newest: int, names: list[str]) -> _State | None:
    """The state this process kept after writing the log's newest commit `newest` (destination/table_formats/
    last_commits.py), while a checkpoint at or before it is still there among `names` (listed just now): a log being
    deleted by another process, keys in order, loses its checkpoints before its newest commit, and delta-rs then
    reads what is left and fails, rather than this process committing on top of it."""
    if not any((m := _CHECKPOINT.match(name)) and int(m.group(1)) <= newest for name in names):
        return None
    return _LAST_COMMITS.state(storage.url(prefix), newest, lambda: storage.read_bytes(_commit_path(prefix, newest)))


# instead of opening the log with delta-rs (about 10 ms locally); a state holds each live file's path and size
_LAST_COMMITS: LastCommits[_State] = LastCommits(weight=lambda state: len(state.files), max_weight=200_000)


def _commit_json(version: LakeVersion, previous: _State | None) -> tuple[bytes, _State]:
    """Version N's commit file: its actions against the format's previous entry (None: the first entry), and the
    entry's state after it."""
    stamp = int(version.committed_at * 1000)
    schema = schema_json(version.table)
    config = configuration(version.table, version.change_feed)
    actions: list[dict[str, Any]] = [{"commitInfo": {
        "timestamp": stamp, "operation": version.operation,
        "operationParameters": {"records_version": str(version.version)}, "isBlindAppend": False}}]
    if previous is None:
        actions.append({"protocol": PROTOCOL})
    if previous is None or previous.schema != schema or previous.configuration != config:
        actions.append({"metaData": {
            "id": previous.table_id if previous else str(uuid.uuid4()),
            "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
            "partitionColumns": [], "configuration": config, "createdTime": stamp,
            **({"description": description} if (description := _left_out_description(version.table)) else {})}})
    before = previous.files if previous else {}
    live = {f.path: f for f in version.files}
    for path, size in sorted(before.items()):
        if path not in live:
            actions.append({"remove": {"path": quote(path), "deletionTimestamp": stamp, "dataChange": True,
                                       "extendedFileMetadata": True, "partitionValues": {}, "size": size}})
    for path, lake_file in live.items():
        if path not in before:
            actions.append({"add": {"path": quote(path), "partitionValues": {}, "size": lake_file.bytes,
                                    "modificationTime": stamp, "dataChange": True,
                                    "stats": json.dumps({"numRecords": lake_file.rows})}})
    for change in version.change_data or ():
        actions.append({"cdc": {"path": quote(change.path), "partitionValues": {}, "size": change.bytes,
                                "dataChange": False}})
    body = "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode()
    table_id = next((a["metaData"]["id"] for a in actions if "metaData" in a), previous.table_id if previous else "")
    return body, _State(version=version.version, files={path: f.bytes for path, f in live.items()}, schema=schema,
                        configuration=config, table_id=table_id)


def _filler_json(version: LakeVersion) -> bytes:
    """A version of a gap: Delta versions are contiguous (delta-kernel refuses a log with a hole), so the versions
    between the format's entry and `version` are written as commits changing nothing, then retired with it."""
    info = {"timestamp": int(version.committed_at * 1000), "operation": "NOT CAUGHT UP", "operationParameters": {}}
    return (json.dumps({"commitInfo": info}, separators=(",", ":")) + "\n").encode()


def _commit_path(prefix: str, version: int) -> str:
    return f"{prefix}/{LOG}/{version:020d}.json"


def _log_names(storage: Storage, prefix: str) -> list[str]:
    return storage.list_children(f"{prefix}/{LOG}")


def _commit_versions(names: list[str]) -> list[int]:
    return sorted(int(m.group(1)) for m in map(_COMMIT.match, names) if m)


def _load_state(storage: Storage, prefix: str, version: int) -> _State:
    """The format's entry `version`, read by delta-rs (its checkpoint and the commits after it)."""
    import pyarrow as pa

    with _delta_errors(storage, prefix):
        table = _open(storage, prefix, version)
        adds = pa.table(table.get_add_actions(flatten=True))
        files = dict(zip((unquote(p) for p in adds["path"].to_pylist()), adds["size_bytes"].to_pylist(),
                         strict=True))
        metadata = table.metadata()
        return _State(version=version, files=files, schema=json.loads(table.schema().to_json()),
                      configuration=dict(metadata.configuration), table_id=metadata.id)


def _open(storage: Storage, prefix: str, version: int) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(storage.url(prefix), version=version, storage_options=delta_storage_options(storage.spec))


def _checkpoint(storage: Storage, prefix: str, version: int) -> None:
    """A checkpoint at `version`; `_last_checkpoint` keeps naming the newest one (delta-rs points it at the one it
    just wrote, which is older than the newest when retention checkpoints its oldest version)."""
    pointer = f"{prefix}/{LOG}/_last_checkpoint"
    try:
        newest = storage.read_bytes(pointer)
    except FileNotFoundError:
        newest = b""
    with _delta_errors(storage, prefix):
        _open(storage, prefix, version).create_checkpoint()
    if newest and int(json.loads(newest)["version"]) > version:
        storage.write_bytes(pointer, newest)
    # delta-rs does not fsync what it writes; the log files the checkpoint stands for are deleted next (_retire)
    storage.sync_files([f"{prefix}/{LOG}/{version:020d}.checkpoint.parquet", pointer])  # delta-rs's one-part name
    storage.sync_directories([f"{prefix}/{LOG}"])


def _retire(storage: Storage, prefix: str, names: list[str], oldest_retained: int) -> None:
    """Versions before `oldest_retained` stop loading: a checkpoint at the oldest Delta version kept (the first
    commit at or after it: versions in a gap have no commit), then every log file and change data folder of an
    older version is deleted."""
    kept = [v for v in _commit_versions(names) if v >= oldest_retained]
    if not kept:
        return
    first = kept[0]
    older = [n for n in names if (m := _VERSIONED.match(n)) and int(m.group(1)) < first]
    if not older:
        return
    if f"{first:020d}.checkpoint.parquet" not in names:
        _checkpoint(storage, prefix, first)
    for name in older:
        storage.delete(f"{prefix}/{LOG}/{name}")
    for folder in storage.list_children(f"{prefix}/{CHANGE_DATA}"):  # the retired versions' change data too
        number = parse_version_dir(folder)
        if number is not None and number < first:
            storage.delete_prefix(f"{prefix}/{CHANGE_DATA}/{folder}")


@contextmanager
def _delta_errors(storage: Storage, prefix: str) -> Iterator[None]:
    """delta-rs's errors (unreachable store, unreadable log) become a StorageError naming the table's Delta log."""
    try:
        yield
    except (OSError, StorageError):
        raise
    except Exception as exc:  # deltalake raises its own exception types (and plain ones) for I/O
        cause = str(exc).strip().splitlines()
        raise StorageError(f"Delta log of {storage.url(prefix)}: {scrub(cause[0]) if cause else type(exc).__name__}") \
            from exc
