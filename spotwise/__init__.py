"""spotwise: train ML models cheaply on volatile cloud capacity.

See DESIGN.md (shared) for the architecture: spec + market -> planner -> plan -> executor
(simulator | emulated Ray | real Ray) with policies -> event log -> ledger -> report.
"""

__version__ = "0.1.0"
