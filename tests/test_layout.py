"""The import direction of docs/ARCHITECTURE.md "Where code runs", read from the folders: the model, storage, batch files,
on-disk layout, change files, records formats and runtime folders run on the driver and inside Spark tasks and import
no other layer; `spark_jobs/` runs inside tasks and imports only that
code; every other folder of `destination/` is driver code, whose layers point one way (cli → rpc → write/store →
spark_jobs → the code of both; table formats and catalogs follow the store's commits; commands and the tester beside them; the
driver process's plumbing, process/, below rpc and write alike).
`bench/` drives a real server like a user and may start the services of `testbed/`, never import `tests/`. Every
import counts, relative ones and a function's own included."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("destination", "spark_jobs", "bench", "testbed")
PROJECT = PACKAGES + ("tests",)

SHARED = ("destination.model", "destination.storage", "destination.batch_files", "destination.on_disk",
          "destination.changes", "destination.records_formats", "destination.runtime")
TASKS = ("spark_jobs",)
ENTRY = ("destination.cli",)
RPC = ("destination.rpc",)
PROTOCOL = ("destination.protocol",)  # generated gRPC stubs
WRITE = ("destination.write", "destination.store")
PROCESS = ("destination.process",)  # the driver process's Spark session, metrics and requests' progress
# Delta Lake and Iceberg metadata following the store's commits, and the catalog entries following them
PUBLISH = ("destination.table_formats", "destination.catalogs")
COMMANDS = ("destination.commands",)
ICEBERG_REST = ("destination.iceberg_rest",)  # the served Iceberg REST catalog: reads the roots, beside the RPCs
TESTER = ("destination.tester",)  # a gRPC client
DRIVER = ENTRY + RPC + PROTOCOL + WRITE + PROCESS + PUBLISH + COMMANDS + TESTER + ICEBERG_REST
BENCH = ("bench",)
TESTBED = ("testbed",)
TESTS = ("tests",)

# (importer, what it must not import, why)
RULES = [
    (SHARED, DRIVER + TASKS + BENCH + TESTBED + TESTS, "the code of the driver and the tasks alike imports no task or driver code"),
    (TASKS, DRIVER + BENCH + TESTBED + TESTS, "spark_jobs runs inside Spark tasks: it imports only the code of the driver and the tasks alike"),
    (WRITE, ENTRY + RPC + PROTOCOL + COMMANDS + TESTER + PUBLISH + ICEBERG_REST + BENCH + TESTBED + TESTS,
     "write and store are driver orchestration below the RPC layer; the store is given the formats, not importing them"),
    (PUBLISH, ENTRY + RPC + PROTOCOL + COMMANDS + TESTER + ICEBERG_REST + TASKS + ("destination.write",) + BENCH + TESTBED + TESTS,
     "the table formats and catalogs follow the store's commits on the driver (they read the store, never the write)"),
    (ICEBERG_REST, ENTRY + RPC + PROTOCOL + COMMANDS + TESTER + TASKS + ("destination.write",) + BENCH + TESTBED + TESTS,
     "the served catalog reads the roots' table folders; the RPC layer starts it and tells it of commits"),
    (COMMANDS, ENTRY + RPC + PROTOCOL + TESTER + BENCH + TESTBED + TESTS, "commands read a root without the server"),
    (TESTER, ENTRY + RPC + WRITE + PUBLISH + COMMANDS + TASKS + BENCH + TESTBED + TESTS,
     "the tester is a client: it speaks to a server over gRPC"),
    (RPC, ENTRY + COMMANDS + TESTER + BENCH + TESTBED + TESTS, "the RPC layer calls destination.write, not the commands"),
    (PROCESS, ENTRY + RPC + PROTOCOL + WRITE + PUBLISH + COMMANDS + TESTER + ICEBERG_REST + TASKS + BENCH + TESTBED + TESTS,
     "the driver process's plumbing serves the RPC layer and the write path alike, importing neither"),
    (ENTRY, BENCH + TESTBED + TESTS, "the command line is the product: no benchmark or test code"),
    (BENCH, TESTS, "bench drives the real server; the services it starts are in testbed, not in the tests"),
    (TESTBED, ("destination", "spark_jobs") + BENCH + TESTS, "testbed starts services; it knows nothing of the project"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(name: str, source: str, is_package: bool = False) -> set[str]:
    """The project modules module `name` imports in `source`: absolute and relative imports, anywhere in the file."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return {n for n in found if n.split(".")[0] in PROJECT}


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules() -> list[tuple[str, Path]]:
    return sorted((_module_name(p), p) for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if not _under(_module_name(p), PROTOCOL))


def wrong_imports(name: str, source: str, is_package: bool = False) -> list[tuple[str, str]]:
    rules = [(forbidden, why) for importer, forbidden, why in RULES if _under(name, importer)]
    return sorted((imported, why) for imported in imports_of(name, source, is_package) for forbidden, why in rules
                  if _under(imported, forbidden) and not _under(imported, (name,)))


MODULES = _modules()


@pytest.mark.parametrize("name,path", MODULES, ids=lambda v: v if isinstance(v, str) else "")
def test_imports_point_one_way(name: str, path: Path) -> None:
    wrong = wrong_imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert not wrong, f"{name} imports {', '.join(i for i, _ in wrong)}: {wrong[0][1]}"


def test_the_check_reads_the_tree() -> None:
    """A layout test that finds no modules or no imports passes vacuously: it must see every layer and its imports."""
    names = [name for name, _ in MODULES]
    for layer in (SHARED, TASKS, ENTRY, RPC, WRITE, PUBLISH, COMMANDS, TESTER, BENCH, TESTBED):
        assert any(_under(n, layer) for n in names), f"no module found for {layer}"
    imported = sum(len(imports_of(n, p.read_text(encoding="utf-8"), p.name == "__init__.py")) for n, p in MODULES)
    assert imported > 300, f"only {imported} project imports read: the check is not reading the tree"


def test_a_relative_import_across_layers_is_caught() -> None:
    """A relative import counts like an absolute one (`from ..write import runner` inside destination.model)."""
    assert imports_of("destination.changes.files", "from ..write import runner\n") >= {"destination.write.runner"}
    wrong = wrong_imports("destination.changes.files", "from ..write import runner\n")
    assert [i for i, _ in wrong] == ["destination.write", "destination.write.runner"]
    assert wrong_imports("spark_jobs.tasks", "from .. import merge\nfrom ..contracts import JobContext\n",
                         is_package=True) == []
    assert next(i for i, _ in wrong_imports("bench.fleet", "from tests.serverproc import start_server\n")) == "tests.serverproc"


def test_every_module_has_a_place() -> None:
    """Every module of `destination` is in a known layer's folder: a folder of the code of both, or a driver package or module.
    A new package must be added to a layer here and to docs/ARCHITECTURE.md."""
    placed = SHARED + DRIVER
    unplaced = [name for name, _ in MODULES if name.startswith("destination.") and not _under(name, placed)]
    assert not unplaced, f"modules outside every layer's folder: {unplaced}"
