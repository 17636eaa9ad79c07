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


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory: pytest.TempPathFactory):
    """One local Ray for the whole test session: no dashboard, auth disabled, its own temp dir."""
    import os

    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import logging

    import ray

    if not ray.is_initialized():
        # a short temp dir: Ray's unix socket paths must stay under 107 characters
        import tempfile

        tmp = tempfile.mkdtemp(prefix="sw-ray-", dir="/tmp")
        ray.init(num_cpus=2, resources={"spot": 8}, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False, _temp_dir=tmp)
    yield ray
    ray.shutdown()


@pytest.fixture()
def ray_unimportable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import ray`` raises ImportError for the duration of a test (for Ray-free code paths)."""
    import sys

    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)
