"""The import direction of docs/ARCHITECTURE.md "Where code runs": task code imports only shared modules, shared
modules import neither task code nor driver code, and the driver's layers point one way (cli → rpc → write →
spark_jobs → shared; commands and the tester beside them). Every import counts, a function's own included."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("destination", "spark_jobs")

# driver-only code by prefix; every other module of `destination` is shared (runs on the driver and in tasks)
ENTRY = ("destination.cli",)
RPC = ("destination.rpc",)
PROTOCOL = ("destination.protocol",)  # generated gRPC stubs
WRITE = ("destination.write", "destination.table_store.store")
# Delta Lake and Iceberg metadata following the store's commits, and the catalog entries following them
FORMATS = ("destination.table_formats", "destination.catalogs")
COMMANDS = ("destination.commands",)
TESTER = ("destination.tester",)  # a gRPC client
DRIVER = ENTRY + RPC + PROTOCOL + WRITE + FORMATS + COMMANDS + TESTER
TASKS = ("spark_jobs",)

# (importer, imported modules it must not import, why)
RULES = [
    (TASKS, DRIVER, "spark_jobs runs inside Spark tasks: it imports only shared modules"),
    (WRITE, ENTRY + RPC + PROTOCOL + COMMANDS + TESTER + FORMATS,
     "destination.write is driver orchestration below the RPC layer; the store is given the formats, not importing them"),
    (FORMATS, ENTRY + RPC + PROTOCOL + COMMANDS + TESTER + TASKS + ("destination.write",),
     "the table formats follow the store's commits on the driver"),
    (COMMANDS, ENTRY + RPC + PROTOCOL + TESTER, "commands read a root without the server"),
    (TESTER, ENTRY + RPC + WRITE + FORMATS + COMMANDS + TASKS, "the tester is a client: it speaks to a server over gRPC"),
    (RPC, ENTRY + COMMANDS + TESTER, "the RPC layer calls destination.write, not the commands"),
]
SHARED_RULE = (DRIVER + TASKS, "shared modules run in tasks too: they import no task or driver code")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The project modules `path` imports (absolute imports, anywhere in the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules() -> list[tuple[str, Path]]:
    return sorted((_module_name(p), p) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if not _under(_module_name(p), ("destination.protocol",)))


@pytest.mark.parametrize("name,path", _modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_imports_point_one_way(name: str, path: Path) -> None:
    rules = [(forbidden, why) for importer, forbidden, why in RULES if _under(name, importer)]
    if not _under(name, DRIVER + TASKS):
        rules.append(SHARED_RULE)
    wrong = sorted((imported, why) for imported in _imports(path) for forbidden, why in rules
                   if _under(imported, forbidden) and not _under(imported, (name,)))
    assert not wrong, f"{name} imports {', '.join(i for i, _ in wrong)}: {wrong[0][1]}"


def test_every_module_has_a_place() -> None:
    """A new top-level module of `destination` is shared by default: it must not need driver code (checked above);
    a new package must be added to this map and to docs/ARCHITECTURE.md."""
    known = {"batch", "catalogs", "changes", "commands", "protocol", "records_formats", "rpc", "storage", "table_formats",
             "table_store", "tester",
             "write"}
    packages = {p.parent.name for p in (ROOT / "destination").glob("*/__init__.py")}
    assert packages == known, f"packages not in the layout: {sorted(packages ^ known)}"
