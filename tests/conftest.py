"""Shared test fixtures: where the real traces live, and a helper to run the CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """../shared/data/traces, or a visible skip when this checkout has no shared/ beside it."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not found at {TRACES} (clone the project next to shared/ to run these)")
    return TRACES


@pytest.fixture()
def cli():
    """Run the spotwise CLI in-process; returns (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from spotwise.cli import app

    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str, str]:
        res = runner.invoke(app, list(args), catch_exceptions=False)
        return res.exit_code, res.stdout, res.stderr

    return invoke
