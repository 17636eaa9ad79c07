"""Issue 41: the own-loop API (``spotwise.elastic.Job``) on its own, in this process: a plain loop with
torch's schedulers and GradScaler stepping as they would without spotwise, dropped steps moving none of
them, and what is refused at the first step.  No Ray; the runs of a script as a job are in
``tests/test_own_loop.py``.
"""

from __future__ import annotations

import pytest

def test_on_its_own_the_api_is_a_plain_loop_and_drops_bad_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    backend = LocalBackend(seed=3)
    job = Job(backend)
    torch.manual_seed(0)
    model = job.model(torch.nn.Linear(2, 1))
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    data = torch.utils.data.TensorDataset(torch.arange(10.0).view(5, 2), torch.ones(5, 1))
    seen = []
    for x, y in job.data(data, batch_size=2, epochs=2):
        loss = ((model(x) - y) ** 2).mean()
        job.backward(loss)
        assert opt.step() is True
        opt.zero_grad()
        seen.append(len(x))
        job.log(loss=loss, bad=float("nan"), text="x")
    assert sum(seen) == 10 and job.step == len(seen) and job.samples == 10
    assert all(set(v) == {"loss"} for _, v in backend.logged)
    err = capsys.readouterr().err
    assert "not finite: dropped" in err and "not a number" in err
    with pytest.raises(RuntimeError, match="called twice"):
        job.data(data, batch_size=2)


@pytest.mark.parametrize("kind", ["cosine", "warmup-then-cosine", "one-cycle", "lambda-on-the-raw-optimizer"])
def test_torchs_lr_schedulers_on_the_wrapped_optimizer_step_as_in_a_plain_loop(kind: str) -> None:
    """A scheduler is built on what job.optimizer() returned (or on the optimizer it wraps), registered
    with job.scheduler(): the rates and the parameters equal the same loop without spotwise, and the
    scheduler's state_dict is PyTorch's own (torch.save takes it)."""
    import io

    import torch
    from torch.optim import lr_scheduler as L

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    def build(opt: Any, raw: Any) -> Any:
        if kind == "cosine":
            return L.CosineAnnealingLR(opt, 12)
        if kind == "warmup-then-cosine":
            return L.SequentialLR(opt, [L.LinearLR(opt, 0.1, 1.0, 3), L.CosineAnnealingLR(opt, 9)], [3])
        if kind == "one-cycle":
            return L.OneCycleLR(opt, 0.5, total_steps=20)
        return L.LambdaLR(raw, lambda s: 0.9 ** s)

    data = torch.utils.data.TensorDataset(torch.randn(48, 4, generator=torch.Generator().manual_seed(0)),
                                          torch.randn(48, 2, generator=torch.Generator().manual_seed(1)))

    def train(wrapped: bool) -> tuple[list[float], Any, Any]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        raw = torch.optim.AdamW(model.parameters(), lr=0.1)
        opt, batches = raw, None
        if wrapped:
            job = Job(LocalBackend(seed=0))
            model = job.model(model)
            opt = job.optimizer(raw)
        sched = build(opt, raw)
        if wrapped:
            job.scheduler(sched)
            batches = job.data(data, batch_size=4, epochs=1)
        else:  # the same order the job's data come in
            from spotwise.elastic.positions import StreamPosition

            order = StreamPosition(48, 0).indices(0, 48)
            batches = [data[torch.as_tensor(order[i:i + 4])] for i in range(0, 48, 4)]
        rates = []
        for x, y in batches:
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            rates.append(opt.param_groups[0]["lr"])
        return rates, model.state_dict(), sched.state_dict()

    got, params, sd = train(True)
    want, want_params, want_sd = train(False)
    assert len(got) == 12 and got == want
    assert all(torch.equal(params[k], want_params[k]) for k in want_params)
    assert set(sd) == set(want_sd) and sd["last_epoch"] == want_sd["last_epoch"] == 12
    torch.save(sd, io.BytesIO())  # the user's own checkpoint of it: nothing of spotwise's in it


