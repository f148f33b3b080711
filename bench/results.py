"""A run's measurements as results.json keeps them, and as the report reads them."""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Measurement:
    scenario: str
    backend: str
    table: str
    rows: int
    plain_bytes: int
    seconds: float
    peak_total: int
    peak_jvm: int
    peak_python: int
    bytes_written: int
    files_written: int
    files_rewritten: int
    baseline: str = ""
    baseline_seconds: float | None = None
    target: str = ""  # load | merge | "" (no pyarrow ratio)
    scale: int = 0  # the pass's table rows (--rows)
    group: str = ""
    duckdb_seconds: float | None = None  # DuckDB's merge of the same change, measured just before
    table_bytes_before: int = 0  # data bytes of the version the request started from
    bytes_rewritten: int = 0  # bytes of that version's files not carried into the new one
    table_bytes_after: int = 0
    files_after: int = 0
    stored_bytes: int = 0  # everything under the table's folder afterwards (measured where the report needs it)
    table_rows_after: int = 0

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    @property
    def write_amplification(self) -> float | None:
        """Data bytes written over the change's rows as Parquet, those estimated at the table's own stored bytes per
        row afterwards; None without the figures (a read, or a measurement kept from before they were recorded)."""
        if not (self.rows and self.table_rows_after and self.table_bytes_after):
            return None
        return self.bytes_written / (self.rows * self.table_bytes_after / self.table_rows_after)

    @property
    def mb_per_second(self) -> float:
        return self.plain_bytes / 1e6 / self.seconds if self.seconds else 0.0


@dataclass
class Run:
    scales: list[int]
    started: float = field(default_factory=time.time)
    measurements: list[Measurement] = field(default_factory=list)
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)  # "backend, N rows" -> baseline -> seconds
    # per pass ("backend, N rows"): the configuration fields passed to the server (layout, …) and, under "ignored",
    # those its form does not list
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    shape: dict[str, Any] = field(default_factory=dict)
    fleet: dict[str, Any] = field(default_factory=dict)  # backend -> the fleet pass's figures (bench/fleet.py)
    soak: dict[str, Any] = field(default_factory=dict)  # backend -> the soak pass's figures (bench/soak.py)
    steady: dict[str, Any] = field(default_factory=dict)  # backend -> the steady pass's figures (bench/steady.py)


def pass_key(backend: str, scale: int) -> str:
    return f"{backend}, {scale:,} rows"


def passed_fields(run: Run, key: str) -> str:
    """The configuration fields the pass `key` gave the server, as the report names them."""
    settings = run.settings.get(key, {})
    ignored = settings.get("ignored", [])
    return ", ".join(f"`{k}` = `{v}`" + (" (unknown to this server: ignored)" if k in ignored else "")
                     for k, v in sorted(settings.get("configuration", {}).items())) or "none (the server's defaults)"


def ran_on(run: Run, part: dict[str, Any] | None = None) -> str:
    """Where a section's figures come from, as its heading names it: `(`d83ee4b`, 2026-11-27)`, the code and date
    of the pass or group result `part` (its `code` and `started`, recorded as it ran), else of the run. A report
    merges runs of different days and code (`--from-results`, sections written by runs of one group), so each section
    says its own."""
    part = part or {}
    code = part.get("code") or run.shape.get("code") or "code not recorded"
    started = part.get("started") or run.started
    return f"(`{code}`, {time.strftime('%Y-%m-%d', time.localtime(started))})"


def origin(run: Run) -> dict[str, Any]:
    """What `ran_on` reads, for a pass or a group's result measured now."""
    return {"started": time.time(), "code": run.shape.get("code", "")}


def code_version() -> str:
    """The commit the benchmark's code is at (`-dirty` when tracked files differ from it), for a report to name what
    its figures measured; empty outside a git checkout."""
    repo = str(Path(__file__).resolve().parent.parent)
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + ("-dirty" if changed else "")


def load_results(paths: list[Path]) -> Run:
    """Runs as their results.json files recorded them, as one (e.g. local scales and an S3 scale run apart)."""
    names = {f.name for f in fields(Measurement)}
    runs = []
    for path in paths:
        data = json.loads(path.read_text())
        scales = data.get("scales") or [data["rows"]]
        measurements = [Measurement(**{k: v for k, v in m.items() if k in names}) for m in data["measurements"]]
        for m in measurements:
            m.scale = m.scale or scales[0]
        runs.append(Run(scales, data.get("started", path.stat().st_mtime), measurements, data["baselines"],
                        data.get("settings", {}), data.get("shape", {}), data.get("fleet", {}),
                        data.get("soak", {}), data.get("steady", {})))
    merged = runs[0]
    for other in runs[1:]:
        merged.scales = sorted(set(merged.scales) | set(other.scales))
        merged.measurements += other.measurements
        merged.baselines.update(other.baselines)
        merged.settings.update(other.settings)
        merged.fleet.update(other.fleet)
        merged.soak.update(other.soak)
        merged.steady.update(other.steady)
    return merged


def save(run: Run, path: Path) -> None:
    path.write_text(json.dumps({"scales": run.scales, "started": run.started, "baselines": run.baselines,
                                "settings": run.settings, "shape": run.shape, "fleet": run.fleet, "soak": run.soak,
                                "steady": run.steady,
                                "measurements": [asdict(m) for m in run.measurements]}, indent=1))
