"""Apache Iceberg's own Java library (1.10) inside real Spark 3.5, the reference reader of Iceberg, for tests: it
reads a table by path (`spark.read.format("iceberg").load(<metadata json>)`) and returns the rows.

The project's Spark is pyspark 4; Iceberg's Spark runtime jar is built for Spark 3.5, so the reader runs in an
environment of its own, made once and kept in `.venv-iceberg-spark/` at the repository root (git-ignored), from PyPI
only: `pyspark==3.5.*` and `snowpark-connect-deps-iceberg` (it ships `iceberg-spark-runtime-3.5_2.12-1.10.2.jar`).
That jar references Jackson relocated to `org.apache.iceberg.shaded.com.fasterxml.jackson` but does not carry it;
pyspark 3.5 carries the plain Jackson jars (core, databind, annotations), and `relocate_jar` writes a copy of them
under the shaded package. The relocation is written here in Python, over the class files' constant pools, because a
fresh machine has no Maven (whose shade plugin does this) and Debian's jarjar would need a system install as root;
the rewrite is a plain renaming of the `com/fasterxml/jackson/` prefix in the constant pool's UTF-8 entries (class
names, descriptors, reflection strings) and in the entry paths and service files.

With `catalog` (`jdbc_catalog`), the session also has Iceberg's `JdbcCatalog` under a name of its own, over the `sql`
catalog's database (SQLite or PostgreSQL), its JDBC driver from Debian (`libxerial-sqlite-jdbc-java`,
`libpostgresql-jdbc-java`, installed by scripts/bootstrap) on the driver's class path (java.sql.DriverManager sees
only the system class loader's drivers, not `spark.jars`); a request may then be a SQL statement
(`SELECT * FROM cat.ns.t VERSION AS OF n`, `SHOW TABLES IN cat.ns`, `DESCRIBE cat.ns.t`).

Spark here reads local paths only: S3 through Spark needs the hadoop-aws and AWS SDK jars (or, for Iceberg's own
S3FileIO, which the runtime jar holds, the AWS SDK v2 bundle), which PyPI does not carry, so the tests read tables
written to local disk.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENV = REPO / ".venv-iceberg-spark"
RUNTIME_JAR = "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON_JARS = ("jackson-core-", "jackson-databind-", "jackson-annotations-")
SHADED_JAR = "iceberg-shaded-jackson.jar"
PACKAGES = ("pyspark==3.5.*", "snowpark-connect-deps-iceberg")
PLAIN, SHADED = "com/fasterxml/jackson/", "org/apache/iceberg/shaded/com/fasterxml/jackson/"
READ_SECONDS = 600
JDBC_DRIVERS = {"sqlite": ("/usr/share/java/sqlite-jdbc.jar", "libxerial-sqlite-jdbc-java"),
                "postgresql": ("/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java")}
SQLITE_JNI = "/usr/lib/x86_64-linux-gnu/jni"  # Debian's sqlite-jdbc loads its native library from here


class ReaderSetupError(RuntimeError):
    """The Java reader's environment could not be made (the test fails with this reason)."""


# ---- relocation of class files: JVM spec §4.4, the constant pool entries and their sizes after the tag byte
_SIZES = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


def _rename(data: bytes) -> bytes:
    return (data.replace(PLAIN.encode(), SHADED.encode())
            .replace(PLAIN.replace("/", ".").encode(), SHADED.replace("/", ".").encode()))