def test_a_scheduler_skips_a_dropped_step_and_an_unregistered_one_is_refused_at_the_first_batch() -> None:
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    data = torch.utils.data.TensorDataset(torch.randn(16, 2), torch.randn(16, 1))
    backend = LocalBackend(seed=0)
    job = Job(backend)
    model = job.model(torch.nn.Linear(2, 1))
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=1.0))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    job.scheduler(sched)
    commits = iter([True, False, True, True])  # the second step is dropped (a member was lost in it)
    real = backend.commit
    backend.commit = lambda amp=None, index=0: real(amp, index) and next(commits)  # type: ignore[method-assign]
    rates = []
    for x, y in job.data(data, batch_size=4, epochs=1):
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        rates.append(opt.param_groups[0]["lr"])
    assert rates == [1 / 2, 1 / 2, 1 / 3, 1 / 4], rates  # the dropped step did not advance the schedule

    job2 = Job(LocalBackend(seed=0))
    model2 = job2.model(torch.nn.Linear(2, 1))
    opt2 = job2.optimizer(torch.optim.SGD(model2.parameters(), lr=1.0))
    torch.optim.lr_scheduler.StepLR(opt2, 2)  # built, never registered
    with pytest.raises(RuntimeError, match=r"job\.scheduler\(scheduler\) before the first batch"):
        next(iter(job2.data(data, batch_size=4)))
    job3 = Job(LocalBackend(seed=0))
    job3.optimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters()))
    with pytest.raises(ValueError, match="does not wrap"):
        job3.scheduler(torch.optim.lr_scheduler.StepLR(torch.optim.SGD(torch.nn.Linear(1, 1).parameters()), 2))
    with pytest.raises(RuntimeError, match=r"job\.scheduler\(\) after job\.data\(\)"):
        job.scheduler(torch.optim.lr_scheduler.StepLR(opt, 2))


@pytest.mark.parametrize("unscale_first", [False, True], ids=["scaler-step", "unscale-clip-step"])
def test_a_gradscaler_skips_overflows_and_unscales_as_in_a_plain_loop(unscale_first: bool) -> None:
    """torch.amp.GradScaler given to job.optimizer(..., scaler=): the step takes the scaler's found_inf
    and grad_scale (PyTorch's amp-scaling protocol) -- overflowing steps update nothing, the others are
    unscaled -- and the parameters and the scale's history equal the same loop without spotwise (the
    scaler starting so high that the first steps overflow, then growing back)."""
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend
    from spotwise.elastic.positions import StreamPosition

    data = torch.utils.data.TensorDataset(torch.randn(96, 4, generator=torch.Generator().manual_seed(0)),
                                          torch.randn(96, 2, generator=torch.Generator().manual_seed(1)))

    def train(wrapped: bool) -> tuple[list[float], dict[str, Any]]:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        raw = torch.optim.AdamW(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=3)
        if wrapped:
            job = Job(LocalBackend(seed=0))
            model = job.model(model)
            opt: Any = job.optimizer(raw, scaler=scaler)
            batches: Any = job.data(data, batch_size=4, epochs=1)
        else:
            opt = raw
            order = StreamPosition(96, 0).indices(0, 96)
            batches = [data[torch.as_tensor(order[i:i + 4])] for i in range(0, 96, 4)]
        scales = []
        for x, y in batches:
            loss = ((model(x) - y) ** 2).mean() * 1e3
            scaler.scale(loss).backward()
            if unscale_first:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        return scales, model.state_dict()

    got, params = train(True)
    want, want_params = train(False)
    assert got == want, (got, want)
    assert any(b < a for a, b in zip(got, got[1:])) and any(b > a for a, b in zip(got, got[1:])), "skips and growth"
    assert all(torch.equal(params[k], want_params[k]) for k in want_params)


def test_a_dropped_step_moves_no_gradscaler_and_a_skip_moves_every_one_alike() -> None:
    """The scale update follows the job's decision, not the member's own flags: a dropped step (a
    member lost in it) counts as no overflow -- every member grows alike, its retry sees its own
    overflow -- and a committed skip backs off."""
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    backend = LocalBackend(seed=0)
    job = Job(backend)
    model = job.model(torch.nn.Linear(2, 1))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, growth_interval=1000)
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.1), scaler=scaler)
    outcomes = iter([False, True])  # the first step is dropped, its retry commits
    real = backend.commit
    backend.commit = lambda amp=None, index=0: real(amp, index) and next(outcomes)  # type: ignore[method-assign]
    scales = []
    data = torch.utils.data.TensorDataset(torch.full((8, 2), 1e3), torch.zeros(8, 1))
    for x, y in job.data(data, batch_size=4, epochs=1):
        scaler.scale(((model(x) - y) ** 2).mean()).backward()  # overflows at this scale
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
    assert scales == [2.0 ** 127, 2.0 ** 126], scales


def test_a_gradscaler_not_given_to_the_job_is_refused_at_the_first_step() -> None:
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    job = Job(LocalBackend(seed=0))
    model = job.model(torch.nn.Linear(2, 1))
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    scaler = torch.amp.GradScaler("cpu")
    x, y = next(iter(job.data(torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)))
    scaler.scale(((model(x) - y) ** 2).mean()).backward()
    with pytest.raises(RuntimeError, match=r"job\.optimizer\(\.\.\., scaler=scaler\)"):
        scaler.step(opt)
    with pytest.raises(TypeError, match="GradScaler"):
        Job(LocalBackend(seed=0)).optimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters()), scaler=object())
    given = Job(LocalBackend(seed=0))
    given.optimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters()), scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(ValueError, match="the name is taken"):
        given.state("grad_scaler", torch.nn.Linear(1, 1))  # one name per object of the job's state
