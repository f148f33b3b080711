"""The catalog's answers as the Iceberg REST spec defines them, built with pyiceberg's REST models (the ones its
`RestCatalog` parses), never hand-written JSON shapes."""
from __future__ import annotations

import json
from http import HTTPStatus

from pyiceberg.catalog.rest import (
    Capability,
    ConfigResponse,
    ListNamespaceResponse,
    ListTableResponseEntry,
    ListTablesResponse,
    ListViewsResponse,
    NamespaceResponse,
    TableResponse,
)
from pyiceberg.catalog.rest.response import ErrorResponse, ErrorResponseMessage
from pyiceberg.table.metadata import TableMetadataUtil

from destination.iceberg_rest.tables import Loaded

# what this catalog serves (the config's `endpoints`: a client calls nothing else)
SERVED = (Capability.V1_LIST_NAMESPACES, Capability.V1_LOAD_NAMESPACE, Capability.V1_NAMESPACE_EXISTS,
          Capability.V1_LIST_TABLES, Capability.V1_LOAD_TABLE, Capability.V1_TABLE_EXISTS)


def config_answer(prefix: str) -> bytes:
    """`GET /v1/config`: the warehouse's `prefix` as an override, and the endpoints served (the spec's strings,
    "GET /v1/{prefix}/namespaces")."""
    answer = ConfigResponse(defaults={}, overrides={"prefix": prefix}).model_dump(exclude={"endpoints"})
    answer["endpoints"] = sorted(str(endpoint) for endpoint in SERVED)  # pyiceberg dumps them as objects
    return json.dumps(answer).encode()


def namespaces_answer(namespaces: list[str]) -> bytes:
    return ListNamespaceResponse(namespaces=[(n,) for n in namespaces]).model_dump_json().encode()


def namespace_answer(namespace: str) -> bytes:
    return NamespaceResponse(namespace=(namespace,), properties={}).model_dump_json().encode()


def tables_answer(namespace: str, tables: list[str]) -> bytes:
    entries = [ListTableResponseEntry(namespace=(namespace,), name=t) for t in tables]
    return ListTablesResponse(identifiers=entries).model_dump_json().encode()


def views_answer() -> bytes:
    return ListViewsResponse(identifiers=[]).model_dump_json().encode()


def table_answer(loaded: Loaded, config: dict[str, str]) -> bytes:
    """`GET .../tables/{table}` (LoadTableResult): the metadata file's URL, the metadata, and the file IO config."""
    metadata = TableMetadataUtil.parse_raw(loaded.metadata.decode("utf-8"))
    answer = TableResponse.model_validate({"metadata-location": loaded.location, "metadata": metadata,
                                           "config": config})
    return answer.model_dump_json().encode()


def error_answer(status: HTTPStatus, kind: str, message: str) -> bytes:
    """The spec's ErrorModel: `{"error": {"message", "type", "code"}}`."""
    error = ErrorResponseMessage(message=message, type=kind, code=int(status))
    return ErrorResponse(error=error).model_dump_json().encode()
