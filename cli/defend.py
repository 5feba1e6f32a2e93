"""`pre defend`: how much of an attack does spell-checking the prompt undo?

For each attack record of the source runs, scores the clean prompt, the
adversarial prompt and the spell-corrected adversarial prompt on the same
model and data, and reports the PDR without and with the defense per attack.
Character-level attacks (TextBugger, DeepWordBug) should recover most of
their drop; word-level ones (TextFooler, BertAttack) produce real words and
should not.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.cli.errors import UserError
from promptrobust.cli.eval_cmd import (
    add_common_arguments,
    config_of,
    input_format,
    resolve_spec,
    run_async,
    session_for,
    validate_common,
)
from promptrobust.cli.transfer import evaluation_setting, group_sources, select_sources

NAME = "defend"
HELP = "spell-correct adversarial prompts and measure the PDR with and without the defense"

EPILOG = """\
examples:
  pre defend --source runs/20250101-120000_smollm2-135m-instruct_rotten_tomatoes
  pre defend --source runs/ --attack textbugger,deepwordbug,textfooler --model gemma3-270m

Without --model each record is scored on the model that produced it. The run
folder holds results.jsonl (one record per source record: the corrected prompt
as the adversarial prompt, the undefended prompt and scores in settings),
defense.md and defense.csv (PDR without/with the defense per attack).
Needs the pyspellchecker package (offline dictionary).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--source", nargs="+", required=True, metavar="RUN_DIR", help="run folders (or folders of them) with attack records")
    p.add_argument("--attack", default=None, help="only records of these attacks (comma-separated)")
    p.add_argument("--distance", type=int, default=2, choices=[1, 2], help="largest edit distance of a spelling correction")
    add_common_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    validate_common(args)
    sources = select_sources(args)
    try:
        import spellchecker  # noqa: F401
    except ImportError:
        raise UserError("pre defend needs the 'pyspellchecker' package: pip install pyspellchecker") from None
    return run_async(lambda a: _run(a, sources), args)


async def _run(args: argparse.Namespace, sources: list[Any]) -> int:
    from promptrobust.cli.output import RunFolder

    by_model: dict[str, list[Any]] = {}
    for s in sources:
        by_model.setdefault(args.model or s.record.model, []).append(s)
    with RunFolder(args.output_dir, ["defend", *sorted(by_model)[:2]]) as folder:
        session = session_for(args)
        records: list[Any] = []
        try:
            for model, members in by_model.items():
                spec = resolve_spec(model, args.model_args)
                scheduler = await session.scheduler(spec)
                records += await defend_records(
                    members, scheduler, spec.name, spec.backend, group_sources(members, args), distance=args.distance
                )
            cache = session.cache.summary() if session.cache is not None else None
        finally:
            await session.close()
        summary = write_defense_outputs(folder, records)
        folder.write_json("config.json", config_of(args))
        folder.write_json("results.json", {"defense": "spellcheck", "summary": summary, "cache": cache})
    final = folder.final
    print_defense(records, summary)
    print(f"pre: results in {final}", file=sys.stderr)
    return 0


async def defend_records(
    sources: Sequence[Any],
    scheduler: Any,
    model_name: str,
    backend: str,
    groups: dict[tuple[Any, ...], list[Any]],
    *,
    distance: int = 2,
) -> list[Any]:
    """One AttackRecord per source record whose adversarial prompt is the
    spell-corrected one; the undefended scores are kept in ``settings``."""
    from promptrobust.attacks.defense import SpellCheckDefense
    from promptrobust.engine.attack_job import protected_words

    out: list[Any] = []
    for key, members in groups.items():
        task, samples, examples = evaluation_setting(key)
        setting = _Setting(
            scheduler=scheduler, model=model_name, backend=backend, task=task, samples=samples, examples=examples,
            seed=key[2], shots=key[3], mode=key[4], parser=key[5], input_format=input_format(scheduler),
            defense=SpellCheckDefense(protected=protected_words(task), distance=distance),
        )
        out += await asyncio.gather(*(_defend_one(s, setting) for s in members))
    return out


@dataclass
class _Setting:
    """Everything one group of records is scored with."""

    scheduler: Any
    model: str
    backend: str
    task: Any
    samples: list[Any]
    examples: list[Any]
    seed: int
    shots: int
    mode: str
    parser: str
    input_format: str
    defense: Any


