"""``spotwise plan`` for people (issue 29): a few short headline lines, then tables that fit the terminal.

* :func:`headline_lines` -- where, strategy, expected cost (with its interval where the plan has one),
  P(deadline), the saving against on-demand, the job and the coordinator, each line under 80 columns;
* :func:`strategies_table` / :func:`backtest_table` -- short headers and cells that never break a word:
  at 80 columns the narrow layout (the columns a person compares); wider terminals get workers,
  iterations, the method and the note;
* :func:`alternative_notes` -- why an alternative is infeasible, as lines below the table (a long
  reason in a cell would stretch every row).

Every duration goes through :func:`spotwise.reports.units.human_duration`.  The plan is read
defensively (``getattr``/``dict.get``): a field the planner does not fill yet is left out, never guessed.
"""

from __future__ import annotations

from typing import Any

from spotwise.reports.terminal_text import clean, safe_cells
from spotwise.reports.units import human_duration, humanize_seconds

#: below this many columns the strategies and backtest tables use the narrow layout
WIDE_COLUMNS = 120


def _text(v: Any) -> str:
    """A value from the spec or the traces inside one of the headline's markup lines: cleaned, its brackets escaped."""
    from rich.markup import escape

    return escape(clean(v))


def _money(v: Any) -> str:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "-"
    return f"${v:.4g}" if abs(v) < 1000 else f"${v:,.0f}"


def _interval(v: Any) -> tuple[float, float] | None:
    if isinstance(v, dict):
        v = (v.get("low", v.get("lo")), v.get("high", v.get("hi")))
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        return float(v[0]), float(v[1])
    return None


def _coordinator(plan: Any, rec: dict[str, Any]) -> tuple[str | None, float | None]:
    """The coordinator's instance and $/h: the recommendation's, else the plan's ``extra``."""
    extra = getattr(plan, "extra", None) or {}
    for src in (rec, extra):
        c = src.get("coordinator")
        price = src.get("coordinator_price")
        if isinstance(c, dict):
            price = c.get("price", c.get("price_per_h", price))
            c = c.get("instance", c.get("instance_type", c.get("name")))
        if isinstance(c, str) and c:
            return c, float(price) if isinstance(price, (int, float)) and not isinstance(price, bool) else None
    return None, None


def _bids(bids: Any) -> str:
    bids = [b for b in (bids or []) if isinstance(b, (int, float))]
    if not bids:
        return ""
    vals = sorted(set(bids), reverse=True)
    return ("bid " if len(vals) == 1 else "bids ") + ", ".join(f"{b:.4g}" for b in vals) + " $/h"


