"""`records-destination tester`: check the inputs, then drive the server with them, one file after another, and end
with one line per file and a total."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from destination.tester.display import CallProgress
from destination.tester.harness import Harness, batch_path_map, batch_workdir
from destination.tester.inputs import InputFile, InputPlan, TesterInputError, plan_inputs


@dataclass(frozen=True)
class FileResult:
    file: InputFile
    calls: int
    failures: int


def new_run_id(now: float | None = None) -> str:
    """The run's start time in UTC to the millisecond (20261125193000123): a folder's schemas are new each run."""
    now = time.time() if now is None else now
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"


def _configuration_name(path: Path | None) -> str:
    return str(path) if path is not None else "(no configuration file)"


def _checked_plan(input_path: str, schema: str, run_id: str, configuration_file: str | None) -> InputPlan | None:
    """The run's plan, or None after printing why nothing can be sent (a missing input, a mistake in a file)."""
    try:
        plan = plan_inputs(Path(input_path), schema, run_id, configuration_file)
    except TesterInputError as exc:
        print(f"FAIL {exc}")
        return None
    for note in plan.skipped:
        print(f"skip {note}")
    for problem in plan.problems:
        print(f"FAIL {problem}")
    if plan.problems:
        print(f"summary: {len(plan.problems)} mistake(s) in the input files; nothing was sent")
        return None
    if not plan.files:
        print(f"FAIL no input files (*.json) in {input_path!r}")
        return None
    return plan


def _report(results: list[FileResult], harness: Harness) -> None:
    print("files:")
    for r in results:
        outcome = f"{r.calls} call{'' if r.calls == 1 else 's'}" + (f", {r.failures} failed" if r.failures else "")
        print(f"{'FAIL' if r.failures else 'PASS'} {r.file.name} (schema {r.file.schema}): {outcome}")
    failed_files = sum(1 for r in results if r.failures)
    warnings = f"; {harness.warnings} warning(s)" if harness.warnings else ""
    print(f"summary: {len(results)} files, {len(results) - failed_files} passed, {failed_files} failed; "
          f"{harness.calls} calls, {harness.calls - harness.failures} succeeded, {harness.failures} failed{warnings}")


def run_tester(input_path: str, *, address: str, schema: str, plain_text: bool, batch_file_type: str,
               configuration_file: str | None = None, batch_dir: str | None = None,
               server_batch_dir: str | None = None, connect_timeout: float = 10.0, status_url: str | None = None,
               run_id: str | None = None) -> int:
    """0 when every call succeeded, 1 when some failed, 2 when nothing could be sent."""
    plan = _checked_plan(input_path, schema, run_id or new_run_id(), configuration_file)
    if plan is None:
        return 2
    first = plan.files[0]
    with batch_workdir(batch_dir) as workdir:
        paths = batch_path_map(workdir, batch_dir, server_batch_dir)
        progress = CallProgress(sys.stdout, sys.stdout.isatty(), status_url, first.schema)
        harness = Harness(address, first.schema, plan.configurations[first.configuration], plain_text,
                          batch_file_type, workdir, paths, progress)
        try:
            grpc.channel_ready_future(harness.channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            print(f"FAIL cannot reach the destination at {address} within {connect_timeout:g} s "
                  "(is the server running? --connect-timeout waits longer)")
            return 2
        harness.setup({_configuration_name(path): c for path, c in plan.configurations.items()})
        results = []
        for f in plan.files:
            configuration = "" if f.configuration is None else f", configuration {f.configuration}"
            print(f"== {f.name} (schema {f.schema}{configuration})")
            calls, failures = harness.calls, harness.failures
            harness.start_file(f.schema, plan.configurations[f.configuration])
            harness.run_input(f.data, f.path.stem)
            results.append(FileResult(f, harness.calls - calls, harness.failures - failures))
    _report(results, harness)
    return 1 if harness.failures else 0
