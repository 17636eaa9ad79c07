"""Bring your own training loop (issue 41): ``import spotwise.elastic as sw; job = sw.init()``.

See :mod:`spotwise.elastic.job` for the API and docs/own-loop.md for a converted script.
"""

from spotwise.elastic.job import ElasticData, ElasticModel, ElasticOptimizer, Job, init

__all__ = ["ElasticData", "ElasticModel", "ElasticOptimizer", "Job", "init"]
