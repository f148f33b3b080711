"""`records-destination`: serve, tester, tables, show, changes, repair, validate, publish, reformat."""
from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from destination.runtime import logs
from destination.runtime.errors import DestinationError, UserActionRequired

if TYPE_CHECKING:
    from destination.iceberg_rest.server import IcebergRestOptions


def _serve(args: argparse.Namespace) -> int:
    # Before grpc is imported: the server forks only to exec Spark's JVM gateway, and with gRPC's fork handlers on
    # that child can die on a closed epoll descriptor before it execs (grpc/grpc#43055), failing Spark's start.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    from destination.runtime.settings import server_options
    from destination.storage.base import create_local_root, local_root_problem

    options = server_options(root=args.root, batch_file_format=args.batch_file_format, spark_master=args.spark_master,
                             metrics_port=args.metrics_port, spark_ui_port=args.spark_ui_port,
                             catalog_file=args.catalog)
    # a missing directory is created here, before the port is taken; a file never becomes one
    problem = local_root_problem(args.root, must_exist=False) or create_local_root(args.root)
    if problem is not None:
        raise UserActionRequired(f"{problem}: name a directory (created when missing) or s3://bucket/prefix")
    iceberg_rest = _iceberg_rest_options(args)
    logs.configure_library_logging()
    from destination.rpc.server import serve  # after the checks: its imports (PyArrow, pyiceberg) take seconds

    return serve(options, args.port, iceberg_rest)


def _iceberg_rest_options(args: argparse.Namespace) -> IcebergRestOptions | None:
    """`--iceberg-rest-*`, checked before any port is taken: the token file read, the TLS files loaded."""
    others = (args.iceberg_rest_token_file, args.iceberg_rest_tls_cert, args.iceberg_rest_tls_key)
    if args.iceberg_rest_port is None:
        if any(o is not None for o in others) or args.iceberg_rest_vend_credentials:
            raise UserActionRequired("the --iceberg-rest-* options need --iceberg-rest-port (the served catalog is off)")
        return None
    from destination.iceberg_rest.server import IcebergRestOptions, read_token, tls_context

    if args.iceberg_rest_token_file is None:
        raise UserActionRequired("--iceberg-rest-port needs --iceberg-rest-token-file FILE: the catalog answers only "
                                 "requests with that bearer token")
    read_token(args.iceberg_rest_token_file)
    tls_context(args.iceberg_rest_tls_cert, args.iceberg_rest_tls_key)
    return IcebergRestOptions(args.iceberg_rest_port, args.iceberg_rest_token_file, args.iceberg_rest_tls_cert,
                              args.iceberg_rest_tls_key, args.iceberg_rest_vend_credentials)


def _tester(args: argparse.Namespace) -> int:
    from destination.tester.run import run_tester

    return run_tester(args.input, address=args.address, schema=args.schema_name, plain_text=args.plain_text,
                      batch_file_type=args.batch_file_type, configuration_file=args.configuration,
                      batch_dir=args.batch_dir, server_batch_dir=args.server_batch_dir,
                      connect_timeout=args.connect_timeout, status_url=args.status_url)


def _tables(args: argparse.Namespace) -> int:
    from destination.commands.inspection import list_tables

    return list_tables(args.root, _s3_options(args))


def _show(args: argparse.Namespace) -> int:
    from destination.commands.inspection import show_table

    return show_table(args.root, args.table, args.version, args.limit, _s3_options(args))


def _changes(args: argparse.Namespace) -> int:
    from destination.commands.inspection import show_changes

    return show_changes(args.root, args.table, args.from_version, args.to_version, args.net, args.limit, args.output,
                        _s3_options(args))


def _repair(args: argparse.Namespace) -> int:
    from destination.commands.inspection import repair_table

    return repair_table(args.root, args.table, _s3_options(args))


def _validate(args: argparse.Namespace) -> int:
    from destination.commands.inspection import open_root
    from destination.commands.validator import validate_command

    return validate_command(open_root(args.root, _s3_options(args)), args.table)


def _publish(args: argparse.Namespace) -> int:
    from destination.catalogs.catalog_settings import catalog_from_file
    from destination.commands.inspection import open_root
    from destination.commands.publish import publish_command
    from destination.on_disk.options import TABLE_FORMATS_FIELD, table_formats

    names = table_formats({TABLE_FORMATS_FIELD: _table_formats_option(args)})
    storage = open_root(args.root, _s3_options(args))
    return publish_command(storage, args.table, names, args.rebuild, catalog_from_file(args.catalog, storage.spec))


def _table_formats_option(args: argparse.Namespace) -> str:
    """--table-formats, or its old spelling --formats (a warning says so)."""
    if args.formats is not None:
        print("warning: --formats is now --table-formats; the old spelling goes in a later release", file=sys.stderr)
        return str(args.formats)
    return str(args.table_formats)


