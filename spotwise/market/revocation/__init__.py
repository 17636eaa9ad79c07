"""The revocation models, by how they decide (:mod:`spotwise.market.preemption` states their shared
conventions and is the module importers use):

* :mod:`~spotwise.market.revocation.base` -- what every model shares: market events, provider
  notices, the interval helpers and the :class:`~spotwise.market.revocation.base.RevocationModel`
  interface;
* :mod:`~spotwise.market.revocation.stochastic` -- drawn at random: per-iteration Bernoulli draws
  (``papers/000_3c734f3ffedcac15.txt`` Sec. III Remark 2 / Sec. V Lemma 3) and renewal lifetimes
  (``papers/002_a246f6afe29b4bfb.txt`` Sec. I-II, Fig. 3; exponential lifetimes);
* :mod:`~spotwise.market.revocation.trace` -- read from the market: a bid against a price series
  (paper 000) and a recorded capacity trace.
"""
