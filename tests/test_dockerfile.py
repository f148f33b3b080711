"""The Dockerfile passes hadolint and keeps its promises (non-root, port, health check, ARG BASE)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    out = subprocess.run([str(hadolint), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dockerfile_promises() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE=" in text and "FROM ${BASE}" in text
    assert "EXPOSE 50052" in text and "HEALTHCHECK" in text and "destination.healthcheck" in text
    assert "USER 10001" in text and "openjdk-17-jre-headless" in text
    assert 'ENTRYPOINT ["records-destination", "serve"]' in text