def _reformat(args: argparse.Namespace) -> int:
    from destination.catalogs.catalog_settings import catalog_from_file
    from destination.commands.inspection import open_root
    from destination.commands.reformat import choice_fields, reformat_command
    from destination.on_disk.options import TABLE_FORMATS_FIELD, table_formats

    names = table_formats({TABLE_FORMATS_FIELD: _table_formats_option(args)})
    storage = open_root(args.root, _s3_options(args))
    fields = choice_fields(args.records_format, args.records_variant, args.records_hint)
    logs.configure_library_logging()
    return reformat_command(storage, args.table, fields, names, args.drop_table_formats,
                            catalog_from_file(args.catalog, storage.spec), args.spark_master)


def _s3_options(args: argparse.Namespace) -> dict[str, str]:
    return {"s3_endpoint": args.s3_endpoint or "", "s3_region": args.s3_region or ""}


def port_number(text: str) -> int:
    """A TCP port, 1-65535 (the OS would take 70000 as 70000 mod 65536 and 0 as any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside the port range 1-65535")
    return port


def server_address(text: str) -> str:
    """A gRPC target HOST:PORT whose port, when a number, is 1-65535: checked here, at once, and not found out by
    waiting --connect-timeout for a server no port can hold (unix: and other targets pass as they are)."""
    port = text.rsplit(":", 1)[1] if ":" in text and "/" not in text else ""
    if port.isdigit() and not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: the port {int(port)} is outside the port range 1-65535")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="records-destination",
                                     description="Fivetran Partner SDK v2 destination writing records directories")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gRPC server")
    serve.add_argument("--port", type=port_number, default=50052, help="the gRPC port, 1-65535 (default 50052)")
    serve.add_argument("--root", default="./data", help="local path or s3://bucket/prefix (default ./data)")
    serve.add_argument("--batch-file-format", choices=("csv", "parquet"), default="csv")
    serve.add_argument("--spark-master", default="local[*]", help="Spark master URL (default local[*])")
    serve.add_argument("--metrics-port", type=port_number,
                       help="serve Prometheus /metrics and the status page on this HTTP port (default: off; 9464 is "
                            "Prometheus' usual one)")
    serve.add_argument("--catalog", metavar="CONFIGURATION_JSON",
                       help="at start-up, also move the catalog entries of the --root's tables in this configuration "
                            "file's catalog (as `publish --catalog`); the table formats are caught up either way")
    serve.add_argument("--spark-ui-port", type=port_number,
                       help="turn Spark's own web UI on, on this port (default: off)")
    serve.add_argument("--iceberg-rest-port", type=port_number,
                       help="serve the read side of the Iceberg REST catalog API over the tables of --root and of "
                            "every root requests write to, on this HTTP port (default: off)")
    serve.add_argument("--iceberg-rest-token-file", metavar="FILE",
                       help="the bearer token clients of --iceberg-rest-port must send (required with it)")
    serve.add_argument("--iceberg-rest-tls-cert", metavar="FILE", help="serve it over TLS with this certificate "
                                                                        "(PEM; with --iceberg-rest-tls-key)")
    serve.add_argument("--iceberg-rest-tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    serve.add_argument("--iceberg-rest-vend-credentials", action="store_true",
                       help="put the S3 root's access key in each table's load answer (default: never)")
    serve.set_defaults(func=_serve)

    tester = sub.add_parser("tester", help="drive a server with Fivetran destination-tester input files")
    tester.add_argument("--input", required=True, help="an input .json file, or a folder of them (subfolders "
                                                        "included; each file in an empty schema of its own)")
    tester.add_argument("--address", type=server_address, default="localhost:50052",
                        help="the server's HOST:PORT (default localhost:50052)")
    tester.add_argument("--schema-name", default="tester", help="a single file's schema; a folder's files each get "
                                                                "<schema-name>_<run id>_<path> (default tester)")
    tester.add_argument("--plain-text", action="store_true", help="send uncompressed, unencrypted files")
    tester.add_argument("--batch-file-type", choices=("csv", "parquet"), default="csv")
    tester.add_argument("--configuration", help="the configuration of every input (default: the nearest "
                                                 "configuration.json beside an input or above it in the folder)")
    tester.add_argument("--batch-dir", help="write the batch files under this directory, readable by the server's "
                                            "user (default: a private temporary directory)")
    tester.add_argument("--server-batch-dir", help="the path at which the server sees --batch-dir, e.g. its mount "
                                                   "in the container (as the Fivetran tester's WORKING_DIR; "
                                                   "default: the same path)")
    tester.add_argument("--connect-timeout", type=float, default=10.0,
                        help="seconds to wait for the server to answer (default 10)")
    tester.add_argument("--status-url", help="the server's --metrics-port as a URL (http://localhost:9464): the live "
                                             "bar of a call shows its Spark tasks, files and time left")
    tester.set_defaults(func=_tester)

    for name, helptext in (("tables", "list schemas, tables, versions and row counts"), ("show", "print a table's rows")):
        p = sub.add_parser(name, help=helptext)
        if name == "show":
            p.add_argument("table", help="SCHEMA.TABLE")
            p.add_argument("--version", type=int)
            p.add_argument("--limit", type=int, default=20)
        _store_arguments(p)
        p.set_defaults(func=_tables if name == "tables" else _show)

    changes = sub.add_parser("changes", help="print the changes between two versions of a table (from its change files)")
    changes.add_argument("table", help="SCHEMA.TABLE")
    changes.add_argument("--from-version", type=int, required=True, help="the version the changes start from (exclusive)")
    changes.add_argument("--to-version", type=int, help="the last version (inclusive; default: the latest)")
    changes.add_argument("--net", action="store_true", help="one change per key: its first before and last after image")
    changes.add_argument("--limit", type=int, help="print at most this many rows")
    changes.add_argument("--output", choices=("table", "jsonl"), default="table")
    _store_arguments(changes)
    changes.set_defaults(func=_changes)

    repair = sub.add_parser("repair", help="make a table whose latest committed version lacks files writable again: "
                                           "commit its newest complete version as a new version")
    repair.add_argument("table", help="SCHEMA.TABLE")
    _store_arguments(repair)
    repair.set_defaults(func=_repair)
    validate = sub.add_parser("validate", help="check every committed version of a table (or of every table)")
    validate.add_argument("table", nargs="?", help="SCHEMA.TABLE (default: every table under the root)")
    _store_arguments(validate)
    validate.set_defaults(func=_validate)
    publish = sub.add_parser("publish",
                             help="bring the Delta Lake and Iceberg metadata (and the --catalog entry) of a table, or "
                                  "of every table, up to its committed versions; --rebuild writes it anew ("
                                  "`formats`: its old name)")
    publish.add_argument("table", nargs="?", help="SCHEMA.TABLE (default: every table under the root)")
    _table_formats_arguments(publish, "delta,iceberg (default), delta or iceberg")
    publish.add_argument("--catalog", metavar="CONFIGURATION_JSON",
                         help="also register each table in (or move its entry to the latest version of) the catalog "
                              "of this configuration file (the connector's fields: catalog, catalog_uri, …; a file "
                              "keeps the credentials off the command line)")
    publish.add_argument("--rebuild", action="store_true", help="clear the table formats' folders first "
                                                                "(_delta_log/, _change_data/, metadata/) and write "
                                                                "every retained version again")
    _store_arguments(publish)
    publish.set_defaults(func=_publish)
    reformat = sub.add_parser("reformat", help="move a table to another records format: its rows written again in "
                                               "that format as one new version; its next writes use it")
    reformat.add_argument("table", help="SCHEMA.TABLE")
    reformat.add_argument("--records-format", required=True, help="parquet, avro or delimited (as the configuration "
                                                                   "field records_format)")
    reformat.add_argument("--records-variant", help="delimited only: bluelabs, csv, bigquery or vertica")
    reformat.add_argument("--records-hint", action="append", default=[], metavar="HINT=VALUE",
                          help="delimited only, repeatable: a hint override as the configuration's records_<hint> "
                               "fields (compression, header-row, encoding, dateformat, timeonlyformat, "
                               "datetimeformat, datetimeformattz)")
    reformat.add_argument("--drop-table-formats", action="store_true",
                          help="to a format a table format does not describe (Delta: all but parquet; Iceberg: "
                               "delimited): remove that metadata and, for Iceberg, the --catalog entry (refused "
                               "without it when the table has any)")
    _table_formats_arguments(reformat, "the table formats written anew for it, as the server's table_formats "
                                       "(default delta,iceberg; none: none anew); metadata the table has follows "
                                       "the move anyway")
    reformat.add_argument("--catalog", metavar="CONFIGURATION_JSON",
                          help="the catalog of this configuration file: its entry registered or moved (to parquet or "
                               "avro) or dropped (to delimited, with --drop-table-formats)")
    reformat.add_argument("--spark-master", default="local[*]", help="Spark master URL (default local[*])")
    _store_arguments(reformat)
    reformat.set_defaults(func=_reformat)
    return parser


def _table_formats_arguments(p: argparse.ArgumentParser, helptext: str) -> None:
    p.add_argument("--table-formats", default="delta,iceberg", help=helptext)
    p.add_argument("--formats", help=argparse.SUPPRESS)  # the old spelling, warned about


def _store_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default="./data")
    p.add_argument("--s3-endpoint")
    p.add_argument("--s3-region")


RENAMED = {"formats": "publish"}  # commands' old names, still taken (with a warning) until a later release


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in RENAMED:
        print(f"warning: `records-destination {argv[0]}` is now `records-destination {RENAMED[argv[0]]}`; the old "
              "name goes in a later release", file=sys.stderr)
        argv[0] = RENAMED[argv[0]]
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is caught below and not at interpreter exit
        return code
    except BrokenPipeError:  # stdout closed early (`| head`): the reader has what it wanted; stop quietly, exit 0
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except DestinationError as exc:  # a user's mistake (a missing root, bad credentials): the cause, no traceback
        print(f"records-destination {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
