"""The cluster provider's startup wait is the one the run uses (issue 39 item 3).

``cluster_controller`` used to overwrite the provider's waits with its own defaults, so an
autoscaling run -- whose provider waits ``AUTOSCALE_STARTUP_S`` for its first spot node, a VM that
boots in minutes -- gave up after 120 s (on a busy machine, before the fake provider's node was up).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_runtime import make_spec

import spotwise.assemble
from spotwise.capacity.cluster import AUTOSCALE_STARTUP_S, ClusterProvider, cluster_controller


@pytest.fixture()
def no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spotwise.assemble, "build_controller", lambda *a, **kw: kw["provider"])


def test_autoscaling_provider_keeps_its_startup_wait(no_build, tmp_path: Path) -> None:
    provider = ClusterProvider((), autoscale=True, startup_timeout_s=AUTOSCALE_STARTUP_S, capacity_timeout_s=77.0)
    got = cluster_controller(make_spec(), tmp_path, provider=provider)
    assert got is provider
    assert provider.startup_timeout_s == AUTOSCALE_STARTUP_S and provider.capacity_timeout_s == 77.0


def test_given_waits_replace_the_providers(no_build, tmp_path: Path) -> None:
    provider = ClusterProvider((), autoscale=True)
    cluster_controller(make_spec(), tmp_path, provider=provider, startup_timeout_s=5.0, capacity_timeout_s=6.0)
    assert provider.startup_timeout_s == 5.0 and provider.capacity_timeout_s == 6.0
