"""docs/reproduction.md's table from the run folders of scripts/reproduce_sst2.sh.

    python scripts/reproduction_table.py /tmp/i23-runs

Per attack: in-sample PDR with its interval and McNemar p, the held-out PDR
likewise, candidates, seconds, the meaning checks of the adversarial prompt,
the prompt itself, and the paper's SST-2 PDR (promptbench leaderboard); Semantic's
row is the worst prompt of its set, and the mean PDR over the set (the paper's statistic) is
printed under the table; then
the Spearman rank correlation of the two orderings over the attacks measured, with its exact
permutation p-value (every ordering of the attacks, 6! = 720 for six: the share whose |rho| is at
least the observed one).
"""

from __future__ import annotations

import itertools
import sys

from promptrobust.attacks.encoder_check import spearman
from promptrobust.attacks.meaning_check import meaning_verdict
from promptrobust.engine.analysis.report.semantic import set_statistic
from promptrobust.engine.measuring.records import read_jsonl, results_files

#: The paper's leaderboard, SST-2 row (APDR per attack).
PAPER_SST2 = {"textbugger": 0.25, "deepwordbug": 0.18, "textfooler": 0.35, "bertattack": 0.34,
              "checklist": 0.22, "stresstest": 0.15, "semantic": 0.28}
ORDER = ("textbugger", "deepwordbug", "textfooler", "bertattack", "checklist", "stresstest", "semantic")
LABELS = frozenset({"positive", "negative"})


def _ci(ci: list[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "–"


def permutation_p(values: list[float], paper: list[float]) -> float:
    """Exact two-sided permutation p of Spearman's rho between ``values`` and ``paper``: the share of
    all orderings of ``values`` whose |rho| reaches the observed |rho| (ties within 1e-12 count)."""
    observed = abs(spearman(values, paper))
    rhos = [abs(spearman(list(p), paper)) for p in itertools.permutations(values)]
    return sum(r >= observed - 1e-12 for r in rhos) / len(rhos)


def meaning_checks(rec: dict) -> tuple[bool, str]:
    """(pass, why not) from the meaning check independent of the attack
    (``attacks.meaning_check``): the record's own verdict, or, for records made
    before it existed, the verdict computed now. Only "kept" passes."""
    verdict = rec.get("meaning") or meaning_verdict(rec["clean_prompt"], rec["adversarial_prompt"], LABELS).to_dict()
    if verdict["verdict"] == "kept":
        return True, ""
    return False, f"{verdict['verdict']}: " + "; ".join(verdict["reasons"])


def main(argv: list[str]) -> int:
    recs = {}
    for f in results_files(argv or ["runs/reproduce-sst2"]):
        for r in read_jsonl(f):
            if r.get("status") == "attacked":
                recs[r["attack"]] = r
    lines = ["| attack | PDR in-sample [95%] | p | PDR held-out [95%] | p | paper SST-2 | candidates | seconds | "
             "USE angular | meaning checks | adversarial prompt |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in ORDER:
        r = recs.get(name)
        if r is None:
            lines.append(f"| {name} | not measured | | | | {PAPER_SST2[name]:.2f} | | | | | |")
            continue
        h = r.get("held_out") or {}
        ok, why = meaning_checks(r)
        sim = (r.get("final_similarity") or {}).get("angular")
        p_in = "–" if r.get("mcnemar_p") is None else f"{r['mcnemar_p']:.3g}"
        p_out = "–" if h.get("mcnemar_p") is None else f"{h['mcnemar_p']:.3g}"
        held = f"{h['pdr']:.3f} {_ci(h.get('pdr_ci95'))}" if h else "–"
        prompt = r["adversarial_prompt"].replace("|", "\\|").replace("\n", " ")
        lines.append(
            f"| {name} | {r['pdr']:.3f} {_ci(r.get('pdr_ci95'))} | {p_in} | {held} | {p_out} | {PAPER_SST2[name]:.2f} | "
            f"{r['cost']['candidate_evaluations']} | {r['cost']['wall_seconds']:.0f} | "
            f"{'–' if sim is None else f'{sim:.3f}'} | {'pass' if ok else why} | {prompt} |"
        )
    measured = [n for n in ORDER if n in recs]
    print("\n".join(lines))
    stat = set_statistic(recs["semantic"]) if "semantic" in recs else None
    if stat is not None:
        ci = stat.get("ci95")
        print(f"\nSemantic: worst of {stat['prompts']} prompts {recs['semantic']['pdr']:.3f} (the row above); "
              f"mean over the set {stat['mean']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else " (from prompt_scores)")
              + f" in-sample; the paper's SST-2 Semantic APDR {PAPER_SST2['semantic']:.2f} is a mean over prompts")
    if len(measured) >= 3:
        ours = [recs[n]["pdr"] for n in measured]
        held = [(recs[n].get("held_out") or {}).get("pdr") for n in measured]
        paper = [PAPER_SST2[n] for n in measured]
        def rho(values: list) -> str:
            if any(v is None for v in values) or len(set(values)) < 2:
                return "undefined (all tied)"
            return f"{spearman(values, paper):.3f} (exact permutation p {permutation_p(values, paper):.3f})"

        print(f"\nSpearman rank correlation with the paper's SST-2 row over {len(measured)} attacks: "
              f"in-sample {rho(ours)}, held-out {rho(held)}")
        if stat is not None:  # the paper's Semantic figure is a mean over prompts: rank that one too
            like = [stat["mean"] if n == "semantic" else recs[n]["pdr"] for n in measured]
            print(f"  with Semantic as the mean over its set (the paper's statistic), in-sample {rho(like)}")
        passed = sum(meaning_checks(recs[n])[0] for n in measured)
        print(f"meaning checks pass: {passed} of {len(measured)} adversarial prompts")
        top = next(iter(recs.values()))
        print(f"clean prompt {top['prompt_id']}: in-sample {top['clean_score']:.3f} on {top['samples']} samples, "
              f"held-out {(top.get('held_out') or {}).get('clean_score', float('nan')):.3f} "
              f"on {(top.get('held_out') or {}).get('samples')} samples")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