async def _defend_one(s: Any, g: _Setting) -> Any:
    from promptrobust.attacks.result import performance_drop_rate
    from promptrobust.engine.analysis import score_prompts
    from promptrobust.engine.records import AttackRecord

    r = s.record
    fixed = g.defense.correct(r.adversarial_prompt)
    (clean, adv, defended), ev = await score_prompts(
        g.scheduler, g.task, g.samples, [r.clean_prompt, r.adversarial_prompt, fixed.text],
        mode=g.mode, parser=g.parser, examples=g.examples,  # type: ignore[arg-type]
    )
    return AttackRecord(
        model=g.model, backend=g.backend, dataset=g.task.name, prompt_id=r.prompt_id,
        prompt_type=r.prompt_type, shots=g.shots, attack=r.attack, clean_prompt=r.clean_prompt,
        clean_score=clean, adversarial_prompt=fixed.text, adversarial_score=defended,
        pdr=performance_drop_rate(clean, defended), candidate_evaluations=ev.cost.candidate_evaluations,
        model_requests=ev.requests.requests, requests_sent=ev.requests.sent,
        cache_hits=ev.requests.cache_hits, deduplicated=ev.requests.deduplicated,
        saved_by_early_stopping=0, pruned_candidates=0, early_stopping="off", wall_seconds=0.0,
        seed=g.seed, samples=len(g.samples), mode=g.mode, parser=g.parser if g.mode == "generate" else None,
        input_format=g.input_format, budget=None, metric=g.task.metric.name,
        settings={
            "analysis": "defense",
            "defense": g.defense.name,
            "undefended_prompt": r.adversarial_prompt,
            "undefended_score": adv,
            "undefended_pdr": performance_drop_rate(clean, adv),
            "corrections": [list(c) for c in fixed.changes],
            "source_model": r.model,
            "source_run": str(s.run_dir),
            "source_pdr": r.pdr,
        },
    )


def defense_rows(records: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "model": r.model, "dataset": r.dataset, "attack": r.attack, "prompt_id": r.prompt_id,
            "clean": r.clean_score, "adversarial": r.settings["undefended_score"], "defended": r.adversarial_score,
            "pdr_without": r.settings["undefended_pdr"], "pdr_with": r.pdr,
            "corrections": len(r.settings["corrections"]),
        }
        for r in records
    ]


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, attack): PDR without and with the defense (mean +- std) and
    the share of the drop the defense recovered."""
    from promptrobust.engine.analysis import apdr_summary

    without = apdr_summary(rows, ["model", "attack"], value="pdr_without")
    with_ = apdr_summary(rows, ["model", "attack"], value="pdr_with")
    out = []
    for a, b in zip(without, with_):
        drop = a["pdr_without_mean"]
        out.append(
            {
                "model": a["model"], "attack": a["attack"], "n": a["n"],
                "pdr_without": drop, "pdr_without_std": a["pdr_without_std"],
                "pdr_with": b["pdr_with_mean"], "pdr_with_std": b["pdr_with_std"],
                "recovered": (drop - b["pdr_with_mean"]) / drop if drop > 0 else None,
            }
        )
    return out


def write_defense_outputs(folder: Any, records: Sequence[Any]) -> list[dict[str, Any]]:
    from promptrobust.engine.analysis import markdown_table, write_csv
    from promptrobust.engine.records import append_jsonl, consolidate_parquet

    append_jsonl(folder.path("results.jsonl"), records)
    consolidate_parquet(folder.path("results.jsonl"), folder.path("results.parquet"))
    rows = defense_rows(records)
    summary = summarize(rows)
    write_csv(folder.path("defense.csv"), summary)
    write_csv(folder.path("records.csv"), rows)
    shown = [
        {
            "model": s["model"], "attack": s["attack"], "n": s["n"],
            "PDR without": f"{s['pdr_without']:.2f} ± {s['pdr_without_std']:.2f}",
            "PDR with spell-check": f"{s['pdr_with']:.2f} ± {s['pdr_with_std']:.2f}",
            "recovered": "-" if s["recovered"] is None else f"{s['recovered']:.0%}",
        }
        for s in summary
    ]
    folder.path("defense.md").write_text(
        "## Spell-check defense\n\n" + markdown_table(shown) + "\n## Records\n\n" + markdown_table(rows), encoding="utf-8"
    )
    return summary


def print_defense(records: Sequence[Any], summary: Sequence[dict[str, Any]]) -> None:
    print(f"{'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'defended':>8} {'PDR w/o':>7} {'PDR w/':>7}")
    for row in defense_rows(records):
        print(
            f"{row['attack']:<12} {row['prompt_id']:<16} {row['clean']:>7.4f} {row['adversarial']:>7.4f} "
            f"{row['defended']:>8.4f} {row['pdr_without']:>7.4f} {row['pdr_with']:>7.4f}"
        )
    print()
    for s in summary:
        rec = "-" if s["recovered"] is None else f"{s['recovered']:.0%}"
        print(
            f"{s['model']} [{s['attack']}]: PDR {s['pdr_without']:.4f} -> {s['pdr_with']:.4f} with spell-check "
            f"(recovered {rec}, n={s['n']})"
        )
    for r in records:
        if r.settings["corrections"]:
            fixes = ", ".join(f"{a!r}->{b!r}" for a, b in r.settings["corrections"])
            print(f"[{r.attack} / {r.prompt_id}] {fixes}")
