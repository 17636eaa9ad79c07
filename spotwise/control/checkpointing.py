"""The job controller's checkpoints: what one holds, taking one, and resuming a run from the newest.

:class:`CheckpointMixin` is mixed into :class:`~spotwise.control.controller.JobController`.  A
checkpoint holds the parameters, learning rate, clock, sampler and duration generator, the
provider's market state, the place and market the workers run on, the sync mode, the counters and
the ledger (settled money and open intervals), so that a killed controller resumes where it was
(``spotwise run --resume OUT``); the file format is :mod:`spotwise.control.checkpoint`'s.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from spotwise.events import EventLog
from spotwise.market.world import market_for_place
from spotwise.control.checkpoint import require_checkpoint, save_checkpoint, warn_on_stderr
from spotwise.control.records import Counters
from spotwise.control.sampler import EpochSampler


class CheckpointMixin:
    """Checkpoints and resume of a :class:`~spotwise.control.controller.JobController`."""

    def _checkpoint(self, why: str) -> None:
        cost = self._cost_breakdown(final=False)
        state = {
            "format": 1, "step": self.step, "params": torch.from_numpy(self.params.copy()), "lr": self.lr, "T": self.T,
            "sampler": self.sampler.state(), "dur_rng": json.dumps(self.dur_rng.bit_generator.state),
            **self.provider.market_state(), "provisioned": self.provisioned,
            "place": [self.market.instance.name, self.region], "worker_market": self.worker_market,
            "sync": self.sync, "sync_n": self.sync_n, "ema_loss": self.ema_loss,
            "counters": {k: v for k, v in self.counters.__dict__.items() if k != "recoveries_ms"}, "cost": cost,
            "ledger": self._ledger_state(),
        }
        path = save_checkpoint(self.out, self.step, state)
        self.last_ckpt_step = self.step
        self.counters.checkpoints += 1
        self.log.emit("checkpoint", step=self.step, path=str(path), why=why)

    def _checkpoint_quiet(self) -> None:
        """A final checkpoint without a log event (so a resume of a finished run is a no-op).

        Taken before the ledger is closed, so it records the intervals still open at ``T`` and a
        resume continues them (issue 7 item 6) instead of billing them as released.
        """
        state_log = self.log
        self.log = _NullLog()  # type: ignore[assignment]
        try:
            self._checkpoint("final")
        finally:
            self.log = state_log

    def _restore(self) -> None:
        skipped: list[str] = []

        def warn(msg: str) -> None:  # on stderr, and into the restore event
            skipped.append(msg)
            warn_on_stderr(msg)

        state, path = require_checkpoint(self.out, expect_shape=self.params.shape, warn=warn)  # falls back past bad ones
        self.step = int(state["step"])
        self.params = state["params"].numpy().astype(np.float32).copy()
        self.lr = float(state["lr"])
        self.clock.restore(float(state["T"]))
        self.last_commit_T = self.T
        self.sampler = EpochSampler.from_state(state["sampler"])
        self.dur_rng.bit_generator.state = json.loads(state["dur_rng"])
        self.provisioned = int(state["provisioned"])
        self.provider.prepare(list(range(self.provisioned)), resume=True)
        self.worker_market = str(state.get("worker_market", self.worker_market))
        place = state.get("place")
        if place and (place[0], place[1]) != (self.market.instance.name, self.region):
            # the run had migrated: continue in its place (the provider's timeline follows in resume_market)
            self._enter_place(market_for_place(self.spec, place[0], place[1], self.market.catalog, self.market.horizon_s),
                              place[1])
            self.provider.migrate(self.market, self.T)
        self.sync = str(state["sync"])
        self.sync_n = None if state["sync_n"] is None else int(state["sync_n"])
        self.ema_loss = None if state["ema_loss"] is None else float(state["ema_loss"])
        c = state["counters"]
        self.counters = Counters(**{k: v for k, v in c.items() if k != "recoveries_ms"})
        self.carried_cost = state["cost"]
        self.last_ckpt_step = self.step
        self.log = EventLog(self.out / "events.jsonl", clock=lambda: self.T, resume=True)
        self.log.emit("restore", step=self.step, path=str(path), skipped=skipped)
        self.provider.resume_market(self.T, state)
        reopen = self._reopen_ledger(state)
        self.last_price_T = self.T - 1e-9
        self._emit_prices()
        for w in sorted(w for w in self.provider.available_at_start() if w < self.provisioned):
            self._add_member(w, self.provider.acquire(w), reopen=reopen.pop(f"worker-{w}", None))
        for iid, entry in sorted(reopen.items()):
            # a worker that was running at the checkpoint but whose capacity is gone at T (its
            # revocation fell on the checkpoint's instant): billed up to T, as without the restart
            self.ledger.reopen(entry, self._worker_price(str(entry.get("market", self.worker_market))))
            self.ledger.stop(iid, self.T, reason="revoked")
            self.counters.revocations += 1
            self.log.emit("revoke", worker=int(iid.split("-")[-1]), reason="market", active=len(self.members))


class _NullLog:
    def emit(self, *a: Any, **k: Any) -> None:
        return None
