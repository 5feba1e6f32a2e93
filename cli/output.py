"""What the commands print: scores and records with their intervals, notes, and the `next:` hint.

The hint follows three rules. The suggested command keeps every model, data and query flag the
user gave, and every flag that chose the prompts or the task, so the next run measures the same thing; a prompt whose clean score is at chance
is never suggested for an attack (its PDR would be noise): the hint then offers label scoring,
more samples or another model instead; and it offers only attacks the installed extras can run
(a word attack on the lean base would fail).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

ResultT = TypeVar("ResultT")

from promptrobust.cli.errors import with_flag
from promptrobust.engine.runs.catalog import DEFAULT_MODEL, attack_runs_here, default_attack, suggested_attacks
from promptrobust.engine.safe_io import redact_text

if TYPE_CHECKING:  # annotations only: run_plan hands the outcomes and notes over
    from promptrobust import AttackRecord, CleanScore
    from promptrobust.engine.analysis.commands import Outcome
    from promptrobust.engine.runs.execute import TargetOutcome
    from promptrobust.engine.runs.executor import Context, Plan, SessionOptions
    from promptrobust.engine.runs.notes import Note


class AnalysisPlan(Protocol[ResultT]):
    """What ``run_analysis`` needs of an analysis' plan (``engine.analysis.commands``): a job of the
    executor that returns an ``Outcome``, and what planning said."""

    @property
    def notes(self) -> Sequence[str | Note]: ...

    def session_options(self) -> SessionOptions: ...

    def run(self, context: Context) -> Awaitable[Outcome[ResultT]]: ...

#: (args attribute, flag, value meaning "not given") of the flags a follow-up run keeps.
KEPT_FLAGS: tuple[tuple[str, str, Any], ...] = (
    ("model", "--model", DEFAULT_MODEL), ("model_args", "--model-args", ""), ("dataset", "--dataset", None),
    ("data_dir", "--data-dir", None), ("data_file", "--data-file", None), ("limit", "--limit", None),
    ("shots", "--shots", None), ("seed", "--seed", 0), ("mode", "--mode", "generate"), ("parser", "--parser", "last_word"),
    ("max_new_tokens", "--max-tokens", None), ("prompt_type", "--prompt-type", "task"), ("cache", "--cache", None),
    ("output_dir", "--output-dir", "runs"),
    # a user's own task (docs/your-task.md): its file, or its data's columns
    ("task", "--task", None), ("input_columns", "--input-column", None), ("label_column", "--label-column", None),
    ("labels", "--labels", None), ("target_column", "--target-column", None), ("metric", "--metric", None),
    ("template", "--template", None), ("few_shot_file", "--few-shot-file", None), ("protected", "--protected", None),
    ("id_column", "--id-column", None),
    ("task_name", "--task-name", None), ("split", "--split", None), ("dataset_config", "--dataset-config", None),
    # which prompts and samples (a hint without them would rank our generic prompts instead)
    ("prompt", "--prompt", None), ("prompt_text", "--prompt-text", None), ("promptbench", "--promptbench", None),
    ("sample_selection", "--sample-selection", "seeded"), ("adversarial_samples", "--adversarial-samples", None),
    # how the model is asked (lm-eval's spellings)
    ("gen_kwargs", "--gen_kwargs", None), ("apply_chat_template", "--apply_chat_template", False),
    ("system_instruction", "--system_instruction", None),
)

#: Below this many samples an interval is wide enough that more samples is the first advice.
FEW_SAMPLES = 200


def ci_text(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def short(text: str, width: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def say(message: str) -> None:
    print(f"pre: {message}", file=sys.stderr)


def say_note(note: Note | str) -> None:
    """A note of the library, its setting named by its flag."""
    say(note if isinstance(note, str) else with_flag(note.text, note.setting))


def run_analysis(plan: AnalysisPlan[ResultT], show: Callable[[ResultT], None]) -> int:
    """An analysis command after its plan: what planning said (before anything runs), the run (the
    executor's ``run_plan``), what it said that planning had not, its result (``show``) and where its
    run folder is."""
    from promptrobust.engine.runs.executor import run_plan

    for note in plan.notes:
        say_note(note)
    said = {note if isinstance(note, str) else note.text for note in plan.notes}
    runnable: Plan[Outcome[ResultT]] = plan
    outcome = run_plan(runnable, progress=None)
    for note in outcome.notes:
        if (note if isinstance(note, str) else note.text) not in said:
            say_note(note)
    show(outcome.result)
    say(f"results in {outcome.folder}")
    return 0


def event_printer(*, quiet: bool) -> Callable[[str], None]:
    """The library's ``on_event`` messages worth a line of their own: records (PDR, skipped) and
    failures. Phases ("scoring ...", "X on Y") are said by the progress reporter already."""

    def on_event(message: str) -> None:
        if "FAILED" in message or (not quiet and ("PDR" in message or "skipped" in message)):
            say(message)

    return on_event


def settings_line(settings: dict[str, object]) -> str:
    """Under which settings the numbers were made (printed above every table)."""
    mode = settings["mode"]
    how = f"generate (<= {settings['max_new_tokens']} new tokens, {settings['parser']} parser)" if mode == "generate" else "choices (label log-probs)"
    if mode == "choices" and str(settings.get("label_scoring") or "").startswith("approximate"):
        how = "choices (label log-probs APPROXIMATED from the top-20 first-token log-probs)"
    return (f"{settings['model']} on {settings['dataset']}: {settings['samples']} samples, {settings['shots']}-shot, "
            f"{settings['input_format']} input, {how}, metric {settings['metric']}, seed {settings['seed']}")


def print_clean(settings: dict[str, object], clean: Iterable[CleanScore], *, chance: float | None = None) -> None:
    """Every prompt's clean score, best first (ties in the order given), as ``EvaluationResult.table``."""
    clean = sorted(clean, key=lambda c: -c.score)
    print(settings_line(settings))
    width = max([len(c.prompt.id) for c in clean] + [6])
    print(f"{'prompt':<{width}}  score   95% interval    unparseable")
    for c in clean:
        flag = "  <- at chance" if c.at_chance else ""
        print(f"{c.prompt.id:<{width}}  {c.score:.4f}  {ci_text(c.ci95)}  {c.unparseable:>6}{flag}")
    if any(c.at_chance for c in clean):
        rate = f" ({chance:.2f})" if chance is not None else ""
        print(f"note: prompts marked 'at chance' score no better than the majority class{rate}: their PDR is not meaningful")


def print_records(records: Sequence[AttackRecord]) -> None:
    from promptrobust.engine.analysis.report import meaning_text

    attacked = [r for r in records if r.status == "attacked"]
    if attacked:
        print(f"\n{'attack':<12} {'prompt':<16} {'clean':>7} {'attacked':>8} {'PDR':>7}  {'PDR 95% interval':<17} {'McNemar p':>9} {'cands':>5} {'sent':>6} {'secs':>7}")
        for r in attacked:
            p = "-" if r.mcnemar_p is None else f"{r.mcnemar_p:.3g}"
            chance = "  at chance" if r.at_chance else ""
            print(f"{r.attack:<12} {r.prompt_id:<16} {r.clean_score:>7.4f} {r.adversarial_score:>8.4f} {r.pdr:>7.4f}  "
                  f"{ci_text(r.pdr_ci95):<17} {p:>9} {r.cost.candidate_evaluations:>5} {r.cost.requests_sent:>6} "
                  f"{r.cost.wall_seconds:>7.1f}{chance}")
        for r in attacked:
            if r.adversarial_prompt != r.clean_prompt:
                print(f"\n[{r.attack} / {r.prompt_id}] {r.adversarial_prompt}")
                line = meaning_text(vars(r))  # substitutions, similarity, held-out PDR
            else:  # every change it tried scored no lower: a similarity of the prompt to itself says nothing
                print(f"\n[{r.attack} / {r.prompt_id}] unchanged: no change it tried lowered the score")
                line = meaning_text({**vars(r), "substitutions": None, "final_similarity": None})
            if line:
                print(f"  {line}")
    for r in records:
        if r.status == "nothing_to_change":
            print(f"\nnothing to change: {r.attack} on {r.prompt_id}: {r.note}; no PDR (it measured nothing, "
                  "and is in no average)")
        elif r.status == "skipped_clean_zero":
            print(f"skipped: {r.attack} on {r.prompt_id} (clean score 0: no PDR exists; promptbench would attack it, docs/fidelity.md)")
        elif r.status == "failed":
            print(f"pre: error: {r.attack} on {r.prompt_id}: {r.error}", file=sys.stderr)


def print_target(args: argparse.Namespace, outcome: TargetOutcome) -> None:
    """One target of `pre run`: its table(s), the next step, and where the run folder is."""
    print_clean(outcome.settings, outcome.clean, chance=outcome.chance_rate)
    protocol, s = outcome.protocol, outcome.counters
    target = outcome.target
    args, labels = for_target(args, target.task.name), target.label_scoring
    if protocol is None:
        mean = sum(c.score for c in outcome.clean) / len(outcome.clean)
        print(f"mean {mean:.4f} | {outcome.wall_seconds:.1f}s | requests {s['submitted']} "
              f"(sent {s['backend_requests']}, cache hits {s['cache_hits']}, deduplicated {s['deduplicated']})")
        print(f"\nnext: {after_clean(args, outcome.clean, outcome.samples, labels=labels)}", file=sys.stderr)
    else:
        for row in protocol.held_out_clean or []:  # the ranking's top prompts on samples it never saw
            ci = row["held_out_ci95"]
            print(f"held-out: {row['prompt_id']} in-sample {row['in_sample_score']:.4f} (best of {len(protocol.clean)}), "
                  f"held-out {row['held_out_score']:.4f} [{ci[0]:.3f}, {ci[1]:.3f}] on {row['held_out_samples']} samples")
        print_records(protocol.records)
        attacks = protocol.attack_settings.attacks if protocol.attack_settings else ()
        print(f"\nnext: {after_attack(args, protocol.records, attacks, str(outcome.folder.parent), labels=labels)}", file=sys.stderr)
        if protocol.failures:
            say(f"{len(protocol.failures)} attack runs failed; the other results are in the run folder")
    say(f"results in {outcome.folder}")


# -- the `next:` hint ----------------------------------------------------------------------------


def kept_flags(args: argparse.Namespace, *, drop: Sequence[str] = ()) -> list[str]:
    """The user's model/data/query flags as command-line words (only those that differ from the defaults)."""
    words: list[str] = []
    for attr, flag, unset in KEPT_FLAGS:
        if attr in drop or not hasattr(args, attr):
            continue
        value = getattr(args, attr)
        if value is None or value == unset or value == []:
            continue
        if value is True:  # a switch (--apply_chat_template)
            words.append(flag)
            continue
        if isinstance(value, list):  # a repeatable flag (--input-column): its values, comma-separated
            value = ",".join(map(str, value))
        words += [flag, f"{value:g}" if isinstance(value, float) and attr == "limit" else str(value)]
    return words


def for_target(args: argparse.Namespace, dataset: str) -> argparse.Namespace:
    """The flags as a follow-up of one target sees them: ``--dataset a,b`` names this target's
    dataset alone (a hint that fits one dataset may not fit the other)."""
    if len([d for d in str(getattr(args, "dataset", "") or "").split(",") if d.strip()]) <= 1:
        return args
    return argparse.Namespace(**{**vars(args), "dataset": dataset})


def command(args: argparse.Namespace, *extra: str, drop: Sequence[str] = ()) -> str:
    """The suggested command, keeping the user's flags but never a credential from a base URL."""
    return redact_text(shlex.join(["pre", "run", *kept_flags(args, drop=drop), *extra]))


def after_clean(args: argparse.Namespace, clean: Sequence[CleanScore], samples: int, *, labels: bool = True) -> str:
    """What to run after clean scores: attack the best prompt, unless every prompt is at chance."""
    usable = [c for c in clean if not c.at_chance and c.score > 0]
    if usable:
        best = max(usable, key=lambda c: c.score)
        return f"{command(args, '--attack', default_attack(), '--top-k', '1')}  (attack the best prompt, {best.prompt.id}; PDR with its interval)"
    return at_chance_advice(args, samples, labels=labels)


def at_chance_advice(args: argparse.Namespace, samples: int,
                     lead: str = "every prompt scores at chance, so an attack would measure noise", *,
                     labels: bool = True) -> str:
    """Prompts at chance: an attack would measure noise. Offer what can lift the clean score;
    label scoring only where ``labels`` (``RunTarget.label_scoring``: never for free-text answers)."""
    options = []
    if getattr(args, "mode", "generate") == "generate" and labels:
        options.append(f"{command(args, drop=('mode',))} --mode choices  (label scoring: no answer parsing)")
    if samples < FEW_SAMPLES and getattr(args, "limit", None) is not None:
        options.append(f"{command(args, drop=('limit',))} --limit {max(FEW_SAMPLES, 2 * samples)}  (more samples: a narrower interval)")
    options.append(f"{command(args, drop=('model', 'model_args', 'shots'))} --model MODEL  (a stronger model; `pre list models`)")
    return f"{lead}; try\n  " + "\n  ".join(options)


def after_attack(args: argparse.Namespace, records: Sequence[AttackRecord], attacks: Sequence[str], report_dir: str, *,
                 labels: bool = True) -> str:
    """What to run after an attack: the report of the runs, and other attacks on the same setting; after
    an attack that failed (a server that went away, say), the same command again instead."""
    report = f"pre report {shlex.quote(report_dir)}  (tables, plots, APDR with intervals)"
    failed = [r for r in records if r.status == "failed"]
    if failed:
        again = redact_text(shlex.join(getattr(args, "argv", None) or ["pre", "run", *kept_flags(args)]))
        kept = ("every answer already received comes from the cache, so only the rest is asked"
                if not getattr(args, "no_cache", False) else "--no-cache kept no answers: drop it to keep them")
        return f"{again}  (the same command again: {len(failed)} attack run(s) failed; {kept})\n  {report}"
    attacked = [r for r in records if r.status == "attacked"]
    if attacked and all(r.at_chance for r in attacked):
        samples = next((len(r.clean_sample_scores) for r in records if getattr(r, "clean_sample_scores", None)), 0)
        advice = at_chance_advice(args, samples, "the attacked prompts score at chance, so their PDR is noise", labels=labels)
        return f"{report}\n  {advice}"
    others = [a for a in suggested_attacks() if a not in attacks and attack_runs_here(a)][:2]
    if not others:
        return report
    top_k = getattr(args, "top_k", None)
    extra = ["--attack", ",".join(others)] + (["--top-k", str(top_k)] if top_k is not None and top_k != 3 else [])
    return f"{report}  |  {command(args, *extra)}"
