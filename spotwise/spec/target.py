"""``target:`` -- when a job is done (its length in steps, samples, epochs, tokens or hours, and/or a loss)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotwise.errors import InputError
from spotwise.spec.checks import _positive


@dataclass
class TargetSpec:
    """When the job is done: after ``iterations`` committed steps or ``samples`` committed samples,
    and/or at ``loss`` (whichever first).

    ``samples`` (issue 41 item 4) is the job's length as users mean it: a step with fewer members
    (after a revocation) commits fewer samples, so a job counted in steps trains less data than
    planned and a schedule counted in samples ends early; counted in samples, it runs until every
    planned sample is committed (the last step may take up to one step's samples more), and a
    schedule spans exactly those samples.  The plan estimates the steps it takes at full strength
    (:meth:`JobSpec.expected_iterations`)."""

    iterations: int | None = None
    loss: float | None = None
    #: issue 41 item 4: committed samples that end the job (instead of ``iterations``)
    samples: int | None = None
    #: issue 41 item 4: passes over the training set (``samples`` = epochs x its size, known once the
    #: workload is built: :func:`resolve_epochs`)
    epochs: float | None = None
    #: issue 41 item 4: tokens trained on (``samples`` = tokens / the workload's tokens per sample --
    #: ``gpt-bytes``: its ``block_size`` next-byte targets; a ``module:function`` workload sets
    #: ``info["tokens_per_sample"]`` -- known once the workload is built: :func:`resolve_epochs`)
    tokens: int | None = None
    #: issue 29: the job's size as hours of training on its cluster (``workers`` x the instance type or
    #: ``cluster.accelerators``) at full strength; turned into ``iterations`` (or a step time) on load
    #: (:mod:`spotwise.spec.hardware`)
    hours: float | None = None
    #: issue 29: the probability of meeting the deadline a recommended strategy must have shown
    #: (measured on the traces' past windows where there are any, else the model's)
    deadline_probability: float = 0.95

    def __post_init__(self) -> None:
        if self.iterations is None and self.loss is None and self.hours is None and self.samples is None \
                and self.epochs is None and self.tokens is None:
            raise InputError("needs iterations, samples, hours and/or loss", "set target.samples (e.g. 1000000: samples "
                             "to train on), target.iterations (e.g. 1000), target.hours (e.g. 24: hours of training on "
                             "the cluster) or target.loss (e.g. 0.1)", "")
        _positive(self.iterations, "iterations", "use a positive number of iterations")
        _positive(self.samples, "samples", "use a positive number of samples, e.g. 1000000")
        _positive(self.tokens, "tokens", "use a positive number of tokens, e.g. 300000000")
        given = [k for k in ("iterations", "samples", "epochs", "tokens") if getattr(self, k) is not None]
        if len(given) > 1:
            raise InputError(f"target.{given[0]} and target.{given[1]} both give the job's length",
                             "keep one: samples, epochs or tokens (revocations do not shorten the job) or iterations "
                             "(committed steps)", given[1])
        if self.epochs is not None and (isinstance(self.epochs, bool) or not isinstance(self.epochs, (int, float))
                                        or not 0 < float(self.epochs) < 1e9):
            raise InputError(f"must be a positive number of passes over the training set, got {self.epochs!r}",
                             "e.g. epochs: 3", "epochs")
        _positive(self.loss, "loss", "use a positive target loss")
        _positive(self.hours, "hours", "give the hours of training on the cluster, e.g. 24")
        p = self.deadline_probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < float(p) <= 1.0):
            raise InputError(f"must be a probability in (0, 1], got {p!r}", "e.g. 0.95: the plan recommends only strategies "
                             "that met the deadline in at least 95% of the tested windows", "deadline_probability")

    def samples_to_commit(self) -> int | None:
        """``samples``, or ``epochs`` x the training set's size, or ``tokens`` / the tokens per sample
        (rounded up), once known (:func:`~spotwise.spec.resolve.resolve_epochs`); ``None`` otherwise."""
        if self.samples is not None:
            return int(self.samples)
        if self.tokens is not None:
            tps = self.__dict__.get("_tokens_per_sample")
            return max(1, -(-int(self.tokens) // int(tps))) if tps else None
        n = self.__dict__.get("_n_train")
        return max(1, int(math.ceil(float(self.epochs) * int(n)))) if self.epochs is not None and n else None
