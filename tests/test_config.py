"""Job spec: loading, validation messages that name the field and the fix, and fuzzing."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotwise.config import JobSpec, load_spec, spec_from_dict
from spotwise.errors import InputError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_loads(path: Path) -> None:
    spec = load_spec(path)
    assert isinstance(spec, JobSpec)
    assert spec.cluster.workers >= 1
    # round trip: the echoed spec builds the same spec again
    again = spec_from_dict(spec.to_dict())
    assert again.to_dict() == spec.to_dict()


def test_demo_values() -> None:
    spec = load_spec(EXAMPLES / "demo.yaml")
    assert spec.deadline_s == 3600.0
    assert spec.cluster.bid_list() == [0.17] * 4 + [0.09] * 4
    assert spec.market.synthetic is not None and spec.market.synthetic.duration_s == 86400.0
    assert spec.market.synthetic.interval_s == 30.0


def test_relative_paths_resolve_against_spec_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    spec_file = tmp_path / "sub" / "job.yaml"
    (tmp_path / "t.json").write_text("{}")  # a file the spec names must exist (issue 54 item 9)
    spec_file.write_text(yaml.safe_dump({
        "name": "j", "workload": {"name": "mlp-digits"}, "target": {"iterations": 5},
        "cluster": {"instance_type": "c5.xlarge"}, "market": {"traces": ["../t.json"]},
    }))
    spec = load_spec(spec_file)
    assert spec.market.traces == [str((tmp_path / "t.json").resolve())]


BASE = {
    "name": "j",
    "workload": {"name": "mlp-digits"},
    "target": {"iterations": 100},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4},
}


def _with(path: str, value: object) -> dict:
    d = copy.deepcopy(BASE)
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return d


@pytest.mark.parametrize(
    ("path", "value", "where", "says"),
    [
        ("cluster.workers", -3, "cluster.workers", "must be > 0"),
        ("cluster.workers", "eight", "cluster.workers", "expected an integer"),
        ("cluster.wokers", 3, "cluster", "did you mean 'workers'"),
        ("cluster.sync", "nsync", "cluster.sync", "did you mean 'n-sync'"),
        ("cluster.sync", "n-sync", "cluster.sync_n", "needs sync_n"),
        ("cluster.sync_n", 2, "cluster.sync_n", "only applies"),
        ("cluster.bids", [0.5, 0.6], "cluster.bids", "2 bids for 4 workers"),
        ("cluster.bids", -1, "cluster.bids", "not a positive price"),
        ("cluster.max_workers", 2, "cluster.max_workers", "below workers"),
        ("deadline", "2 fortnights", "deadline", "expected a duration"),
        ("deadline", -5, "deadline", "must be > 0"),
        ("target", {}, "target", "needs iterations, samples, hours and/or loss"),
        ("workload.name", "resnet9000", "workload.name", "unknown workload"),
        ("workload.name", "bad module:fn", "workload.name", "malformed"),
        ("market.revocation.model", "bernoulli", "market.revocation", "needs q"),
        ("market.revocation.q", 1.5, "market.revocation.q", "probability"),
        ("market.revocation.model", "bid", "cluster.bids", "needs bids"),
        ("market.revocation.model", "trace", "market.revocation.model", "needs market.traces"),
        ("market.synthetic.kind", "markov", "market.synthetic.fit_to", "fit_to"),
        ("market.synthetic.high", 0.1, "market.synthetic.high", "must exceed low"),
        ("budget_usd", 0, "budget_usd", "must be > 0"),
        ("colour", "blue", "spec", "unknown field 'colour'"),
    ],
)
def test_invalid_fields_are_named_with_a_fix(path: str, value: object, where: str, says: str) -> None:
    with pytest.raises(InputError) as info:
        spec_from_dict(_with(path, value), "spec")
    err = info.value
    assert says in err.message
    assert err.where is not None and err.where.startswith("spec") and where.replace("spec", "") in err.where
    assert err.fix, "every spec error must say how to fix it"


def test_missing_required_field() -> None:
    d = copy.deepcopy(BASE)
    del d["cluster"]
    with pytest.raises(InputError, match="cluster: required field is missing -- add 'cluster:'"):
        spec_from_dict(d, "spec")


def test_durations_accept_units() -> None:
    for text, seconds in [("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1.5d", 129600.0), (45, 45.0)]:
        assert spec_from_dict(_with("deadline", text)).deadline_s == seconds


def test_load_spec_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML at line"):
        load_spec(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(InputError, match="must be a YAML mapping"):
        load_spec(lst)
    with pytest.raises(InputError, match="is a directory"):
        load_spec(tmp_path)


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=12))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                       max_leaves=12)
_paths = st.sampled_from([
    "name", "seed", "deadline", "budget_usd", "workload", "workload.name", "workload.batch_size", "workload.lr",
    "target", "target.iterations", "target.loss", "cluster", "cluster.workers", "cluster.sync", "cluster.sync_n",
    "cluster.bids", "cluster.instance_type", "market", "market.traces", "market.synthetic", "market.synthetic.kind",
    "market.synthetic.low", "market.synthetic.interval_s", "market.revocation", "market.revocation.model",
    "market.revocation.q", "market.billing", "policies", "outputs", "outputs.checkpoint_every", "extra.key",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_paths, _values), min_size=1, max_size=4))
def test_fuzz_spec_loader_only_raises_input_error(mutations: list[tuple[str, object]]) -> None:
    d = copy.deepcopy(BASE)
    for path, value in mutations:
        try:
            d = _with_on(d, path, value)
        except TypeError:
            return  # parent replaced by a scalar: nothing to mutate
    try:
        spec = spec_from_dict(d, "fuzz")
    except InputError as e:
        assert e.message and "fuzz" in e.message
    else:
        assert isinstance(spec, JobSpec)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_yaml_text(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    p = tmp_path_factory.mktemp("spec") / "s.yaml"
    p.write_text(text, encoding="utf-8")
    try:
        load_spec(p)
    except InputError:
        pass


def _with_on(d: dict, path: str, value: object) -> dict:
    node = d
    keys = path.split(".")
    for k in keys[:-1]:
        nxt = node.get(k) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            if not isinstance(node, dict):
                raise TypeError
            nxt = {}
            node[k] = nxt
        node = nxt
    node[keys[-1]] = value
    return d
