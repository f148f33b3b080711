"""Drive a destination server with Fivetran destination-tester input files, as the real tester does.

Per input file (destination.tester.inputs says which, in which schema): CreateTable per table → AlterTable per table →
ops → schema_migration → DescribeTable (fivetran-protocol §1.2). Ops are grouped: all
rows per table and kind go into one write (replace / update+soft_delete / delete files).
Choice noted in docs/guide/tester.md: pending writes are sent before each truncate, so a truncate
applies to the rows before it (the operations_on_nonexistent_records files need this).
"""
from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from destination.model.table_model import ACTIVE, DELETED, END, START, SYNCED
from destination.protocol import common, form_field_names, sdk, sdk_grpc
from destination.tester.batchgen import NULL_STRING, UNMODIFIED_STRING, csv_bytes, parquet_bytes, seal
from destination.tester.display import CallProgress
from destination.tester.inputs import configuration_warnings
from destination.tester.migration_requests import migration_request
from destination.tester.tables import TesterTable
from destination.tester.values import TMAX, instant, minus_one_ms, parse_instant, text_of

MAX_MESSAGE = 128 * 1024 * 1024


def table_from_input(name: str, spec: dict[str, Any]) -> TesterTable:
    columns = []
    for col, t in spec.get("columns", {}).items():
        if isinstance(t, dict):
            columns.append((col, t["type"], {k: v for k, v in t.items() if k != "type"}))
        else:
            columns.append((col, t, {}))
    return TesterTable(name, columns, list(spec.get("primary_key", [])), bool(spec.get("history_mode", False)))


@dataclass
class Pending:
    """Rows collected per table and kind until the next flush."""

    rows: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)

    def add(self, table: str, kind: str, row: dict[str, Any]) -> None:
        self.rows.setdefault(table, {}).setdefault(kind, []).append(row)


@dataclass(frozen=True)
class PathMap:
    """Where the tester writes batch files and where the server reads them: the same directory seen from the
    server's side (a container's mount), as the Fivetran tester's WORKING_DIR maps its /data."""

    local: Path
    server: PurePosixPath

    def server_path(self, path: Path) -> str:
        return str(self.server / path.relative_to(self.local).as_posix())


