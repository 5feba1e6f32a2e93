"""The Python API's side of issue 35 item 3: model arguments as lm-eval's string form, and
results as polars and pandas DataFrames with the rows of results.parquet."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.sweep_helpers import hashed_answer


def _fake(spec):  # noqa: ANN001, ANN202
    from promptrobust.testing.backends import CountingBackend

    _fake.specs.append(spec)
    return CountingBackend(answer=hashed_answer)


_fake.specs = []


def test_model_args_as_lm_evals_string_in_python() -> None:
    """Issue 35: `model_args="k=v,..."` ended in a bare `ValueError: dictionary update sequence ...`."""
    import promptrobust as pr

    _fake.specs.clear()
    result = pr.evaluate(model="openai:m", model_args="base_url=http://127.0.0.1:9/v1,api=completions", limit=4, mode="choices",
                         backend_factory=_fake, use_cache=False, progress=False)
    assert _fake.specs[0].args == {"base_url": "http://127.0.0.1:9/v1", "api": "completions"}
    assert result.model == "openai:m"
    from promptrobust.engine.errors import PromptRobustError

    with pytest.raises(PromptRobustError, match="is not key=value"):
        pr.evaluate(model="openai:m", model_args="base_url", limit=4, backend_factory=_fake, use_cache=False, progress=False)


def test_results_convert_to_polars_and_pandas_with_the_rows_of_results_parquet(tmp_path: Path) -> None:
    import promptrobust as pr
    from promptrobust.engine.runs.executor import OutputOptions, run_plan
    from promptrobust.engine.runs.plan import attack_settings, build_plan

    plan = build_plan("openai:m", ["rotten_tomatoes"], model_args="base_url=http://127.0.0.1:9/v1",
                      evaluation=pr.EvaluationSettings(limit=6, mode="choices"), attacks=attack_settings("checklist", top_k=2),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), use_cache=False))
    (target,) = run_plan(plan, backend_factory=_fake, progress=False).targets
    protocol = target.protocol
    frame = protocol.to_polars()
    assert frame.height == 2 and frame.equals(pl.read_parquet(target.folder / "results.parquet"))
    pd = pytest.importorskip("pandas")
    pandas_frame = protocol.to_pandas()
    assert isinstance(pandas_frame, pd.DataFrame) and list(pandas_frame.columns) == frame.columns and len(pandas_frame) == 2

    clean = pr.evaluate(model="openai:m", model_args={"base_url": "http://127.0.0.1:9/v1"}, limit=6, mode="choices",
                        backend_factory=_fake, use_cache=False, progress=False)
    rows = clean.to_polars()
    assert rows["prompt_id"].to_list() == [c.prompt.id for c in clean.clean]
    assert rows["score"].to_list() == [c.score for c in clean.clean] and set(rows["model"]) == {"openai:m"}


def test_to_pandas_without_pandas_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import promptrobust.extras as extras
    from promptrobust.engine.measuring.protocol import ProtocolResult

    real = extras.missing_modules
    monkeypatch.setattr(extras, "missing_modules", lambda modules: [m for m in modules if m == "pandas"] or real(modules))
    with pytest.raises(extras.MissingExtraError, match=r"ProtocolResult.to_pandas\(\) needs the \[pandas\] extra: "
                                                        r"pip install 'promptrobust\[pandas\]'"):
        ProtocolResult(settings={}, clean=[]).to_pandas()


def test_an_attack_record_converts_to_the_row_results_parquet_holds(tmp_path: Path) -> None:
    """Issue 42 item 11: AttackRecord had no to_polars/to_pandas (EvaluationResult had)."""
    import promptrobust as pr
    from promptrobust.engine.runs.api import run_plan
    from promptrobust.engine.runs.plan import OutputOptions, attack_settings, build_plan

    plan = build_plan("openai:m", ["rotten_tomatoes"], model_args="base_url=http://127.0.0.1:9/v1",
                      evaluation=pr.EvaluationSettings(limit=6, mode="choices"), attacks=attack_settings("stresstest", top_k=1),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), use_cache=False))
    (target,) = run_plan(plan, backend_factory=_fake, progress=False).targets
    (record,) = target.protocol.records
    frame = record.to_polars()
    assert frame.height == 1 and frame.equals(pl.read_parquet(target.folder / "results.parquet"))
    pd = pytest.importorskip("pandas")
    row = record.to_pandas()
    assert isinstance(row, pd.DataFrame) and list(row.columns) == frame.columns and row["pdr"][0] == record.pdr


def test_the_clean_table_is_best_first_as_pre_run_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 11: `clean.table()` listed prompts by id where the CLI lists them by score."""
    import promptrobust as pr
    from promptrobust.cli.output import print_clean

    clean = pr.evaluate(model="openai:m", model_args={"base_url": "http://127.0.0.1:9/v1"}, limit=8, mode="choices",
                        backend_factory=_fake, use_cache=False, progress=False)
    shown = [line.split()[0] for line in clean.table().splitlines()[1:]]
    best_first = [c.prompt.id for c in sorted(clean.clean, key=lambda c: -c.score)]
    assert shown == best_first and len({c.score for c in clean.clean}) > 1
    print_clean(clean.settings, clean.clean)
    printed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:] if line.startswith("sst2-")]
    assert printed == best_first


def test_the_python_apis_progress_lines_name_the_attack(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 11: `pr.attack`'s progress lines never named the attack."""
    import promptrobust as pr

    pr.attack("Is this review positive or negative?", "stresstest", model="openai:m", limit=4, mode="choices",
              model_args={"base_url": "http://127.0.0.1:9/v1"}, backend_factory=_fake, use_cache=False)
    assert "pre: attack stresstest on prompt custom" in capsys.readouterr().err
