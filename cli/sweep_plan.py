"""`pre sweep --dry-run`: the job list, request and token estimates, and what cannot run here."""

from __future__ import annotations

from typing import Any

from promptrobust.cli.errors import UserError


def print_plan(cfg: Any, jobs: list[Any], prices_file: str | None) -> int:
    """Print the plan of ``jobs`` (a shard's, or every job of ``cfg``); runs nothing."""
    from promptrobust.engine.runs.sweep.estimate import describe_plan
    from promptrobust.engine.runs.sweep.estimate import plan_totals

    ids = {j.id for j in jobs}
    plan = [row for row in describe_plan(cfg) if row["job"].id in ids]
    print(f"sweep {cfg.name}: {len(plan)} jobs -> {cfg.folder}")
    for row in plan:
        job = row["job"]
        done = f" ({row['finished_prompts']} prompts already done)" if row["finished_prompts"] else ""
        print(
            f"  {job.id}  {job.label():<70} samples {row['samples']:>5}  prompts {row['prompts']:>3}  "
            f"requests <= {row['clean'] + row['attack_max']}{done}"
        )
    totals = plan_totals(plan)
    print(
        f"estimated model requests before cache and early stopping: clean {totals.clean} "
        f"({totals.cells} cells, shared by their attacks), attacks <= {totals.attack_max}"
    )
    _print_model_estimates(cfg, plan, prices_file)
    from promptrobust.cli.sweep_checks import findings, print_findings  # what cannot run here, and why

    print_findings(cfg, jobs, findings(cfg))
    return 0


def _print_model_estimates(cfg: Any, plan: list[dict[str, Any]], prices_file: str | None) -> None:
    """Per model: jobs, requests, tokens, and for API models a cost from the price table."""
    from promptrobust.engine.runs.sweep.estimate import PriceTableError, format_estimates, load_prices, model_estimates

    try:
        prices = load_prices(prices_file)
    except PriceTableError as exc:
        raise UserError(str(exc)) from None
    rows = model_estimates(cfg, plan, prices)
    print(f"per model (tokens: each job's prompts on its task's shipped examples at 4 characters a token; "
          f"cost: {prices_file or 'the shipped price table'}, USD per million tokens):")
    for line in format_estimates(rows):
        print("  " + line)
    print(f"config: {cfg.source}")
