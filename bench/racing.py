"""What racing the candidates saves, and what it costs in agreement, measured on recorded exhaustive attacks.

    # once, where the model runs: an exhaustive run, then its records (every answer from its cache)
    pre run --attack textbugger,deepwordbug,textfooler,checklist,stresstest,semantic --early-stopping off \\
        --mode choices --limit 200 --top-k 2 --cache runs.sqlite --output-dir runs
    python bench/racing.py record runs/<folder> --cache runs.sqlite --out bench/results/racing_records

    # anywhere, in seconds: replay every record under every way of scoring, write racing.md and racing.json
    python bench/racing.py replay

    # where the model runs: finish live the attacks whose racing path left the recorded one
    python bench/racing.py finish --cache runs.sqlite

Per attack and way of scoring (exhaustive, exact early stopping, exact early stopping with the least
sure samples first, racing at several error rates) the replay counts model calls ((prompt, sample)
pairs, the word ranking included, the clean prompt's pairs being the prompt ranking's) and whether
each step keeps the candidate exhaustive scoring keeps (``bench/racing_replay.py``). An attack whose
racing replay keeps the same candidates everywhere ends on the same adversarial prompt, so its PDR is
the exhaustive one to the digit; one that diverges is finished live (``finish``: the attack run again
with racing against the exhaustive run's cache, so only what the new path asks is new) and its exact
PDR compared with the exhaustive record's 95% interval.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.racing_records import AttackRecordFile, record_run
from bench.racing_replay import Replay, ScoringWay, replay
from bench.racing_scale import SIZES, project, summary
from promptrobust.engine.measuring.racing import RacingSettings

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "results" / "racing_records"
LIVE = HERE / "results" / "racing_live.json"
OUT_MD = HERE / "results" / "racing.md"
OUT_JSON = HERE / "results" / "racing.json"

#: The error rates replayed; the recommended one is the default of ``--early-stopping racing``.
ERROR_RATES = (0.01, 0.05, 0.2)
RECOMMENDED = 0.05
#: An indifference zone replayed beside (``--racing-tolerance``): a race may stop on a leader that is at
#: most this much of the metric worse than the best (4 samples in 200), at the same error rate.
TOLERANCE = 0.02


def ways(error_rates: Sequence[float] = ERROR_RATES) -> list[ScoringWay]:
    """The ways replayed. "racing A" is ``--early-stopping racing --error-rate A`` as it runs (the least
    sure quarter of the samples first, ``RacingSettings``' default); one row replays every sample in
    random order beside it."""
    out = [ScoringWay("exhaustive", "exhaustive"), ScoringWay("exact early stopping", "exact"),
           ScoringWay("exact early stopping, least sure samples first", "exact", informative_first=True)]
    out += [ScoringWay(f"racing {a:g}", "racing", RacingSettings(error_rate=a)) for a in error_rates]
    out.append(ScoringWay(f"racing {RECOMMENDED:g}, samples in random order", "racing",
                          RacingSettings(error_rate=RECOMMENDED, informative_fraction=0.0)))
    out.append(ScoringWay(f"racing {RECOMMENDED:g} within {TOLERANCE:g}, random order", "racing",
                          RacingSettings(error_rate=RECOMMENDED, tolerance=TOLERANCE, informative_fraction=0.0)))
    return out


@dataclass
class AttackResult:
    name: str
    """model_samples_attack_prompt: the record's file stem."""
    record: AttackRecordFile
    replays: dict[str, Replay]

    @property
    def group(self) -> str:
        return f"{self.record.model}, {self.record.samples} samples"


def load_records(folder: Path) -> list[tuple[str, AttackRecordFile]]:
    return [(p.name.removesuffix(".json.gz"), AttackRecordFile.read(p)) for p in sorted(folder.glob("*.json.gz"))]


def live_results() -> dict[str, Any]:
    return orjson.loads(LIVE.read_bytes()) if LIVE.exists() else {}


def _pdr_of(res: AttackResult, way: ScoringWay, live: dict[str, Any]) -> float | None:
    """The exact PDR the attack ends on under ``way``: the exhaustive one where the path never left the
    record; a live finish's where it did (None if not finished yet)."""
    rep = res.replays[way.name]
    if rep.diverged_at is None:
        return float(res.record.source["pdr"])
    found = live.get(res.name, {}).get(way.name)
    return None if found is None else float(found["pdr"])


def _calls_of(res: AttackResult, way: ScoringWay, live: dict[str, Any]) -> int | None:
    rep = res.replays[way.name]
    if rep.diverged_at is None:
        return rep.calls
    found = live.get(res.name, {}).get(way.name)
    return None if found is None else int(found["calls"])


def _exhaustive_calls(res: AttackResult) -> int:
    """The whole record's calls under exhaustive scoring (a path's own ``exhaustive_calls`` stop where
    it left the record)."""
    found = res.replays.get("exhaustive")
    return (found or replay(res.record, ScoringWay("exhaustive", "exhaustive"))).calls


def summarize(results: list[AttackResult], way: ScoringWay, live: dict[str, Any]) -> dict[str, Any]:
    """Totals for one way of scoring over ``results``: the four keys of racing.json and what they rest on."""
    attacks = [r for r in results if r.record.search != "topk"]
    exhaustive = sum(_exhaustive_calls(r) for r in attacks)
    calls = [_calls_of(r, way, live) for r in attacks]
    known = [(r, c) for r, c in zip(attacks, calls) if c is not None]
    pdrs = [(r, _pdr_of(r, way, live)) for r in attacks]
    with_pdr = [(r, p) for r, p in pdrs if p is not None]
    inside = [lo - 1e-12 <= p <= hi + 1e-12 for r, p in with_pdr for lo, hi in [r.record.source["pdr_ci95"]]]
    exhaustive_known = sum(_exhaustive_calls(r) for r, _ in known)
    return {
        "attacks": len(attacks),
        "calls_ratio": round(exhaustive_known / max(1, sum(c for _, c in known)), 3) if known else None,
        "within_interval": round(sum(inside) / len(inside), 3) if inside else None,
        "mean_pdr_drop": (round(sum(float(r.record.source["pdr"]) for r, _ in with_pdr) / len(with_pdr)
                                - sum(p for _, p in with_pdr) / len(with_pdr), 4) if with_pdr else None),
        "exhaustive_calls": exhaustive,
        "calls": sum(c for _, c in known),
        "attacks_counted": len(known),
        "diverged": sum(r.replays[way.name].diverged_at is not None for r in attacks),
        "diverged_unfinished": sum(1 for r, p in pdrs if p is None),
    }


def replay_all(records: list[tuple[str, AttackRecordFile]], chosen: list[ScoringWay]) -> list[AttackResult]:
    return [AttackResult(name, rec, {w.name: replay(rec, w) for w in chosen}) for name, rec in records]


def separation(records: Sequence[AttackRecordFile]) -> list[list[str]]:
    """How far apart the prompts a step compares are, per kind of step: why a sequential test
    stops late or never. Each step's prompts sorted by their total score; for neighbours in that
    order, the gap between totals (in samples), how often it is an exact tie (only the index
    decides the order, which no test can settle before the last sample), and on how many samples
    the two answer differently (what a paired test sees)."""
    import statistics

    by_kind: dict[str, dict[str, list[float]]] = {}
    for rec in records:
        if rec.search == "topk":
            continue
        for call in rec.calls:
            prompts = list(dict.fromkeys(call.prompts))
            if len(prompts) < 2:
                continue
            kind = ("ranking" if rec.search == "greedy" else rec.search) if call.to_beat is None else \
                ("greedy step" if rec.search == "greedy" else rec.search)
            totals = sorted((sum(rec.scores[p]), p) for p in prompts)
            row = by_kind.setdefault(kind, {"steps": [], "gaps": [], "ties": [], "differ": [], "first": []})
            row["steps"].append(len(prompts))
            for (a, pa), (b, pb) in zip(totals, totals[1:]):
                row["gaps"].append(b - a)
                row["ties"].append(float(b == a))
                row["differ"].append(sum(x != y for x, y in zip(rec.scores[pa], rec.scores[pb])))
            row["first"].append(totals[1][0] - totals[0][0])
    out = []
    for kind, row in sorted(by_kind.items()):
        out.append([kind, str(len(row["steps"])), f"{statistics.median(row['steps']):g}",
                    f"{statistics.median(row['gaps']):g}", f"{statistics.fmean(row['ties']):.2f}",
                    f"{statistics.median(row['differ']):g}", f"{statistics.median(row['first']):g}"])
    return out


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def projection_lines(projected: dict[str, dict[str, dict[str, float]]], measured: dict[str, float | None]) -> list[str]:
    """racing.md's section on how the saving grows with the number of samples (``bench/racing_scale.py``)."""
    lines = [f"## How the saving grows with the number of samples (a projection, racing {RECOMMENDED:g})", "",
             "Each record drawn again with replacement at N samples (one draw of sample indices for all its prompts, so "
             "paired differences keep their distribution) and its recorded exhaustive path replayed step by step on the "
             "drawn samples (`bench/racing_scale.py`). A projection, not a measurement: drawn samples repeat recorded ones "
             "and the path is the recorded one. At the records' own size it is set beside the measured ratio as its check.", ""]
    rows = []
    for group, by_size in projected.items():
        for size, s in by_size.items():
            at_own = measured.get(group) if int(size) == int(group) else None
            rows.append([f"records at {group}", size, f"{s['calls_ratio']:.2f}x",
                         f"{s['calls_ratio_min']:.2f}-{s['calls_ratio_max']:.2f}x", f"{s['steps_as_exhaustive']:.3f}",
                         "-" if at_own is None else f"{at_own:.2f}x"])
    return lines + _table(rows, ["records", "samples N", "exhaustive / racing (mean of draws)", "range over draws",
                                 "steps choosing as exhaustive", "measured at N"]) + [""]


def write_report(results: list[AttackResult], chosen: list[ScoringWay], live: dict[str, Any], command: str,
                 extra: Sequence[str] = ()) -> None:
    from bench.environment import describe_line

    groups = sorted({r.group for r in results})
    lines = ["# Racing the candidates: model calls saved against agreement with exhaustive search", "",
             f"Command: `{command}`", describe_line(), "",
             "Replayed on recorded exhaustive attacks (`bench/racing_records.py`: every candidate of every step scored on "
             "every sample, the per-sample scores kept), without a model. Calls: (prompt, sample) pairs scored, the word "
             "ranking included; the clean prompt's are the prompt ranking's. An attack whose racing path keeps every "
             "recorded choice ends on the exhaustive adversarial prompt (the same PDR); one that leaves the record at a "
             "step was finished live where `racing_live.json` says so.", ""]
    for group in groups:
        members = [r for r in results if r.group == group]
        lines += [f"## {group}", ""]
        rows = []
        for w in chosen:
            s = summarize(members, w, live)
            agree = sum(st.same_choice for r in members for st in r.replays[w.name].steps if st.kind in ("step", "brute"))
            steps = sum(1 for r in members for st in r.replays[w.name].steps if st.kind in ("step", "brute"))
            rows.append([w.name, f"{s['calls']:,}", f"{s['exhaustive_calls'] / max(1, s['calls']):.2f}x",
                         f"{agree}/{steps}", f"{s['diverged']} ({s['diverged_unfinished']} unfinished)",
                         "-" if s["within_interval"] is None else f"{s['within_interval']:.3f}",
                         "-" if s["mean_pdr_drop"] is None else f"{s['mean_pdr_drop']:+.4f}"])
        lines += _table(rows, ["scoring", "model calls", "exhaustive / this", "steps choosing as exhaustive",
                               "attacks diverged", "PDR in exhaustive's 95% interval", "mean PDR drop"]) + [""]
        lines += ["Per attack (calls; a `*` marks a path that left the record):", ""]
        rows = []
        for r in members:
            if r.record.search == "topk":
                continue
            cells = [r.record.attack, r.record.prompt_id, f"{float(r.record.source['pdr']):.3f}"]
            for w in chosen:
                rep = r.replays[w.name]
                calls = _calls_of(r, w, live)
                cells.append(f"{calls:,}*" if rep.diverged_at is not None and calls is not None else
                             f">{rep.calls:,}* (unfinished)" if rep.diverged_at is not None else f"{rep.calls:,}")
            rows.append(cells)
        lines += _table(rows, ["attack", "prompt", "exhaustive PDR", *[w.name for w in chosen]]) + [""]
        lines += ["How far apart a step's prompts are (each step's prompts in the order of their totals; "
                  "neighbours in that order compared; gaps and differences in samples; `separation()`):", ""]
        lines += _table(separation([r.record for r in members]),
                        ["step", "steps", "prompts a step (median)", "gap between neighbours (median)",
                         "neighbours tied exactly", "samples answered differently by neighbours (median)",
                         "gap between the best two (median)"]) + [""]
        for r in members:
            if r.record.search == "topk":
                rows = [[w.name, f"{r.replays[w.name].calls:,}", "yes" if r.replays[w.name].steps[0].same_choice else "no"]
                        for w in chosen]
                lines += [f"Ranking the prompt set ({len(r.record.calls[0].prompts)} prompts, keep the top "
                          f"{r.record.source.get('top_k')}):", ""]
                lines += _table(rows, ["scoring", "model calls", "same top k"]) + [""]
    OUT_MD.write_text("\n".join([*lines, *extra]) + "\n")


def cmd_replay(args: argparse.Namespace) -> None:
    records = load_records(Path(args.records))
    chosen = ways()
    started = time.perf_counter()
    results = replay_all(records, chosen)
    live = live_results()
    command = "python bench/racing.py replay"
    recommended = next(w for w in chosen if w.name == f"racing {RECOMMENDED:g}")
    assert recommended.racing is not None
    projected: dict[str, dict[str, dict[str, float]]] = {}
    measured: dict[str, float | None] = {}
    for size in sorted({r.record.samples for r in results}):
        members = [r for r in results if r.record.samples == size]
        sizes = [size, *(n for n in SIZES if n > size)]
        projected[str(size)] = summary(project([r.record for r in members], recommended.racing, sizes, args.draws))
        measured[str(size)] = summarize(members, recommended, live)["calls_ratio"]
    write_report(results, chosen, live, command, projection_lines(projected, measured))
    out: dict[str, Any] = {"setting": recommended.name, "error_rate": RECOMMENDED}
    for group in sorted({r.group for r in results}):
        members = [r for r in results if r.group == group]
        samples = members[0].record.samples
        key = "samples_500" if samples >= 500 else f"samples_{samples}"
        out.setdefault(key, {}).update({group: summarize(members, recommended, live)})
    at_200 = [r for r in results if r.record.samples == 200]
    at_500 = [r for r in results if r.record.samples >= 500]
    out.update({k: v for k, v in summarize(at_200, recommended, live).items() if k in ("attacks", "calls_ratio", "within_interval", "mean_pdr_drop")})
    out["samples_500"] = {**{k: v for k, v in summarize(at_500, recommended, live).items()
                             if k in ("attacks", "calls_ratio", "within_interval", "mean_pdr_drop")}, **out.get("samples_500", {})}
    # what ``engine.measuring.racing.MEASURED_SHARE`` is set from: racing's calls over exhaustive's, per kind of search
    out["share_by_search"] = {}
    for kind in sorted({r.record.search for r in results}):
        members = [r for r in results if r.record.search == kind]
        calls = [_calls_of(r, recommended, live) for r in members]
        if all(c is not None for c in calls):
            exhaustive = sum(_exhaustive_calls(r) for r in members)
            out["share_by_search"][kind] = round(sum(c for c in calls if c is not None) / max(1, exhaustive), 3)
    out["projected_by_samples"] = projected
    out["replay_seconds"] = round(time.perf_counter() - started, 2)
    OUT_JSON.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(OUT_MD.read_text())


def cmd_record(args: argparse.Namespace) -> None:
    paths = asyncio.run(record_run(Path(args.run), Path(args.cache), Path(args.out), attacks=args.attacks or ()))
    for p in paths:
        print(p)


async def _finish_one(rec: AttackRecordFile, name: str, way: ScoringWay, cache: str) -> dict[str, Any]:
    """The attack run again with ``way``'s racing on the record's model, data and prompt, against
    ``cache`` (the exhaustive run's: only what the new path asks reaches the model)."""
    from promptrobust.attacks.registry import get_attack
    from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
    from promptrobust.engine.measuring.workbench import attack_one
    from promptrobust.engine.runs.session import Session
    from promptrobust.tasks.base import Prompt

    assert way.racing is not None
    options = dict(rec.source.get("effective_options") or rec.source.get("attack_options") or {})
    if "word_senses" in get_attack(rec.attack).recipe.options() and "effective_options" not in rec.source:
        options.setdefault("word_senses", "any")  # recorded before word senses: its words were of any sense
    settings = AttackSettings(attacks=(rec.attack,), top_k=1, early_stopping="racing", error_rate=way.racing.error_rate,
                              racing_tolerance=way.racing.tolerance, options={rec.attack: options} if options else {})
    async with Session(cache=cache) as session:
        bench = await session.workbench(rec.model, EvaluationSettings(limit=rec.samples, seed=rec.seed, mode=rec.mode))
        started = time.perf_counter()
        record = await attack_one(bench, Prompt(rec.prompt_id, rec.dataset, "task", rec.clean_prompt), rec.attack, settings)
    calls = record.cost.samples_evaluated - rec.samples  # the clean prompt's pairs are the ranking's
    return {"pdr": record.pdr, "adversarial_prompt": record.adversarial_prompt, "calls": calls,
            "requests_sent": record.cost.requests_sent, "seconds": round(time.perf_counter() - started, 1)}


def cmd_finish(args: argparse.Namespace) -> None:
    records = load_records(Path(args.records))
    live = live_results()
    chosen = [w for w in ways() if w.kind == "racing"]
    engine_order = RacingSettings().informative_fraction
    for name, rec in records:
        if rec.search == "topk" or (args.only and args.only not in name):
            continue
        for w in chosen:
            if replay(rec, w).diverged_at is None or w.name in live.get(name, {}):
                continue
            assert w.racing is not None
            if w.racing.informative_fraction != engine_order:
                print(f"cannot finish {name} under {w.name} live: the engine orders a race's samples one way "
                      f"(least sure {engine_order:.0%} first)", flush=True)
                continue
            print(f"finishing {name} under {w.name} ...", flush=True)
            live.setdefault(name, {})[w.name] = asyncio.run(_finish_one(rec, name, w, args.cache))
            LIVE.write_bytes(orjson.dumps(live, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
            print(f"  {live[name][w.name]}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record", help="records of an exhaustive run, from its cache (no model call)")
    p.add_argument("run", help="the exhaustive run folder (pre run ... --early-stopping off)")
    p.add_argument("--cache", required=True, help="the score cache that run wrote")
    p.add_argument("--out", default=str(RECORDS))
    p.add_argument("--attacks", nargs="*", help="only these attacks")
    p.set_defaults(func=cmd_record)
    p = sub.add_parser("replay", help="replay every record under every way of scoring; racing.md and racing.json")
    p.add_argument("--records", default=str(RECORDS))
    p.add_argument("--draws", type=int, default=2, help="draws per size in the projection by number of samples")
    p.set_defaults(func=cmd_replay)
    p = sub.add_parser("finish", help="finish live the racing paths that left their record (needs the model)")
    p.add_argument("--records", default=str(RECORDS))
    p.add_argument("--cache", required=True, help="the exhaustive run's score cache (a copy is fine)")
    p.add_argument("--only", default=None, help="only records whose name contains this")
    p.set_defaults(func=cmd_finish)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
