"""What an attack costs, said before (``pre run --dry-run``) and after (records, results.json), in
requests, tokens and US dollars; and what racing the candidates records. Against a real HTTP
server on 127.0.0.1 that reports token usage (``FakeOpenAIServer``)."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.serving.prices import Price
from promptrobust.testing.fake_openai import FakeOpenAIServer


def _run(tmp_path: Path, url: str, *extra: str) -> tuple[dict, list[dict]]:
    code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={url}", "--dataset", "rotten_tomatoes",
                 "--limit", "12", "--prompt", "sst2-task-01", "--attack", "stresstest,checklist", "--top-k", "1",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress", *extra])
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    document = orjson.loads((folder / "results.json").read_bytes())
    rows = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines() if line.strip()]
    return document, [r for r in rows if r.get("kind", "attack") == "attack" and r.get("attack")]


def test_dollars_are_the_tokens_the_server_reported_times_the_price(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        document, records = _run(tmp_path, server.url, "--price-per-mtok", "1.5,4")
    assert {r["attack"] for r in records} == {"stresstest", "checklist"}
    price = Price(1.5, 4.0)
    for r in records:
        cost = r["cost"]
        assert cost["input_tokens"] > 0 and cost["output_tokens"] > 0
        assert cost["usd"] == pytest.approx(price.usd(cost["input_tokens"], cost["output_tokens"]), abs=1e-6)
    by_attack = {row["attack"]: row for row in document["results"]["cost_by_attack"]}
    for r in records:  # one record per attack here: the per-attack rows are the records' sums
        row = by_attack[r["attack"]]
        assert row["input_tokens"] == r["cost"]["input_tokens"] and row["output_tokens"] == r["cost"]["output_tokens"]
        assert row["usd"] == pytest.approx(r["cost"]["usd"], abs=1e-6)
        assert row["search"] == "early stopping exact"


def test_a_raced_record_says_its_search_and_keeps_exact_scores(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        _, exact = _run(tmp_path / "exact", server.url, "--early-stopping", "off")
        _, raced = _run(tmp_path / "raced", server.url, "--early-stopping", "racing", "--error-rate", "0.1")
    for r in raced:
        assert r["search"] == "racing (error rate 0.1 per step)"
        assert r["cost"]["races"] >= 1
        assert 0 <= r["cost"]["raced_out"] and 0 <= r["cost"]["saved_by_racing"]
    for r in exact:
        assert "search" not in r or r["search"] is None
        assert "races" not in r["cost"]  # only raced searches carry the racing counts
    # a report keeps raced and exhaustive records apart unless asked to pool them
    from promptrobust.engine.analysis.report import build_report

    apart = build_report([tmp_path / "exact" / "runs", tmp_path / "raced" / "runs"], figures=False)
    attack_sections = [s for s in apart.sections if s.kind == "attack"]
    assert len(attack_sections) == 2 and sum(s.setting.search is not None for s in attack_sections) == 1
    pooled = build_report([tmp_path / "exact" / "runs", tmp_path / "raced" / "runs"], figures=False, pool_searches=True)
    assert len([s for s in pooled.sections if s.kind == "attack"]) == 1
    assert any("pooled with exhaustive ones" in n for n in pooled.notes)
    # the kept candidate is scored on every sample: its score is its exhaustive score
    exhaustive = {r["attack"]: r for r in exact}
    for r in raced:
        same = exhaustive[r["attack"]]
        if r["adversarial_prompt"] == same["adversarial_prompt"]:
            assert r["adversarial_score"] == same["adversarial_score"] and r["pdr"] == same["pdr"]


def test_a_dry_run_prices_an_api_model_without_its_key_and_racing_costs_less(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a dry run sends nothing: no key needed
    code = main(["run", "--model", "openai:gpt-4o-mini", "--dataset", "sst2", "--limit", "100",
                 "--attack", "textbugger,checklist", "--dry-run"])
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = {}
    for line in out.out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1].replace(".", "").isdigit() and parts[-4].replace(",", "").isdigit():
            rows[" ".join(parts[:-4])] = [float(p.replace(",", "")) for p in parts[-4:]]
    exhaustive, raced = rows["total, exhaustive <="], rows["total, racing, about"]
    assert raced[0] < exhaustive[0]  # fewer requests
    # dollars = tokens x the listed price (0.15 / 0.6 USD per million), to the cent shown
    assert exhaustive[3] == pytest.approx((exhaustive[1] * 0.15 + exhaustive[2] * 0.6) / 1e6, abs=0.006)
    ranking = rows["ranking the prompts"]
    assert ranking[0] == 10 * 100  # every prompt of the type on every sample
    assert math.isclose(sum(v[0] for k, v in rows.items() if k.endswith("exhaustive <=") and not k.startswith("total"))
                        + ranking[0], exhaustive[0])
    assert "dry run: nothing was run" in out.err


def test_the_progress_line_says_the_dollars_spent_so_far_on_a_priced_model() -> None:
    from promptrobust.engine import progress
    from promptrobust.engine.progress.display import format_status
    from promptrobust.engine.progress.state import ProgressState
    from promptrobust.engine.serving.scheduler import SchedulerStats

    priced = SchedulerStats(price=Price(2.0, 8.0), input_tokens=1_000, output_tokens=10)  # spent before it was watched
    unpriced = SchedulerStats(input_tokens=5_000)
    state = ProgressState()
    state.apply(progress.Watch(priced))
    state.apply(progress.Watch(unpriced))
    priced.input_tokens += 50_000
    priced.output_tokens += 1_000
    unpriced.input_tokens += 50_000
    priced.completed += 100
    priced.backend_requests += 100
    status = state.status()
    assert status.usd == pytest.approx((50_000 * 2.0 + 1_000 * 8.0) / 1e6)  # only what was spent while watched
    line = format_status(status)
    assert "USD 0.1080 so far" in line
    alone = ProgressState()
    alone.apply(progress.Watch(unpriced))
    assert alone.status().usd is None and "USD" not in format_status(alone.status())


def test_a_sweep_dry_run_says_what_racing_would_cost() -> None:
    from promptrobust.engine.runs.sweep.estimate import ModelEstimate, format_estimates

    rows = [ModelEstimate("gpt-4", "openai", 2, 100, 900, 10_000, 1_000, cost_usd=20.0, priced=True,
                          raced_attack_requests=400),
            ModelEstimate("hf:x", "hf", 2, 100, 900, 10_000, 1_000, raced_attack_requests=900)]
    last = format_estimates(rows)[-1]
    # gpt-4: 100 + 400 of 1000 requests, so half its dollars; hf:x unchanged (nothing priced)
    assert last.startswith("with --early-stopping racing, about: 1,500 requests, USD 10 ")
    assert format_estimates(rows[1:2])[-1].startswith("with --early-stopping racing, about: 1,000 requests (")
