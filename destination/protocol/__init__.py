"""The generated fivetran_sdk.v2 stubs.

protoc emits `import common_pb2` (a top-level import) into destination_sdk_pb2.py,
because the .proto files import each other by bare file name as upstream does.
Rather than rewriting generated code, this package puts its own directory on
sys.path once so those imports resolve to the stubs generated next to it.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)

try:
    import common_pb2 as common
    import destination_sdk_pb2 as sdk
    import destination_sdk_pb2_grpc as sdk_grpc
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "The fivetran_sdk.v2 stubs are missing: they are generated from protos/ when the package is "
        "installed. Run `pip install -e .` (or `pip install .`) from the repository root."
    ) from exc



def form_field_names(fields: list[common.FormField]) -> list[str]:
    """The names a configuration may carry: a form's fields and those its ConditionalFields show (the server's
    unknown-field warning and the tester's both read them)."""
    names: list[str] = []
    for f in fields:
        if f.HasField("conditional_fields"):
            names.extend(form_field_names(list(f.conditional_fields.fields)))
        else:
            names.append(f.name)
    return names


__all__ = ["common", "form_field_names", "sdk", "sdk_grpc"]