def relocate_class(data: bytes) -> bytes:
    """The class file with every UTF-8 constant naming `com/fasterxml/jackson/…` (or its dotted form) renamed."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack_from(">H", data, 8)[0]
    out = [data[:10]]
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            length = struct.unpack_from(">H", data, pos + 1)[0]
            text = _rename(data[pos + 3:pos + 3 + length])
            out.append(bytes([1]) + struct.pack(">H", len(text)) + text)
            pos += 3 + length
        else:
            size = _SIZES[tag]
            out.append(data[pos:pos + 1 + size])
            pos += 1 + size
        index += 2 if tag in (5, 6) else 1  # a long or double takes two entries
    out.append(data[pos:])
    return b"".join(out)


def relocate_jar(sources: list[Path], target: Path) -> None:
    """One jar holding the classes and service files of `sources`, relocated under the shaded package."""
    written: set[str] = set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for source in sources:
            with zipfile.ZipFile(source) as jar:
                for item in jar.infolist():
                    name = item.filename
                    if item.is_dir() or name.endswith("module-info.class"):
                        continue
                    if name.startswith(PLAIN) and name.endswith(".class"):
                        data = relocate_class(jar.read(item))
                    elif name.startswith("META-INF/services/com.fasterxml.jackson."):
                        data = _rename(jar.read(item))
                    else:
                        continue
                    name = _rename(name.encode()).decode()
                    if name not in written:
                        written.add(name)
                        out.writestr(name, data)


# ---- the environment
def _python() -> Path:
    return ENV / "bin" / "python"


def _site_packages() -> Path:
    found = sorted((ENV / "lib").glob("python3*/site-packages"))
    if not found:
        raise ReaderSetupError(f"no site-packages in {ENV}")
    return found[-1]


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if done.returncode:
        raise ReaderSetupError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")


def ensure_environment() -> list[Path]:
    """The reader's jars (Iceberg's runtime and the relocated Jackson), making the environment first if needed."""
    shaded = ENV / SHADED_JAR
    if not shaded.exists():
        if not _python().exists():
            _run([sys.executable, "-m", "venv", str(ENV)], "creating the venv")
        _run([str(_python()), "-m", "pip", "install", "-q", *PACKAGES], f"pip install {' '.join(PACKAGES)}")
        jars = _site_packages() / "pyspark" / "jars"
        jackson = [j for prefix in JACKSON_JARS for j in sorted(jars.glob(f"{prefix}2*.jar"))]
        if len(jackson) != len(JACKSON_JARS):
            raise ReaderSetupError(f"pyspark's Jackson jars not found in {jars}: {[j.name for j in jackson]}")
        partial = shaded.with_suffix(".tmp")
        relocate_jar(jackson, partial)
        partial.replace(shaded)
    runtime = sorted(_site_packages().glob(f"snowpark_connect_deps_iceberg/**/{RUNTIME_JAR}"))
    if not runtime:
        raise ReaderSetupError(f"{RUNTIME_JAR} not found in {_site_packages()}")
    return [runtime[0], shaded]


# ---- reading
_CHILD = r'''
import decimal, json, sys
from pyspark.sql import SparkSession, functions as F

jars, requests, settings = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
builder = (SparkSession.builder.master("local[1]").appName("iceberg-reader").config("spark.jars", ",".join(jars))
           .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
           .config("spark.driver.memory", "1g").config("spark.sql.shuffle.partitions", "1"))
for key, value in settings.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")


def tagged(v):
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, decimal.Decimal):
        return {"decimal": str(v)}
    if isinstance(v, (bytes, bytearray)):
        return {"binary": bytes(v).hex()}
    return v


out = []
for request in requests:
    try:
        if "sql" in request:
            frame = spark.sql(request["sql"])
        else:
            reader = spark.read.format("iceberg")
            if request.get("snapshot_id") is not None:
                reader = reader.option("snapshot-id", str(request["snapshot_id"]))
            frame = reader.load(request["path"])
        types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        # timestamps and dates as their numbers (Python's datetime stops at year 1; Spark's values are exact)
        exact = [F.unix_micros(F.col(n).cast("timestamp")).alias(n) if t.startswith("timestamp")
                 else F.unix_date(F.col(n)).alias(n) if t == "date" else F.col(n) for n, t in types.items()]
        rows = []
        for r in frame.select(*exact).collect():
            rows.append({k: ({"micros": v} if v is not None and types[k].startswith("timestamp") else
                             {"days": v} if v is not None and types[k] == "date" else tagged(v))
                         for k, v in r.asDict().items()})
        out.append({"columns": frame.columns, "types": list(types.values()), "rows": rows})
    except Exception as exc:
        out.append({"error": f"{type(exc).__name__}: {str(exc)[:2000]}"})
print("RESULT " + json.dumps(out))
spark.stop()
'''


_EPOCH = dt.datetime(1970, 1, 1)


def _untag(value: Any) -> Any:
    """A value as Python holds it (a timestamp as naive UTC, the form `lake_readers.canonical` compares)."""
    if not isinstance(value, dict):
        return value
    (kind, raw), = value.items()
    if kind == "micros":
        return _EPOCH + dt.timedelta(microseconds=raw)
    if kind == "days":
        return _EPOCH.date() + dt.timedelta(days=raw)
    return {"float": float, "decimal": Decimal, "binary": bytes.fromhex}[kind](raw)


def jdbc_catalog(name: str, uri: str, warehouse: str) -> dict[str, str]:
    """Spark's settings for Iceberg's JdbcCatalog `name` over the `sql` catalog's database (its SQLAlchemy URL):
    the configuration docs/guide/catalogs.md gives users, plus the JDBC driver on the driver's class path."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    kind = url.get_backend_name()
    if kind not in JDBC_DRIVERS:
        raise ReaderSetupError(f"no JDBC driver known for the catalog database {kind!r}")
    jar, package = JDBC_DRIVERS[kind]
    if not Path(jar).exists():
        raise ReaderSetupError(f"the {kind} JDBC driver {jar} is missing: install Debian's {package} "
                               "(scripts/bootstrap does)")
    prefix = f"spark.sql.catalog.{name}"
    settings = {prefix: "org.apache.iceberg.spark.SparkCatalog",
                f"{prefix}.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
                f"{prefix}.jdbc.schema-version": "V1", f"{prefix}.warehouse": warehouse,
                "spark.driver.extraClassPath": jar}
    if kind == "sqlite":
        settings[f"{prefix}.uri"] = f"jdbc:sqlite:{url.database}"
        settings["spark.driver.extraJavaOptions"] = f"-Djava.library.path={SQLITE_JNI}"
    else:
        settings[f"{prefix}.uri"] = f"jdbc:postgresql://{url.host}:{url.port or 5432}/{url.database}"
        settings[f"{prefix}.jdbc.user"] = url.username or ""
        settings[f"{prefix}.jdbc.password"] = url.password or ""
    return settings


