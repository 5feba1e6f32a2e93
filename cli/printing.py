"""What `pre run` prints: clean scores and attack records with their intervals."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any


def _ci(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def settings_line(settings: dict[str, Any]) -> str:
    """Under which settings the numbers were made (printed above every table)."""
    mode = settings["mode"]
    how = f"generate (<= {settings['max_new_tokens']} new tokens, {settings['parser']} parser)" if mode == "generate" else "choices (label log-probs)"
    if mode == "choices" and str(settings.get("label_scoring") or "").startswith("approximate"):
        how = "choices (label log-probs APPROXIMATED from the top-20 first-token log-probs)"
    return (
        f"{settings['model']} on {settings['dataset']}: {settings['samples']} samples, {settings['shots']}-shot, "
        f"{settings['input_format']} input, {how}, metric {settings['metric']}, seed {settings['seed']}"
    )


def print_clean(settings: dict[str, Any], clean: Iterable[Any], *, chance: float | None = None) -> None:
    clean = list(clean)
    print(settings_line(settings))
    width = max([len(c.prompt.id) for c in clean] + [6])
    print(f"{'prompt':<{width}}  score   95% interval    unparseable")
    for c in clean:
        flag = "  <- at chance" if c.at_chance else ""
        print(f"{c.prompt.id:<{width}}  {c.score:.4f}  {_ci(c.ci95)}  {c.unparseable:>6}{flag}")
    if any(c.at_chance for c in clean):
        rate = f" ({chance:.2f})" if chance is not None else ""
        print(f"note: prompts marked 'at chance' score no better than the majority class{rate}: their PDR is not meaningful")


def print_records(records: Sequence[Any]) -> None:
    attacked = [r for r in records if r.status == "attacked"]
    if attacked:
        print(f"\n{'attack':<12} {'prompt':<16} {'clean':>7} {'attacked':>8} {'PDR':>7}  {'PDR 95% interval':<17} {'McNemar p':>9} {'cands':>5} {'sent':>6} {'secs':>7}")
        for r in attacked:
            p = "-" if r.mcnemar_p is None else f"{r.mcnemar_p:.3g}"
            chance = "  at chance" if r.at_chance else ""
            print(
                f"{r.attack:<12} {r.prompt_id:<16} {r.clean_score:>7.4f} {r.adversarial_score:>8.4f} {r.pdr:>7.4f}  "
                f"{_ci(r.pdr_ci95):<17} {p:>9} {r.cost.candidate_evaluations:>5} {r.cost.requests_sent:>6} "
                f"{r.cost.wall_seconds:>7.1f}{chance}"
            )
        for r in attacked:
            if r.adversarial_prompt != r.clean_prompt:
                print(f"\n[{r.attack} / {r.prompt_id}] {r.adversarial_prompt}")
            from promptrobust.engine.analysis.report.meaning import meaning_text

            line = meaning_text(vars(r))  # issue 23: substitutions, similarity, held-out PDR
            if line:
                print(f"  {line}")
    for r in records:
        if r.status == "skipped_clean_zero":
            print(f"skipped: {r.attack} on {r.prompt_id} (clean score 0: nothing to drop, as promptbench)")
        elif r.status == "failed":
            print(f"pre: error: {r.attack} on {r.prompt_id}: {r.error}", file=sys.stderr)


def next_step(args: Any, *, clean: Sequence[Any] = (), samples: int = 0, records: Sequence[Any] | None = None,
              attacks: Sequence[str] = ()) -> None:
    """The `next:` hint: it keeps the user's flags and never suggests attacking a prompt at chance (cli/hints.py)."""
    from promptrobust.cli import hints

    if records is not None:
        text = hints.after_attack(args, records, attacks, getattr(args, "output_dir", "runs"))
    else:
        text = hints.after_clean(args, clean, samples)
    print(f"\nnext: {text}", file=sys.stderr)


def event_printer(*, quiet: bool) -> Any:
    """The library's ``on_event`` messages worth a line of their own: records (PDR, skipped) and
    failures. Phases ("scoring ...", "X on Y") are said by the progress reporter already."""

    def say(message: str) -> None:
        if "FAILED" in message or (not quiet and ("PDR" in message or "skipped" in message)):
            print(f"pre: {message}", file=sys.stderr)

    return say