class Harness:
    def __init__(self, address: str, schema: str, configuration: dict[str, str], plain_text: bool,
                 batch_file_type: str, workdir: Path, paths: PathMap | None = None,
                 progress: CallProgress | None = None) -> None:
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                                                ("grpc.max_receive_message_length", MAX_MESSAGE)])
        self.stub = sdk_grpc.DestinationConnectorStub(self.channel)
        self.schema = schema
        self.configuration = configuration
        self.plain_text = plain_text
        self.batch_file_type = batch_file_type
        self.workdir = workdir
        self.paths = paths or PathMap(workdir, PurePosixPath(workdir.as_posix()))
        self.tables: dict[str, TesterTable] = {}
        self.calls = 0
        self.failures = 0
        self.warnings = 0
        self.last_ms = 0
        self.rng = random.Random(7)
        self.stem = "input"
        self.progress = progress

    # ---- output -----------------------------------------------------------------------------

    def report(self, rpc: str, target: str, outcome: str, ok: bool) -> None:
        self.calls += 1
        if not ok:
            self.failures += 1
        print(f"{'OK  ' if ok else 'FAIL'} {rpc} {target}: {outcome}", flush=True)

    def _answer(self, rpc: str, target: str, call: Any, request: Any) -> Any:
        try:
            if self.progress is None:
                response = call(request, timeout=3600)
            else:
                with self.progress.call(rpc, target):
                    response = call(request, timeout=3600)
        except grpc.RpcError as exc:
            self.report(rpc, target, f"gRPC {exc.code().name}: {exc.details()}", False)
            return None
        which = response.WhichOneof("response")
        if which == "task":
            self.report(rpc, target, f"task: {response.task.message}", False)
        elif which == "warning":
            self.report(rpc, target, f"warning: {response.warning.message}", True)
        elif which == "unsupported":
            self.report(rpc, target, "unsupported", True)
        else:
            self.report(rpc, target, which or "empty response", which is not None)
        return response

    def stamp(self) -> int:
        """The current time in ms, strictly increasing (the tester's per-row delay)."""
        self.last_ms = max(int(time.time() * 1000), self.last_ms + 1)
        return self.last_ms

    # ---- protocol steps ---------------------------------------------------------------------

    def setup(self, configurations: dict[str, dict[str, str]] | None = None) -> None:
        """ConfigurationForm, then its tests for each configuration (named by its file; default: the harness's),
        warning about each configuration key the form does not know; then Capabilities."""
        form = self.stub.ConfigurationForm(common.ConfigurationFormRequest(), timeout=60)
        self.report("ConfigurationForm", "-", f"{len(form.fields)} fields, {len(form.tests)} tests", True)
        fields = form_field_names(list(form.fields))
        for source, configuration in (configurations or {"configuration": self.configuration}).items():
            for warning in configuration_warnings(source, configuration, fields):
                self.warnings += 1
                print(f"WARN {warning}", flush=True)
            for test in form.tests:
                response = self.stub.Test(common.TestRequest(name=test.name, configuration=configuration),
                                          timeout=600)
                ok = response.WhichOneof("response") == "success"
                target = test.name if configurations is None else f"{test.name} ({source})"
                self.report("Test", target, "success" if ok else f"failure: {response.failure}", ok)
        try:
            caps = self.stub.Capabilities(sdk.CapabilitiesRequest(), timeout=60)
            self.report("Capabilities", "-", sdk.BatchFileFormat.Name(caps.batch_file_format), True)
        except grpc.RpcError as exc:
            self.report("Capabilities", "-", f"gRPC {exc.code().name}", exc.code() == grpc.StatusCode.UNIMPLEMENTED)

    def start_file(self, schema: str, configuration: dict[str, str]) -> None:
        """The next file runs against `schema` with `configuration`, knowing no tables yet (an empty schema)."""
        self.schema = schema
        self.configuration = configuration
        self.tables = {}
        if self.progress is not None:
            self.progress.schema = schema

    def run_file(self, path: Path) -> None:
        self.run_input(json.loads(path.read_text()), path.stem)

    def run_input(self, data: dict[str, Any], stem: str) -> None:
        """One input file's calls, in the tester's order; `stem` names its batch files."""
        self.stem = stem
        for name, spec in (data.get("create_table") or {}).items():
            self.tables[name] = table_from_input(name, spec)
            self._answer("CreateTable", name, self.stub.CreateTable, sdk.CreateTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=self.tables[name].proto()))
        for name, spec in (data.get("alter_table") or {}).items():
            previous = self.tables.get(name)
            self.tables[name] = table_from_input(name, spec)
            if previous is not None:
                self.tables[name].soft_deleted = previous.soft_deleted
            self._answer("AlterTable", name, self.stub.AlterTable, sdk.AlterTableRequest(
                configuration=self.configuration, schema_name=self.schema, table=self.tables[name].proto()))
        pending = Pending()
        for op in data.get("ops") or []:
            ((kind, body),) = op.items()
            if kind in ("truncate_before", "soft_truncate_before"):
                cutoff = self.stamp()
                self.flush(pending)
                pending = Pending()
                for table in body:
                    self.truncate(table, cutoff, soft=kind == "soft_truncate_before")
                continue
            for table, rows in body.items():
                for row in rows:
                    stamped = dict(row)
                    stamped["\x00synced"] = self.stamp()
                    pending.add(table, kind, stamped)
        self.flush(pending)
        for element in data.get("schema_migration") or []:
            for op_name in element:
                for spec in element[op_name]:
                    self.migrate(op_name, spec)
        for name in data.get("describe_table") or []:
            response = self._answer("DescribeTable", name, self.stub.DescribeTable, sdk.DescribeTableRequest(
                configuration=self.configuration, schema_name=self.schema, table_name=name))
            if response is not None and response.WhichOneof("response") == "table":
                cols = ", ".join(f"{c.name}:{common.DataType.Name(c.type)}{'*' if c.primary_key else ''}"
                                 for c in response.table.columns)
                print(f"     {name}: {cols}")

    def truncate(self, table: str, cutoff_ms: int, soft: bool) -> None:
        ts = Timestamp(seconds=cutoff_ms // 1000, nanos=(cutoff_ms % 1000) * 1_000_000)
        request = sdk.TruncateRequest(configuration=self.configuration, schema_name=self.schema, table_name=table,
                                      synced_column=SYNCED, utc_delete_before=ts)
        if soft:
            request.soft.deleted_column = DELETED
        self._answer("Truncate", f"{table} ({'soft' if soft else 'hard'})", self.stub.Truncate, request)

    # ---- writes -------------------------------------------------------------------------------

    def flush(self, pending: Pending) -> None:
        for table, kinds in pending.rows.items():
            t = self.tables.get(table)
            if t is None:
                self.report("Write", table, "input writes to a table it never created", False)
                continue
            if "soft_delete" in kinds and t.history:
                t.soft_deleted = True
            if t.history:
                self.write_history(t, kinds)
            else:
                self.write_plain(t, kinds)

    def _file(self, table: TesterTable, kind: str, rows: list[dict[str, str | None]], columns: list[str],
              keys: dict[str, bytes]) -> str:
        ext = "parquet" if self.batch_file_type == "parquet" else "csv"
        name = f"{table.name}_{self.stem}_{kind}.{ext}" + ("" if self.plain_text else ".zstd.aes")
        path = self.workdir / name
        if ext == "parquet":
            plain = parquet_bytes(columns, table.binary_columns, rows)
        else:
            plain = csv_bytes(columns, rows, self.rng)
        key = None if self.plain_text else os.urandom(32)
        path.write_bytes(plain if self.plain_text else seal(plain, key))
        path.chmod(0o644)  # the server may run as another user (a container's)
        server_path = self.paths.server_path(path)
        if key is not None:
            keys[server_path] = key
        return server_path

    def _attach(self, request: Any, table: TesterTable,
                parts: list[tuple[str, str, list[dict[str, str | None]], list[str]]]) -> None:
        """Write each non-empty part as one batch file into the request's file list, with its key."""
        keys: dict[str, bytes] = {}
        for field_name, kind, rows, columns in parts:
            if rows:
                getattr(request, field_name).append(self._file(table, kind, rows, columns, keys))
        for path, key in keys.items():
            request.keys[path] = key

    def _params(self) -> sdk.FileParams:
        plain = self.plain_text
        return sdk.FileParams(compression=sdk.Compression.Value("OFF" if plain else "ZSTD"),
                              encryption=sdk.Encryption.Value("NONE" if plain else "AES"),
                              null_string=NULL_STRING, unmodified_string=UNMODIFIED_STRING)

    def _row(self, table: TesterTable, raw: dict[str, Any], kind: str) -> dict[str, str | None]:
        columns = table.all_columns
        keys = set(table.key_names)
        row: dict[str, str | None] = {}
        for name in columns:
            if name in raw:
                row[name] = text_of(raw[name])
            elif kind == "upsert" or kind == "delete":
                row[name] = None
            else:
                row[name] = UNMODIFIED_STRING if name not in keys else None
        row[SYNCED] = instant(raw["\x00synced"])
        if DELETED in columns:
            row[DELETED] = {"upsert": "false", "update": "false", "soft_delete": "true", "delete": None}[kind]
        return row

    def write_plain(self, table: TesterTable, kinds: dict[str, list[dict[str, Any]]]) -> None:
        columns = table.all_columns
        replace = [self._row(table, r, "upsert") for r in kinds.get("upsert", [])]
        update = [self._row(table, r, k) for k in ("update", "soft_delete") for r in kinds.get(k, [])]
        update.sort(key=lambda r: r[SYNCED] or "")
        delete = [self._row(table, r, "delete") for r in kinds.get("delete", [])]
        request = sdk.WriteBatchRequest(configuration=self.configuration, schema_name=self.schema, table=table.proto(),
                                        file_params=self._params())
        self._attach(request, table, [("replace_files", "upsert", replace, columns),
                                      ("update_files", "update", update, columns),
                                      ("delete_files", "delete", delete, columns)])
        rows = len(replace) + len(update) + len(delete)
        self._answer("WriteBatch", f"{table.name} ({rows} rows)", self.stub.WriteBatch, request)

    def write_history(self, table: TesterTable, kinds: dict[str, list[dict[str, Any]]]) -> None:
        """Versions get start = op_time; end/active are computed inside the batch, per key (§3.3)."""
        columns = table.all_columns
        versions: list[tuple[str, dict[str, str | None]]] = []
        for kind in ("upsert", "update", "soft_delete"):
            for raw in kinds.get(kind, []):
                row = self._row(table, raw, "update" if kind == "soft_delete" else kind)
                if kind == "soft_delete":
                    row[DELETED] = "true"
                row[START] = raw.get("op_time") or instant(raw["\x00synced"])
                versions.append((kind, row))
        by_key: dict[tuple[Any, ...], list[dict[str, str | None]]] = {}
        for _kind, row in versions:
            by_key.setdefault(tuple(row[k] for k in table.key_names), []).append(row)
        earliest = []
        for key, rows in by_key.items():
            rows.sort(key=lambda r: parse_instant(r[START] or ""))
            for i, row in enumerate(rows):
                last = i == len(rows) - 1
                row[END] = TMAX if last else minus_one_ms(rows[i + 1][START] or "")
                row[ACTIVE] = "true" if last else "false"
            earliest.append({**dict(zip(table.key_names, key, strict=True)), START: rows[0][START]})
        deletes = []
        for raw in kinds.get("delete", []):
            row = self._row(table, raw, "delete")
            row[END] = raw.get("op_time") or instant(raw["\x00synced"])
            row[ACTIVE] = "false"
            row[START] = None
            deletes.append(row)
        request = sdk.WriteHistoryBatchRequest(configuration=self.configuration, schema_name=self.schema,
                                               table=table.proto(), file_params=self._params())
        self._attach(request, table, [
            ("earliest_start_files", "earliest", earliest, [*table.key_names, START]),
            ("replace_files", "upsert", [r for kind, r in versions if kind == "upsert"], columns),
            ("update_files", "update", [r for kind, r in versions if kind != "upsert"], columns),
            ("delete_files", "delete", deletes, columns)])
        count = len(versions) + len(deletes)
        self._answer("WriteHistoryBatch", f"{table.name} ({count} rows)", self.stub.WriteHistoryBatch, request)

    # ---- schema migrations --------------------------------------------------------------------

    def migrate(self, op_name: str, spec: dict[str, Any]) -> None:
        kind, request = migration_request(self.tables, self.schema, self.configuration, op_name, spec)
        if kind == "alter":
            self._answer("AlterTable", f"{spec.get('table')} ({op_name})", self.stub.AlterTable, request)
        elif kind == "migrate":
            self._answer("Migrate", f"{spec.get('table') or spec.get('from_table')} ({op_name})", self.stub.Migrate, request)
        else:
            self.report("Migrate", op_name, "unknown schema_migration operation in the input", False)


@contextmanager
def batch_workdir(batch_dir: str | None) -> Iterator[Path]:
    """A fresh directory for this run's batch files (removed afterwards): inside --batch-dir, which the server
    must be able to read (0755 whatever the umask), or a private temporary directory."""
    parent = Path(batch_dir).resolve() if batch_dir is not None else None
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tester-", dir=parent) as tmp:
        if batch_dir is not None:
            Path(tmp).chmod(0o755)
        yield Path(tmp)


def batch_path_map(workdir: Path, batch_dir: str | None, server_batch_dir: str | None) -> PathMap:
    """--batch-dir as the tester sees it, --server-batch-dir (default: the same path) as the server does."""
    local = Path(batch_dir).resolve() if batch_dir is not None else workdir
    return PathMap(local, PurePosixPath(server_batch_dir or local.as_posix()))
