"""The report of one run directory: what ``spotwise run`` writes at the end and ``spotwise report
DIR`` shows -- a run's events and summary read into arrays, its plots, a table, JSON and a page.

* :mod:`~spotwise.reports.run.data` -- reading: :func:`load_run` -> :class:`RunData`;
* :mod:`~spotwise.reports.run.plots` -- the three PNGs (:func:`plot_run`);
* :mod:`~spotwise.reports.run.report` -- the table, the JSON and the HTML page
  (:func:`summary_table`, :func:`report_json`, :func:`write_report`), and the conventions for
  reading ``step`` and ``idle`` events.

The other reports (comparisons of runs, sweeps, traces, plans) are beside this package in
:mod:`spotwise.reports`.
"""

from __future__ import annotations

from spotwise.reports.run.data import PLOT_FILES, RunData, load_run
from spotwise.reports.run.plots import plot_run
from spotwise.reports.run.report import report_json, summary_table, write_report

__all__ = ["PLOT_FILES", "RunData", "load_run", "plot_run", "report_json", "summary_table", "write_report"]
