"""`pre bench attack-cost | engine-overhead | ceiling | scaling`: the repository's bench/ scripts, run as they are."""

from __future__ import annotations

import pytest

import promptrobust.cli.bench as cli_bench
from promptrobust.cli.errors import UserError
from promptrobust.cli.main import build_parser, main


def test_bench_without_a_benchmark_prints_usage_and_exits_2(capsys):
    assert main(["bench"]) == 2
    assert "attack-cost" in capsys.readouterr().err


@pytest.mark.parametrize("name,script", [("attack-cost", "attack_cost.py"), ("engine-overhead", "engine_overhead.py"),
                                         ("ceiling", "ceiling.py"), ("scaling", "scaling.py"),
                                         ("protocol", "protocol.py")])
def test_help_is_the_scripts_own(name, script, capfd):
    assert main(["bench", name, "--help"]) == 0
    out = capfd.readouterr().out
    assert f"usage: {script}" in out


def test_arguments_pass_through_and_the_scripts_exit_status_is_ours(capfd):
    # An option the script does not know: argparse in the script exits 2 and names it.
    assert main(["bench", "attack-cost", "--", "--no-such-option"]) == 2
    assert "--no-such-option" in capfd.readouterr().err


def test_remaining_arguments_reach_the_script_unparsed():
    args = build_parser().parse_args(["bench", "engine-overhead", "--samples", "8", "--help"])
    assert args.script == "engine_overhead.py"
    assert args.script_args == ["--samples", "8", "--help"]


def test_missing_bench_folder_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_bench, "REPO_BENCH_DIR", tmp_path / "not-a-checkout")
    args = build_parser().parse_args(["bench", "attack-cost", "--limit", "2"])
    with pytest.raises(UserError, match="source checkout"):
        args.handler(args)
    assert main(["bench", "engine-overhead"]) == 2
    assert "clone of the promptrobust repository" in capsys.readouterr().err