def read_tables(requests: list[dict[str, Any]], settings: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Each request ({"path": metadata json or table folder, "snapshot_id": optional}, or {"sql": a statement})
    read by Iceberg's Java library in one Spark 3.5 session with the extra Spark `settings` (`jdbc_catalog`):
    {"columns", "types", "rows"} (rows as Python values), or {"error"}."""
    jars = ensure_environment()
    env = {**os.environ, "TZ": "UTC", "PYSPARK_PYTHON": str(_python()), "SPARK_HOME": "",
           "JAVA_HOME": os.environ.get("JAVA_HOME") or str(Path(shutil.which("java") or "java").resolve().parents[1])}
    env.pop("SPARK_HOME")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(_python()), "-c", _CHILD, json.dumps([str(j) for j in jars]), json.dumps(requests),
                           json.dumps(settings or {})],
                          capture_output=True, text=True, timeout=READ_SECONDS, env=env)
    result = next((line for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
    if done.returncode or result is None:
        raise ReaderSetupError(f"Spark 3.5 with Iceberg failed ({done.returncode}): {done.stderr[-3000:]}")
    answers: list[dict[str, Any]] = json.loads(result[len("RESULT "):])
    for answer in answers:
        if "rows" in answer:
            answer["rows"] = [{k: _untag(v) for k, v in row.items()} for row in answer["rows"]]
    return answers
