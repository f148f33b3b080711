"""A Spark JVM that dies at any moment around a request's job makes that job SparkUnavailable (gRPC UNAVAILABLE,
retryable), never another error, and the next job runs on a new session. Each scenario runs in a Spark driver
process of its own (tests/jvm_deaths.py), since it kills that process's JVM."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jvm_deaths import SCENARIOS

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_job_on_a_session_whose_jvm_died_is_unavailable_and_the_next_job_runs(scenario: str, tmp_path: Path) -> None:
    stderr = tmp_path / "driver.err"
    with open(stderr, "wb") as errors:
        done = subprocess.run([sys.executable, "-m", "tests.jvm_deaths", scenario], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=errors, timeout=300)
    assert done.returncode == 0, stderr.read_text()[-4000:]
    outcome = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert outcome["job"].startswith("SparkUnavailable: the Spark JVM stopped during the job"), outcome
    if scenario == "restart-fails":
        assert outcome["restart"].startswith("SparkUnavailable: the new Spark JVM exited before it started"), outcome
    assert outcome["next"] == "ok: [0, 2, 4]", outcome  # 2 × each unit, computed by a new JVM's tasks
