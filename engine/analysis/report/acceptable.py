"""Acceptable-only results (issue 30; the paper's Appendix C.4): the APDR over
the adversarial prompts whose meaning check kept the meaning, beside the APDR
over all of them.

The verdict is the attack record's ``meaning`` (``attacks.meaning_check``,
independent of the attack's search): kept, changed or not checked. A record
without a verdict (pairs, records made before the check) counts as not
checked, never as acceptable. A prompt set's record (Semantic: every prompt a
rewrite of the whole instruction, written by people) has a verdict of its own,
``NEEDS_A_HUMAN``: the word-level check cannot judge a rewrite, and no machine
verdict for whole rewrites has been calibrated, so whether its prompts keep the
instruction is left to a reader (the prompts are in the Semantic table and the
task's prompt files); its mean over the set is in the "APDR all" column.

A person's verdict (``PERSON_FIELD``, put on records from a filled review sheet:
``review``) replaces the check's wherever one was given, as the paper's own
acceptability was judged by people; the tables count such verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptrobust.engine.analysis.report.semantic import as_set_mean, is_prompt_set
from promptrobust.engine.analysis.report.tables import (
    MISSING,
    SET_MEAN_FIELD,
    Table,
    _summary,
    apdr_cell,
    set_means,
    summary_columns,
    with_set_note,
)

#: The verdicts a check or a person gives a pair.
VERDICTS = ("kept", "changed")
#: The verdict of a rewritten prompt set for the acceptable-only view.
NEEDS_A_HUMAN = "needs a human"
#: Where a person's verdict sits on a record (``{"verdict": "kept" | "changed", "note": ...}``).
PERSON_FIELD = "person_meaning"
ACCEPTABLE_NOTE = (
    "acceptable: the adversarial prompts whose meaning check (independent of the attack: changed instruction "
    "words, opposites, words opposing a label, WordNet part of speech and relation, and the in-context "
    "similarity of each replaced word under two encoders no attack uses, all-MiniLM-L6-v2 and all-mpnet-base-v2 "
    "(MiniLM alone where MPNet is not installed, an NLI model where the run named one with --meaning-nli: records "
    "name the check); docs/fidelity.md gives its measured "
    "error rates) kept the "
    "meaning, as the paper's Appendix C.4 reports acceptable ones apart; "
    "changed: the check found the meaning changed; not checked: a missing encoder, or records made before the "
    "check, never counted as acceptable. APDR cells as in the APDR tables"
)
REWRITE_NOTE = (
    "needs a human: a prompt set of rewrites (Semantic), each prompt the whole instruction rewritten by a person; "
    "the word-level check cannot judge a rewrite and no whole-prompt verdict is calibrated, so it is neither "
    "acceptable nor changed until a person judges its rewrites (meaning_review.csv, then --meaning-verdicts; its "
    "mean over the set is under 'APDR all')"
)
REWRITE_REASON = "a rewrite of the whole prompt: a person must judge whether it keeps the instruction"


#: How every check's recorded name starts (``attacks.meaning_check.CHECK``); ``check_name`` drops it.
CHECK_PREFIX = "promptrobust meaning check"
#: Said under the acceptable table when its rows are split by the check that judged them.
BY_CHECK_NOTE = ("rows split by the meaning check that judged their records (records name it; 'none': no verdict "
                 "recorded): acceptable APDRs of different checks, which have different error rates, are never pooled")

#: Where a person's verdicts on a prompt set's rewrites sit on its record:
#: ``{"kept_pdrs": [PDR of each rewrite kept], "changed": n, "prompts": N}`` (``review.apply_verdicts``).
PERSON_SET_FIELD = "person_rewrites"
PERSON_NOTE = ("by a person: verdicts read from a filled review sheet (--meaning-verdicts) replace the check's; a "
               "Semantic record a person judged is acceptable when a person kept at least one of its rewrites, and "
               "enters 'APDR acceptable' as the mean PDR over the rewrites kept (from its prompt scores: no interval)")


def is_rewrite(r: Mapping[str, Any]) -> bool:
    """A prompt set of rewrites (Semantic's record), which the word-level check cannot judge."""
    return bool(r.get(SET_MEAN_FIELD)) or is_prompt_set(r)


def person_verdict(r: Mapping[str, Any]) -> str | None:
    """The verdict a person gave this record's pair (``review``), or None. A prompt set of rewrites
    is kept when a person kept one of its rewrites, changed when a person judged every one changed."""
    if is_rewrite(r):
        judged = r.get(PERSON_SET_FIELD)
        if not isinstance(judged, Mapping):
            return None
        if judged["kept_pdrs"]:
            return "kept"
        return "changed" if judged["changed"] == judged["prompts"] else None
    person = r.get(PERSON_FIELD)
    verdict = person.get("verdict") if isinstance(person, Mapping) else None
    return verdict if verdict in VERDICTS else None


def check_verdict(r: Mapping[str, Any]) -> str:
    """The meaning check's verdict: kept, changed, not checked (none recorded) or, for a prompt set of
    rewrites, ``NEEDS_A_HUMAN``."""
    if is_rewrite(r):
        return NEEDS_A_HUMAN
    meaning = r.get("meaning")
    verdict = meaning.get("verdict") if isinstance(meaning, Mapping) else None
    return verdict if verdict in VERDICTS else "not checked"


def check_reasons(r: Mapping[str, Any]) -> str:
    """Why the check gave its verdict (may be '': a kept verdict has no reasons)."""
    if is_rewrite(r):
        return REWRITE_REASON
    meaning = r.get("meaning")
    if not isinstance(meaning, Mapping):
        return "no verdict recorded"
    return "; ".join(str(x) for x in meaning.get("reasons") or [])


def check_name(r: Mapping[str, Any]) -> str:
    """Which meaning check judged ``r``, in short ("v9", "v9, all-MiniLM-L6-v2 alone"): the recorded
    check's name before its rules; "none" for a record without a verdict, "rewrites" for a prompt set."""
    if is_rewrite(r):
        return "rewrites"
    meaning = r.get("meaning")
    check = meaning.get("check") if isinstance(meaning, Mapping) else None
    if not isinstance(check, str) or not check.strip():
        return "none"
    name = check.split(":", 1)[0].strip()
    return name.removeprefix(CHECK_PREFIX).strip() or name


def verdict_of(r: Mapping[str, Any]) -> str:
    """A record's meaning verdict: a person's where one was given, else the check's (``check_verdict``)."""
    return person_verdict(r) or check_verdict(r)


def verdict_text(r: Mapping[str, Any]) -> str:
    """The verdict with its reasons, for a table cell."""
    person = person_verdict(r)
    if person is not None and is_rewrite(r):
        judged = r[PERSON_SET_FIELD]
        return (f"{person} by a person: {len(judged['kept_pdrs'])} of {judged['prompts']} rewrites kept, "
                f"{judged['changed']} changed")
    if person is not None:
        note = str(r[PERSON_FIELD].get("note") or "")
        return f"{person} by a person{': ' + note if note else ''} (the check said {check_verdict(r)})"
    reasons = check_reasons(r)
    return check_verdict(r) + (f": {reasons}" if reasons else "")


def acceptable_view(r: Mapping[str, Any]) -> Mapping[str, Any]:
    """``r`` as the acceptable APDR counts it: a prompt set a person judged enters as the mean PDR over
    the rewrites a person kept (no interval: the prompt scores carry no per-sample scores); any other
    record as it is."""
    judged = r.get(PERSON_SET_FIELD) if is_rewrite(r) else None
    if not isinstance(judged, Mapping) or not judged["kept_pdrs"]:
        return r
    pdrs = [float(x) for x in judged["kept_pdrs"]]
    return as_set_mean(r, sum(pdrs) / len(pdrs))


def acceptable_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table:
    """APDR over all attacked records and over the acceptable ones, per (attack, model, dataset), with counts."""
    # Records judged by different checks (another version, the MiniLM-alone fallback) are kept apart:
    # a row per check, named in a column of its own where a table holds more than one.
    # Records without a verdict are never acceptable: they alone do not split a table.
    judged_by = {check_name(r) for r in attacked if not is_rewrite(r)} - {"none"}
    by_check = len(judged_by) > 1
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for r in attacked:
        cell: tuple[str, ...] = (r["attack"], r["model"], r["dataset"])
        groups.setdefault((*cell, check_name(r)) if by_check else cell, []).append(r)
    any_rewrites = any(is_rewrite(r) for r in attacked)  # the rewrites' column and note only where there are some
    any_person = any(person_verdict(r) for r in attacked)  # likewise the column of a person's verdicts
    marked = set_means(attacked) > 0
    display, long = [], []
    for key in sorted(groups):
        members = groups[key]
        verdicts = [verdict_of(r) for r in members]
        kept = [acceptable_view(r) for r, v in zip(members, verdicts) if v == "kept"]
        every, samples = _summary(members)
        cells = [str(every.n), apdr_cell(every, samples=samples, marked=set_means(members) > 0)]
        row: dict[str, Any] = {"attack": key[0], "model": key[1], "dataset": key[2],
                               **({"meaning_check": key[-1]} if by_check else {}),
                               **{f"all_{k}": v for k, v in summary_columns(every).items()},
                               **({"all_set_means": set_means(members)} if marked else {})}
        rewrites = verdicts.count(NEEDS_A_HUMAN)
        if kept:
            ok, ok_samples = _summary(kept)
            cells += [str(ok.n), apdr_cell(ok, samples=ok_samples)]
            row.update({f"acceptable_{k}": v for k, v in summary_columns(ok).items()})
        else:
            cells += ["0", NEEDS_A_HUMAN if rewrites == len(members) else MISSING]
            row.update({"acceptable_count": 0, "acceptable_mean": None})
        changed, unchecked = verdicts.count("changed"), verdicts.count("not checked")
        by_person = sum(1 for r in members if person_verdict(r))
        display.append([*key, *cells, str(changed), str(unchecked), *([str(rewrites)] if any_rewrites else []),
                        *([str(by_person)] if any_person else [])])
        long.append({**row, "changed": changed, "not_checked": unchecked,
                     **({"needs_a_human": rewrites} if any_rewrites else {}),
                     **({"by_a_person": by_person} if any_person else {})})
    return Table("apdr_acceptable" + suffix, "APDR over all adversarial prompts and over the acceptable ones" + title_suffix,
                 ["attack", "model", "dataset", *(["meaning check"] if by_check else []), "n all", "APDR all",
                  "n acceptable", "APDR acceptable", "meaning changed", "not checked",
                  *(["needs a human"] if any_rewrites else []), *(["by a person"] if any_person else [])], display, long,
                 with_set_note(ACCEPTABLE_NOTE + (f"; {REWRITE_NOTE}" if any_rewrites else "")
                               + (f"; {PERSON_NOTE}" if any_person else "") + (f"; {BY_CHECK_NOTE}" if by_check else ""),
                               marked),
                 statistic="APDR (mean ± sample s.d. [95% bootstrap]) over all and over acceptable adversarial prompts; counts")


def not_acceptable_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """The adversarial prompts the acceptable APDR leaves out, each with why (None when there are none).
    Records without a recorded verdict are listed only beside records that have one: in runs made
    before the check, the counts say it (rewrites, which have a verdict of their own, are listed)."""
    checked = any(isinstance(r.get("meaning"), Mapping) or person_verdict(r) for r in attacked)
    rows = sorted((r for r in attacked if verdict_of(r) != "kept" and (checked or is_rewrite(r))),
                  key=lambda r: (r["attack"], r["model"], r["dataset"], r["prompt_id"]))
    if not rows:
        return None
    display = [[r["attack"], r["model"], r["dataset"], r["prompt_id"], f"{r['pdr']:.3f}", verdict_text(r),
                r["adversarial_prompt"]] for r in rows]
    long = [{"attack": r["attack"], "model": r["model"], "dataset": r["dataset"], "prompt_id": r["prompt_id"],
             "pdr": r["pdr"], "meaning_check": verdict_of(r), "judged_by": "person" if person_verdict(r) else "check",
             "reasons": list((r.get("meaning") or {}).get("reasons") or []) if isinstance(r.get("meaning"), Mapping) else [],
             "clean_prompt": r["clean_prompt"], "adversarial_prompt": r["adversarial_prompt"]} for r in rows]
    return Table("not_acceptable" + suffix, "Adversarial prompts left out of the acceptable APDR" + title_suffix,
                 ["attack", "model", "dataset", "prompt", "PDR", "meaning check", "adversarial prompt"], display, long,
                 "each with its verdict and reasons (docs/fidelity.md, the meaning check)",
                 statistic="per-record PDR and meaning verdict")