def headline_lines(plan: Any) -> list[str]:
    """The plan's first lines: where and what strategy, expected cost and P(deadline), the saving against
    on-demand, the deadline measured on past windows (with a trace backtest), the job, the coordinator."""
    extra = getattr(plan, "extra", None) or {}
    rec: dict[str, Any] = extra.get("recommendation") or {}
    if not rec:
        return []
    where = rec.get("place") or ""
    inst = rec.get("instance") or extra.get("instance") or ""
    bids = _bids(rec.get("bids"))
    lines = [f"[bold]recommended:[/bold] {_text(rec.get('strategy', getattr(plan, 'strategy', '?')))}"
             + (f" in {_text(where)}" if where else "") + f", {rec.get('workers', '?')} x {_text(inst)}"
             + (f", {bids}" if bids else "")]
    ci = _interval(rec.get("expected_cost_ci95") or rec.get("cost_ci95") or rec.get("expected_cost_interval"))
    p = rec.get("deadline_probability")
    tested = rec.get("basis") == "backtest"  # issue 29: a backtested strategy's figures are measured, not modelled
    if tested:  # its P(deadline) is on the deadline line below
        cost = _money(rec.get("expected_cost")) + (f" (90% of past windows: {_money(ci[0])}-{_money(ci[1])})" if ci else "")
        lines.append(f"  expected cost {cost}")
    else:
        cost = _money(rec.get("expected_cost")) + (f" ({_money(ci[0])}-{_money(ci[1])})" if ci else "")
        lines.append(f"  expected cost {cost}, P(deadline) " + ("-" if p is None else f"{p:.2f} (model)"))
    if tested and rec.get("meets_target") is False:
        lines.append(f"  [bold yellow]no tested strategy reached the target P(deadline) "
                     f"{float(rec.get('target_deadline_probability') or 0):.0%}[/bold yellow]: relax the deadline")
    if tested and rec.get("policies"):
        lines.append("  policies: " + ", ".join(_text(q.get("name")) for q in rec["policies"])
                     + (f" (the model's pick was {_text(rec['model_strategy'])})" if rec.get("model_strategy") else ""))
    od, saving = rec.get("on_demand_cost"), rec.get("saving_vs_on_demand")
    if od is None or saving is None:
        lines.append("  on-demand: no price to compare")
    else:
        verb = "saves" if saving >= 0 else "costs"
        lines.append(f"  on-demand {_money(od)}: this plan {verb} {abs(saving):.0%}" + ("" if saving >= 0 else " more"))
    deadline_s = getattr(plan, "deadline_s", None)
    if rec.get("deadline_ci95") and rec.get("deadline_measured") is not None:
        lo, hi = rec["deadline_ci95"]
        bt = (extra.get("placement") or {}).get("backtest") or {}
        windows = bt.get("windows")
        on = f" of {windows} past windows" if windows else " of the past windows"
        # the measured rate is the backtest's leading strategy's: named when it is not the recommended one
        lead = (bt.get("strategies") or [{}])[0].get("strategy")
        who = f"met by {lead} in" if lead and lead != rec.get("strategy") else "met in"
        on = on.replace(" past", "") if lead and lead != rec.get("strategy") else on
        lines.append(f"  deadline {human_duration(deadline_s)}: {who} {rec['deadline_measured']:.0%}{on} "
                     f"(95% CI {100 * lo:.0f}-{hi:.0%})")
    lines.append(f"  job: {getattr(plan, 'iterations', '?')} iterations, {human_duration(rec.get('expected_time_s'))} "
                 f"expected, deadline {human_duration(deadline_s)}")
    coord, price = _coordinator(plan, rec)
    if coord:
        lines.append(f"  coordinator: {coord} on-demand" + ("" if price is None else f" at {price:.4g} $/h")
                     + " (in the costs)")
    return lines


def strategies_table(plan: Any, width: int = 80) -> Any:
    """The alternatives, one row each; the narrow layout below :data:`WIDE_COLUMNS` columns."""
    from rich.table import Table

    wide = width >= WIDE_COLUMNS
    t = Table(title=f"strategies (objective: {plan.objective}, deadline {human_duration(plan.deadline_s)})",
              title_justify="left")
    t.add_column("strategy", no_wrap=True, min_width=16 if width >= 80 else None, overflow="ellipsis")
    t.add_column("bid $/h", no_wrap=True, overflow="ellipsis")
    if wide:
        t.add_column("workers", justify="right", no_wrap=True)
        t.add_column("iterations", justify="right", no_wrap=True)
    t.add_column("E cost", justify="right", no_wrap=True)
    t.add_column("E time", justify="right", no_wrap=True)
    t.add_column("P(dl)", justify="right", no_wrap=True)
    t.add_column("E err", justify="right", no_wrap=True)
    if wide:
        t.add_column("method", no_wrap=True)
        t.add_column("note", overflow="ellipsis", no_wrap=True, max_width=max(20, width - 110))
    for a in plan.alternatives:
        bids = ", ".join(f"{b:.3g}" for b in sorted(set(a.bids), reverse=True)) if a.bids else "-"
        style = "bold green" if a.strategy == plan.strategy else (None if a.feasible else "dim")
        row = [clean(a.strategy), bids]
        if wide:
            row += [str(a.workers), str(a.iterations)]
        row += ["-" if a.expected_cost is None else _money(a.expected_cost),
                human_duration(a.expected_time_s),
                "-" if a.deadline_probability is None else f"{a.deadline_probability:.2f}",
                "-" if a.expected_error is None else f"{a.expected_error:.3g}"]
        if wide:
            row += [a.method, humanize_seconds(a.reason if a.feasible else f"infeasible: {a.reason}")]
        t.add_row(*safe_cells(*row), style=style)
    return t


