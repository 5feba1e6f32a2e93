"""One writer of run folders and one results.json layout (issue 19): every
command's results.json validates against the shipped JSON Schema (checked with
the ``jsonschema`` package) and carries the versions, the commit, the command
and the settings; --log-samples works with --attack."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.runs import run_folder
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.runs.run_folder import SCHEMA_PATH, RunFolder, redact_argv
from tests.fixtures.analysis.fake_model import REVIEWS, patch_backend, rt_samples
from tests.fixtures.run_folders.make_v010 import make

jsonschema = pytest.importorskip("jsonschema")


def validator() -> object:
    schema = orjson.loads(SCHEMA_PATH.read_bytes())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_schema_ships_with_the_package() -> None:
    from importlib import resources

    shipped = resources.files("promptrobust.engine.runs").joinpath("results.schema.json")
    assert shipped.is_file() and orjson.loads(shipped.read_bytes())["properties"]["format"]["const"] == run_folder.FORMAT


def test_every_command_writes_one_validating_layout(tmp_path: Path) -> None:
    make(tmp_path)  # pre run, pre run --attack, pre eval (pairs), pre transfer, pre defend
    check = validator()
    docs = {}
    for folder in sorted((tmp_path / "runs").iterdir()):
        doc = orjson.loads((folder / "results.json").read_bytes())
        errors = sorted(check.iter_errors(doc), key=str)
        assert not errors, f"{folder.name}: {errors[0].message} at {list(errors[0].path)}"
        docs[doc["command"][1] + ("-attack" if "--attack" in doc["command"] else "")] = doc
    assert set(docs) == {"run", "run-attack", "eval", "transfer", "defend"}
    for name, doc in docs.items():
        v = doc["versions"]
        assert v["promptrobust"] and v["python"] and v["torch"]
        # This test runs from a checkout: the commit is recorded.
        assert v["git_commit"] is not None and re.fullmatch(r"[0-9a-f]{40}", v["git_commit"])
        assert isinstance(v["git_dirty"], bool)  # and whether its tracked files differed from that commit
        assert doc["command"][:2] == ["pre", name.split("-")[0]]
        m = doc["configs"]["measurement"]
        assert (m["mode"], m["samples"], m["seed"], m["shots"]) == ("choices", 8, 0, 0), name
        assert doc["models"] and doc["models"][0]["name"].startswith("hf:fake")
        assert doc["date"]["started"] <= doc["date"]["finished"]
    assert docs["run-attack"]["configs"]["measurement"]["budget"] is None  # an attack: "unlimited" applies
    assert "budget" not in docs["eval"]["configs"]["measurement"]  # given pairs: no search, no budget
    assert docs["run-attack"]["results"]["records"]["by_kind"] == {"attack": 4}
    assert docs["transfer"]["results"]["records"]["by_kind"] == {"transfer": 4}
    assert docs["defend"]["results"]["records"]["by_kind"] == {"defense": 4}
    assert len(docs["run"]["results"]["clean"]) == 10 and docs["run"]["samples"]["evaluated"] == 8


def test_git_commit_is_null_outside_a_checkout(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    assert run_folder._git_commit(tmp_path / "pkg" / "run_folder.py") is None


def test_secrets_never_reach_the_recorded_command() -> None:
    argv = ["pre", "run", "--model-args", "api_key=sk-live-1,base_url=http://user:pw@host/v1", "--api-key", "sk-2",
            "--token=abc", "--limit", "8"]
    shown = " ".join(redact_argv(argv))
    for secret in ("sk-live-1", "pw@", "sk-2", "abc"):
        assert secret not in shown
    assert "base_url=http://<redacted>@host/v1" in shown and "--limit 8" in shown


def test_files_are_written_whole_and_a_failed_block_leaves_no_folder(tmp_path: Path) -> None:
    with RunFolder(tmp_path, ["m", "d"]) as folder:
        folder.write_json("config.json", {"a": 1})
        assert not list(folder.partial.glob("*.tmp"))  # temp files renamed into place
    assert orjson.loads((folder.final / "config.json").read_bytes()) == {"a": 1}
    with pytest.raises(RuntimeError):
        with RunFolder(tmp_path, ["m", "d"]) as broken:
            broken.write_json("config.json", {})
            raise RuntimeError("boom")
    assert not broken.final.exists() and not broken.partial.exists()
    with pytest.raises(TypeError, match="ResultsDocument"):
        RunFolder(tmp_path, ["x"]).write_results({"not": "the layout"})  # type: ignore[arg-type]


def test_log_samples_with_an_attack_logs_the_clean_and_the_adversarial_prompt(tmp_path: Path, monkeypatch) -> None:
    patch_backend(monkeypatch, rt_samples(8, seed=0))
    out = tmp_path / "runs"
    assert main(["run", "--model", "hf:fake", "--data-file", str(REVIEWS), "--limit", "8", "--mode", "choices",
                 "--attack", "stresstest", "--top-k", "1", "--log-samples", "--cache", str(tmp_path / "c.sqlite"),
                 "--output-dir", str(out), "--no-progress"]) == 0
    (run,) = list(out.iterdir())
    records = read_jsonl(run / "results.jsonl")
    assert len(records) == 1 and records[0]["kind"] == "attack"
    rows = read_jsonl(run / "samples.jsonl")
    by_role = {role: [r for r in rows if r["role"] == role] for role in ("clean", "adversarial")}
    assert len(by_role["clean"]) == len(by_role["adversarial"]) == 8
    assert {r["prompt"] for r in by_role["clean"]} == {records[0]["clean_prompt"]}
    assert {r["prompt"] for r in by_role["adversarial"]} == {records[0]["adversarial_prompt"]}
    assert all(r["run_key"] == records[0]["run_key"] and "input" in r and "score" in r for r in rows)
    # Each sample's logged score is the one the record's statistics were computed from.
    assert [r["score"] for r in by_role["adversarial"]] == records[0]["adversarial_sample_scores"]
    doc = orjson.loads((run / "results.json").read_bytes())
    assert doc["samples"]["logged"] == 16


def test_a_sweep_writes_the_same_validating_layout(tmp_path: Path) -> None:
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.runs.sweep.runner import run_sweep
    from promptrobust.engine.runs.sync import run_sync
    from promptrobust.testing import CountingBackend
    from tests.sweep_helpers import hashed_answer, small_config

    cfg = small_config(tmp_path, models=("openai:fake-a",), prompt_types=("task",), attacks=("stresstest",))

    async def go() -> None:
        session = Session(cache=tmp_path / "c.sqlite", backend_factory=lambda spec: CountingBackend(answer=hashed_answer, name=spec.name))
        try:
            await run_sweep(cfg, session=session)
        finally:
            await session.close()

    run_sync(go)
    doc = orjson.loads((cfg.folder / "results.json").read_bytes())
    errors = list(validator().iter_errors(doc))
    assert not errors, errors[0].message
    records = read_jsonl(cfg.folder / "results.jsonl")
    assert doc["results"]["records"]["total"] == len(records) == 2 and doc["results"]["records"]["by_kind"] == {"attack": 2}
    assert doc["models"][0]["name"] == "openai:fake-a" and doc["configs"]["sweep"]["name"] == "grid"
    assert {(a["kind"], a["attack"]) for a in doc["results"]["apdr"]} == {("attack", "stresstest")}


def test_the_python_api_result_has_the_cli_layout(tmp_path: Path, monkeypatch) -> None:
    """`Session.evaluate(...).to_dict()` and `pre run` write one layout (they were two)."""
    import promptrobust
    from tests.fixtures.analysis.fake_model import factory

    _, build = factory(rt_samples(8, seed=0))
    result = promptrobust.evaluate(model="hf:fake", dataset="rotten_tomatoes", limit=8, mode="choices",
                                   data_file=str(REVIEWS), use_cache=False, backend_factory=build)
    doc = orjson.loads(orjson.dumps(result.to_dict(), default=str))
    errors = list(validator().iter_errors(doc))
    assert not errors, errors[0].message
    patch_backend(monkeypatch, rt_samples(8, seed=0))
    assert main(["run", "--model", "hf:fake", "--data-file", str(REVIEWS), "--limit", "8", "--mode", "choices",
                 "--no-cache", "--output-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    cli = orjson.loads((run / "results.json").read_bytes())
    assert set(doc) == set(cli)
    assert doc["configs"]["measurement"] == cli["configs"]["measurement"]
    assert doc["results"]["clean"] == cli["results"]["clean"]
    assert doc["models"] == cli["models"]


def test_a_sweep_folder_is_resumed_only_under_the_same_settings(tmp_path: Path) -> None:
    """The settings are the resume key: records of limit 6 must not count as done for limit 8
    (the rerun would skip their prompts and mix two settings); growing the grid is fine."""
    from promptrobust.engine.runs.run_folder import RunFolderError
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.runs.sweep.runner import run_sweep
    from promptrobust.engine.runs.sync import run_sync
    from promptrobust.testing import CountingBackend
    from tests.sweep_helpers import hashed_answer, small_config

    def sweep(cfg) -> None:  # noqa: ANN001
        async def go() -> None:
            session = Session(cache=tmp_path / "c.sqlite", backend_factory=lambda spec: CountingBackend(answer=hashed_answer, name=spec.name))
            try:
                await run_sweep(cfg, session=session)
            finally:
                await session.close()

        run_sync(go)

    cfg = small_config(tmp_path, models=("openai:fake-a",), prompt_types=("task",), attacks=("stresstest",))
    sweep(cfg)
    before = (cfg.folder / "results.jsonl").read_bytes()
    with pytest.raises(RunFolderError, match="evaluation.limit"):
        sweep(cfg.with_(evaluation=cfg.evaluation.with_(limit=8)))
    assert (cfg.folder / "results.jsonl").read_bytes() == before  # nothing appended
    sweep(cfg.with_(models=("openai:fake-a", "openai:fake-b")))  # a bigger grid resumes
    assert len(read_jsonl(cfg.folder / "results.jsonl")) == 4


def test_the_resume_key_holds_every_attack_setting_a_record_depends_on() -> None:
    """Records judged by another NLI model, made with a held-out share or raced (at another error rate)
    are other records; exact early stopping and none choose the same prompts; a config.json of an older
    version, without the newer keys, reads as their defaults."""
    from dataclasses import asdict

    from promptrobust.engine.measuring.settings import AttackSettings
    from promptrobust.engine.runs.sweep.config import resume_key

    def key(**attack: object) -> dict[str, object]:
        return resume_key({"evaluation": {"limit": 6}, "attack": asdict(AttackSettings(**attack))})  # type: ignore[arg-type]

    base = key()
    assert key(early_stopping="off") == base
    for other in ({"meaning_nli": "cross-encoder/nli-deberta-v3-base"}, {"holdout": 0.5}, {"early_stopping": "racing"},
                  {"top_k": 1}, {"budget": 40}):
        assert key(**other) != base, other
    assert key(early_stopping="racing", error_rate=0.01) != key(early_stopping="racing")
    assert key(error_rate=0.01) == base  # an error rate means nothing without racing
    older = {"evaluation": {"limit": 6}, "attack": {"top_k": 3, "budget": None, "options": {}}}
    assert resume_key(older) == base


def test_files_get_the_users_umask_not_private_modes(tmp_path: Path) -> None:
    import os

    old = os.umask(0o022)
    try:
        with RunFolder(tmp_path, ["m"]) as folder:
            folder.write_json("results-like.json", {"a": 1})
    finally:
        os.umask(old)
    assert (folder.final / "results-like.json").stat().st_mode & 0o777 == 0o644


def test_the_commit_recorded_is_the_one_a_session_opened_on(monkeypatch) -> None:  # noqa: ANN001
    """A run's checkout may move to another commit before the run writes its results: the commit
    written is read when the session opens, while the code that runs is the checkout's."""
    from promptrobust.engine.runs import run_folder
    from promptrobust.engine.runs.session import Session

    monkeypatch.setattr(run_folder, "_VERSIONS", None)
    monkeypatch.setattr(run_folder, "_git_commit", lambda start=None: "a" * 40)
    Session(use_cache=False)
    monkeypatch.setattr(run_folder, "_git_commit", lambda start=None: "b" * 40)  # the checkout moves on
    assert run_folder.versions()["git_commit"] == "a" * 40


def test_a_checkout_with_changes_is_said_to_be_dirty(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "checkout"
    (repo / "pkg").mkdir(parents=True)
    tracked = repo / "pkg" / "module.py"
    tracked.write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    assert run_folder._git_dirty(tracked) is False
    (repo / "pkg" / "untracked.py").write_text("")  # untracked files do not change the code that ran
    assert run_folder._git_dirty(tracked) is False
    tracked.write_text("x = 2\n")
    assert run_folder._git_dirty(tracked) is True
    assert re.fullmatch(r"[0-9a-f]{40}", run_folder._git_commit(tracked) or "")
    assert run_folder._git_dirty(tmp_path / "elsewhere" / "module.py") is None  # not a checkout
