"""`pre run --attack`: the paper's protocol on one model and dataset.

The protocol itself is library code (``Session.attack_top_k``); this module turns
the attack flags into ``AttackSettings``, hands each record to the run-folder
writer the moment it exists, then results.json (``engine.run_results``) and
prints the table.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import flag_settings, printing
from promptrobust.cli.errors import UserError

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
    return flag_settings.attack_settings(args, names, options)


def _checkout_semantic_prompts(args: argparse.Namespace, bench: Any) -> Any:
    """With --promptbench, the Semantic attack scores the checkout's semantic prompts."""
    if not getattr(args, "promptbench", None):
        return None
    from promptrobust.engine.measuring.workbench import SemanticPrompts
    from promptrobust.tasks.placeholders import check_no_content_placeholder
    from promptrobust.tasks.promptbench_import import load_promptbench_prompts

    found = load_promptbench_prompts(args.promptbench, bench.task.name, types=["semantic"],
                                     shot="few" if bench.shots else "zero")
    check_no_content_placeholder((p.id, p.text) for p in found)
    return SemanticPrompts([(p.language, p.text) for p in found], f"promptbench checkout {args.promptbench}")


def _check_option_values(names: list[str], options: dict[str, dict[str, str]]) -> None:
    """Build each attack once (no resources load) so a bad option value is one line now, not a failed run later."""
    from promptrobust.attacks.errors import AttackOptionError
    from promptrobust.attacks.needs import check_attack_extras
    from promptrobust.attacks.registry import get_attack

    check_attack_extras(names)  # a word attack on the lean install: its extra, named now
    for name in names:
        try:
            get_attack(name, **options.get(name, {}))
        except AttackOptionError as exc:
            raise UserError(f"--attack-option for {name}: {exc}") from None


async def run_attacks(args: argparse.Namespace, session: Any, bench: Any, prompts: list[Any], settings: Any, folder: Any) -> int:
    from promptrobust.engine.runs.run_results import protocol_document, session_facts

    say = printing.event_printer(quiet=args.no_progress)
    semantic = _checkout_semantic_prompts(args, bench) if "semantic" in settings.attacks else None
    result = await session.attack_top_k(
        bench.evaluation, settings, model=bench.spec, prompts=prompts,
        on_record=lambda record: folder.append_records([record]), on_event=say, fail_fast=(KeyboardInterrupt,),
        semantic_prompts=semantic,
    )
    folder.consolidate()
    logged = folder.write_jsonl("samples.jsonl", await bench.sample_log(result.records)) if args.log_samples else 0
    folder.write_results(protocol_document(
        getattr(args, "argv", ["pre", "run"]), result=result, configs=getattr(args, "configs", {}), logged=logged,
        counters=session_facts(session)["counters"],
    ))
    printing.print_clean(result.settings, result.clean, chance=bench.chance_rate)
    for row in result.held_out_clean or []:  # issue 23: the ranking's top prompts on samples it never saw
        ci = row["held_out_ci95"]
        print(f"held-out: {row['prompt_id']} in-sample {row['in_sample_score']:.4f} (best of {len(result.clean)}), "
              f"held-out {row['held_out_score']:.4f} [{ci[0]:.3f}, {ci[1]:.3f}] on {row['held_out_samples']} samples")
    printing.print_records(result.records)
    printing.next_step(args, records=result.records, attacks=settings.attacks)
    if result.failures:
        print(f"pre: {len(result.failures)} attack runs failed; the other results are in the run folder", file=sys.stderr)
        return 1
    return 0
