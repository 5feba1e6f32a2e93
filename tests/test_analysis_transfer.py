"""Transfer and defense as library calls (engine.analysis.transfer / defense /
sources): a Session with the fake model injected through backend_factory."""

from __future__ import annotations

import asyncio

import pytest

from promptrobust.engine.analysis.scoring import AnalysisInputError
from promptrobust.engine.analysis.sources import SourceSettings, load_source_records
from promptrobust.engine.analysis.transfer import transfer
from promptrobust.engine.runs.session import Session
from promptrobust.engine.errors import SettingsError
from tests.fixtures.analysis.fake_model import REVIEWS, SOURCE_RUN, factory, rt_samples


def run(call, samples=8):
    built, build = factory(rt_samples(samples))

    async def go():
        async with Session(use_cache=False, backend_factory=build) as session:
            return await call(session)

    return asyncio.run(go()), built


def test_transfer_keeps_the_source_settings_and_carries_statistics():
    result, built = run(lambda s: transfer(s, [SOURCE_RUN], model="hf:fake-target", settings=SourceSettings(data_file=str(REVIEWS))))
    assert len(built) == 1
    tb = next(r for r in result.records if r.attack == "textbugger")
    assert (tb.mode, tb.shots, tb.samples, tb.seed) == ("choices", 0, 8, 0)  # as the source records
    assert tb.pdr == pytest.approx(5 / 8) and tb.mcnemar_p == pytest.approx(0.0625)
    assert tb.settings["analysis"] == "transfer" and tb.settings["source_model"] == "fake-source"
    row = next(a for a in result.apdr if a["attack"] == "textbugger")
    assert (row["source_model"], row["target_model"], row["n"]) == ("fake-source", "hf:fake-target", 1)
    assert row["pdr_std"] is None  # one record: no spread


def test_transfer_overrides_and_filters():
    settings = SourceSettings(data_file=str(REVIEWS), limit=4, mode="generate", attacks=("textfooler",))
    result, _ = run(lambda s: transfer(s, load_source_records([SOURCE_RUN]), model="hf:fake", settings=settings))
    (r,) = result.records
    assert (r.attack, r.samples, r.mode, r.max_new_tokens) == ("textfooler", 4, "generate", 20)


def test_bad_sources_and_settings_are_one_line_errors(tmp_path):
    with pytest.raises(AnalysisInputError, match="does not exist"):
        load_source_records([tmp_path / "nope"])
    with pytest.raises(AnalysisInputError, match="no results.jsonl"):
        load_source_records([tmp_path])
    with pytest.raises(AnalysisInputError, match="no source record is from attack"):
        SourceSettings(attacks=("bertattack",)).select(load_source_records([SOURCE_RUN]))
    with pytest.raises(SettingsError, match="limit"):
        SourceSettings(limit=0)
    with pytest.raises(SettingsError, match="prompt_type"):
        SourceSettings(prompt_type="roles")


def test_base_model_target_gets_three_shots():
    from promptrobust.engine.analysis.sources import SourceRecord

    (src, *_) = load_source_records([SOURCE_RUN])
    assert SourceSettings().evaluation_for(src, base_model=True).shots == 3
    assert SourceSettings().evaluation_for(src, base_model=False).shots == 0
    assert SourceSettings(shots=1).evaluation_for(src, base_model=True).shots == 1
    assert isinstance(src, SourceRecord) and src.data_file is None  # the fixture run's config has none


def test_defense_library_recovers_character_attacks():
    pytest.importorskip("spellchecker", reason="pip install pyspellchecker")
    from promptrobust.engine.analysis.defense import defend

    result, _ = run(lambda s: defend(s, [SOURCE_RUN], model="hf:fake", settings=SourceSettings(data_file=str(REVIEWS))))
    by_attack = {s["attack"]: s for s in result.summary}
    assert by_attack["textbugger"]["recovered"] == 1.0
    assert by_attack["textfooler"]["recovered"] == 0.0
    tb = next(r for r in result.records if r.attack == "textbugger")
    assert tb.settings["undefended_pdr"] == pytest.approx(5 / 8) and tb.settings["undefended_mcnemar_p"] == pytest.approx(0.0625)
    assert tb.pdr == 0.0 and tb.mcnemar_p == 1.0


def _source_copy(tmp_path, data_file):
    """The fixture run folder, with a config.json that names ``data_file`` (None: inside the folder)."""
    import shutil

    import orjson

    run_dir = tmp_path / "source-run"
    shutil.copytree(SOURCE_RUN, run_dir)
    if data_file is None:
        data_file = run_dir / "reviews.tsv"
        shutil.copy(REVIEWS, data_file)
    (run_dir / "config.json").write_bytes(orjson.dumps({"model": "fake-source", "data_file": str(data_file)}))
    return run_dir, data_file


def test_a_source_folders_data_file_outside_it_is_refused_unless_named_again(tmp_path):
    """Issue 32: --source followed config.json's data_file anywhere and sent its rows to the model."""
    secret = tmp_path / "elsewhere" / "private.csv"
    secret.parent.mkdir()
    secret.write_bytes(REVIEWS.read_bytes())
    run_dir, _ = _source_copy(tmp_path, secret)
    sources = load_source_records([run_dir])
    with pytest.raises(AnalysisInputError, match="outside that run folder") as err:
        SourceSettings().select(sources)
    assert err.value.setting == "data_file"
    built, build = factory(rt_samples(8))
    with pytest.raises(AnalysisInputError, match="outside that run folder"):
        asyncio.run(_transfer_with(build, run_dir, SourceSettings()))
    assert not built  # refused before any model was built, so no row was sent
    chosen, notes = SourceSettings(data_file=str(secret)).select(sources)  # named again: the user's choice
    assert chosen and not [n for n in notes if "config.json" in n]


def test_a_source_folders_own_data_file_is_used_and_announced(tmp_path):
    run_dir, inside = _source_copy(tmp_path, None)
    chosen, notes = SourceSettings().select(load_source_records([run_dir]))
    assert chosen and any(f"re-scored on data_file {inside}" in n and "config.json" in n for n in notes)
    result, _ = run(lambda s: transfer(s, [run_dir], model="hf:fake-target"))
    assert result.records and any("config.json" in n for n in result.notes)


async def _transfer_with(build, run_dir, settings):
    async with Session(use_cache=False, backend_factory=build) as session:
        return await transfer(session, [run_dir], model="hf:fake-target", settings=settings)