def alternative_notes(plan: Any, width: int = 80) -> list[str]:
    """Why each infeasible alternative is out (the narrow layout has no note column)."""
    if width >= WIDE_COLUMNS:
        return []
    return [f"  {a.strategy}: not possible here ({humanize_seconds(a.reason)})" for a in plan.alternatives
            if not a.feasible and a.reason]


def backtest_table(placement: dict[str, Any], width: int = 80, chosen: str | None = None) -> Any:
    """The trace backtest of the chosen place: each strategy's measured P(deadline) and cost."""
    from rich.table import Table

    bt, ch = placement["backtest"], placement["choice"]
    first, last = str(bt.get("first_start", ""))[:10], str(bt.get("last_start", ""))[:10]
    every = human_duration(float(bt.get("every_h") or 0) * 3600.0)
    title = f"backtest in {ch['zone']}: {bt['windows']} past windows, {first}..{last}, every {every}"
    caption = (f"{ch['instance']} at the start: {ch['spot_price']:.4g} $/h spot, {ch['on_demand_price']:.4g} $/h on-demand; "
               "P(dl): share of windows that met the deadline")
    t = Table(title=safe_cells(title)[0], title_justify="left", caption=safe_cells(caption)[0], caption_justify="left")
    t.add_column("strategy", no_wrap=True, overflow="ellipsis", min_width=14 if width >= 80 else None)
    for col in (("P(dl)", "95% CI", "mean $", "p95 $", "/oracle") if width < WIDE_COLUMNS else
                ("P(deadline)", "95% CI", "mean cost", "p95 cost", "vs oracle")):
        t.add_column(col, justify="right", no_wrap=True)
    for s in bt["strategies"]:
        lo, hi = s["ci95"]
        t.add_row(*safe_cells(s["strategy"], f"{s['deadline_met']:.0%}", f"{lo:.0%}-{hi:.0%}", f"${s['mean_cost']:.2f}",
                  f"${s['p95_cost']:.2f}", f"{s['vs_oracle']:.2f}x"), style="bold green" if s["strategy"] == chosen else None)
    return t


__all__ = ["WIDE_COLUMNS", "alternative_notes", "backtest_table", "headline_lines", "print_plan", "strategies_table"]


def print_plan(plan: Any, console: Any, *, explain: bool = False) -> None:
    """Everything ``spotwise plan`` prints for people, in reading order, sized to ``console.width``."""
    width = int(getattr(console, "width", 80) or 80)
    for line in headline_lines(plan):  # spotwise's markup; the values in it escaped (_text)
        console.print(line, highlight=False, markup=True)
    console.print(strategies_table(plan, width))
    for line in alternative_notes(plan, width):
        console.print(line, highlight=False, markup=False)
    placement = (getattr(plan, "extra", None) or {}).get("placement")
    if placement and placement.get("backtest"):
        console.print(backtest_table(placement, width, getattr(plan, "strategy", None)))
    elif placement:
        console.print(f"placement: {placement.get('error') or placement.get('note')}", highlight=False, markup=False)
    console.print(f"why: {humanize_seconds(plan.why)}", highlight=False, markup=False)
    plane = (getattr(plan, "extra", None) or {}).get("data_plane")
    if plane:
        console.print(f"data plane: {plane['plane']} ({plane['why']})", highlight=False, markup=False)
    console.print(f"prices: {plan.price_source}", highlight=False, markup=False)
    for m in plan.measured:
        console.print(f"measured: {m}", highlight=False, markup=False)
    if explain:
        for a in plan.assumed:
            console.print(f"assumed: {a}", highlight=False, markup=False)
    else:
        console.print(f"({len(plan.assumed)} assumptions behind these numbers: --explain prints them)", highlight=False, markup=False)
