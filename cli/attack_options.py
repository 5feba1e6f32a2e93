"""`pre run --attack`: the paper's protocol on one model and dataset.

The protocol itself is library code (engine/protocol.py); this module turns
the attack flags into ``AttackSettings``, writes each record the moment it
exists (results.jsonl), then the summary (results.json) and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import common, printing
from promptrobust.cli.errors import UserError
from promptrobust.engine.records import append_jsonl, consolidate_parquet

ALL = "all"


def options_for(names: list[str], items: list[str]) -> dict[str, dict[str, str]]:
    """Split --attack-option KEY=VALUE items among the chosen attacks that take KEY."""
    from promptrobust.attacks.registry import attack_options

    per_attack: dict[str, dict[str, str]] = {n: {} for n in names}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--attack-option {item!r} is not KEY=VALUE (example: --attack-option mlm=/models/bert)")
        takers = [n for n in names if key in attack_options(n)]
        if not takers:
            raise UserError(f"--attack-option {key}: none of {', '.join(names)} takes it; see `pre list attacks`")
        for n in takers:
            per_attack[n][key] = value.strip()
    return per_attack


def attack_names(spec: str) -> list[str]:
    from promptrobust.attacks.registry import list_attacks

    known = [name for name, _ in list_attacks()]
    if spec.strip().lower() == ALL:
        return known
    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    if not names:
        raise UserError(f"--attack is empty: use one of {', '.join(known)} or 'all'")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown attack {unknown[0]!r}: use one of {', '.join(known)} or 'all'")
    return names


def attack_settings_from(args: argparse.Namespace) -> Any:
    """Validated ``AttackSettings`` from the attack flags (bad values fail before any model loads)."""
    names = attack_names(args.attack)
    options = options_for(names, args.attack_option)
    _check_option_values(names, options)
    return common.attack_settings(args, names, options)


def _check_option_values(names: list[str], options: dict[str, dict[str, str]]) -> None:
    """Build each attack once (no resources load) so a bad option value is one line now, not a failed run later."""
    from promptrobust.attacks.errors import AttackOptionError
    from promptrobust.attacks.registry import get_attack

    for name in names:
        try:
            get_attack(name, **options.get(name, {}))
        except AttackOptionError as exc:
            raise UserError(f"--attack-option for {name}: {exc}") from None


async def run_attacks(args: argparse.Namespace, session: Any, bench: Any, prompts: list[Any], settings: Any, folder: Any) -> int:
    from promptrobust.engine.protocol import run_protocol

    jsonl_path = folder.path("results.jsonl")
    say = printing.event_printer(quiet=args.no_progress)
    result = await run_protocol(
        bench,
        prompts,
        settings,
        on_record=lambda record: append_jsonl(jsonl_path, [record]),
        on_event=say,
        fail_fast=(KeyboardInterrupt,),
    )
    consolidate_parquet(jsonl_path, folder.path("results.parquet"))
    summary = result.summary()
    summary["attack_settings"] = {
        "attacks": list(settings.attacks), "top_k": settings.top_k, "budget": settings.budget,
        "early_stopping": settings.early_stopping, "chunk_size": settings.chunk_size,
    }
    summary["chance_rate"] = bench.chance_rate
    summary["scheduler"] = bench.scheduler.stats.snapshot()
    summary["cache"] = session.cache.summary() if session.cache is not None else None
    folder.write_json("results.json", summary)
    printing.print_clean(result.settings, result.clean, chance=bench.chance_rate)
    printing.print_records(result.records)
    printing.next_step(args, records=result.records, attacks=settings.attacks)
    if result.failures:
        print(f"pre: {len(result.failures)} attack runs failed; the other results are in the run folder", file=sys.stderr)
        return 1
    return 0
