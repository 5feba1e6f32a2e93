"""The architecture's promises: one namespace, one protocol, one shots rule, stable cache keys."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_CACHE = ROOT / "tests" / "fixtures" / "cache" / "scores-v0.1.sqlite"
FIXTURE_PROMPT = "Classify the sentiment of this sentence as positive or negative."


def _posts(srv: FakeOpenAIServer) -> int:
    return srv.count("/v1/chat/completions") + srv.count("/v1/completions")


def test_local_tasks_py_and_cli_folder_do_not_shadow_the_package(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text("raise ImportError('the user tasks.py was imported')\n")
    (tmp_path / "engine.py").write_text("raise ImportError('the user engine.py was imported')\n")
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "__init__.py").write_text("raise ImportError('the user cli/ was imported')\n")
    code = textwrap.dedent(
        """
        import promptrobust
        from promptrobust.tasks import get_task
        from promptrobust.cli.main import build_parser
        from promptrobust.engine.runs.session import Session
        build_parser()
        print(get_task("rotten_tomatoes").name)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "rotten_tomatoes"


def test_every_package_folder_is_listed_in_pyproject() -> None:
    """Code folders (with __init__.py) and data folders alike are listed, so setuptools ships
    each on purpose (and `python -m build` has nothing to warn about)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    mapping = {"engine": "promptrobust.engine", "tasks": "promptrobust.tasks", "attacks": "promptrobust.attacks",
               "cli": "promptrobust.cli", "promptrobust": "promptrobust"}
    found = set()
    for top, name in mapping.items():
        for folder in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir() and not p.is_symlink())]:
            files = [f for f in folder.iterdir() if f.is_file() and not f.is_symlink()]
            if "__pycache__" in folder.parts or not files:
                continue
            found.add(".".join((name, *folder.relative_to(ROOT / top).parts)))
    assert found == listed


def test_cache_written_before_the_refactor_still_answers_every_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache written by release 0.1 (tests/fixtures/cache: `pre run --mode choices` and
    `--mode generate` of this prompt on 12 Rotten Tomatoes samples, model answered by
    promptrobust.testing.CountingBackend) answers the label-scoring run of this release with
    zero backend calls. (Generate-mode keys changed on purpose: the paper's 20 new tokens.)"""
    cache = tmp_path / "scores.sqlite"
    shutil.copy(FIXTURE_CACHE, cache)
    backends: list = []
    monkeypatch.setattr("promptrobust.engine.runs.session.build_backend", _fake_factory(backends))
    code = main([
        "run", "--model", "smollm2-135m-instruct", "--dataset", "rotten_tomatoes", "--limit", "12",
        "--prompt-text", FIXTURE_PROMPT, "--mode", "choices", "--cache", str(cache),
        "--output-dir", str(tmp_path / "runs"), "--no-progress",
    ])
    assert code == 0
    assert sum(b.calls for b in backends) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    results = orjson.loads((folder / "results.json").read_bytes())
    (counters,) = results["counters"]["scheduler"].values()
    assert counters["cache_hits"] == 12


def _comparable(record: dict) -> dict:
    """A record without what legitimately differs between two runs of the same measurement."""
    return {k: v for k, v in record.items() if k not in ("cost", "job_id", "extra")}


def test_pre_run_attack_and_a_one_job_sweep_write_identical_records(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        common = ["--model", "openai:fake-model", "--model-args", f"base_url={srv.url}"]
        code = main([
            "run", *common, "--dataset", "rotten_tomatoes", "--limit", "12", "--mode", "choices",
            "--attack", "checklist", "--top-k", "2", "--budget", "5", "--cache", str(tmp_path / "run.sqlite"),
            "--output-dir", str(tmp_path / "runs"), "--no-progress",
        ])
        assert code == 0
        config = tmp_path / "sweep.toml"
        config.write_text(textwrap.dedent(f"""
            [sweep]
            name = "one"
            output_dir = "{tmp_path / 'sweeps'}"
            limit = 12
            mode = "choices"
            top_k = 2
            budget = 5
            cache = "{tmp_path / 'sweep.sqlite'}"

            [grid]
            models = ["openai:fake-model"]
            datasets = ["rotten_tomatoes"]
            attacks = ["checklist"]

            [models."openai:fake-model"]
            model_args = "base_url={srv.url}"
        """))
        assert main(["sweep", str(config), "--quiet"]) == 0
    (run_folder,) = (tmp_path / "runs").iterdir()
    from_run = [orjson.loads(x) for x in (run_folder / "results.jsonl").read_bytes().splitlines()]
    from_sweep = [orjson.loads(x) for x in (tmp_path / "sweeps" / "one" / "results.jsonl").read_bytes().splitlines()]
    assert len(from_run) == 2
    assert [_comparable(r) for r in from_run] == [_comparable(r) for r in from_sweep]
    assert all(r["job_id"] for r in from_sweep)


def _fake_factory(backends: list):  # noqa: ANN202
    from promptrobust.testing import CountingBackend

    def build(spec):  # noqa: ANN001, ANN202
        backend = CountingBackend(name=spec.name)
        backends.append(backend)
        return backend

    return build


def test_api_and_cli_apply_the_same_shots_rule_to_a_base_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import promptrobust

    api_backends: list = []
    result = promptrobust.evaluate(
        model="gemma3-270m", limit=4, mode="choices", prompts=None, use_cache=False,
        backend_factory=_fake_factory(api_backends),
    )
    cli_backends: list = []
    # The model is the true boundary here: the CLI builds its backend through the registry.
    monkeypatch.setattr("promptrobust.engine.runs.session.build_backend", _fake_factory(cli_backends))
    code = main([
        "run", "--model", "gemma3-270m", "--limit", "4", "--mode", "choices", "--no-cache",
        "--output-dir", str(tmp_path / "runs"), "--no-progress",
    ])
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    cli_results = orjson.loads((folder / "results.json").read_bytes())
    assert result.shots == cli_results["configs"]["measurement"]["shots"] == 3
    # And the requests really carried the same three worked examples.
    api_inputs = sorted(r.input_text() for b in api_backends[0].batches for r in b)
    cli_inputs = sorted(r.input_text() for b in cli_backends[0].batches for r in b)
    assert api_inputs == cli_inputs


def _readme_python() -> str:
    import re

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "the README has no Python example"
    return blocks[0]


async def test_readme_example_runs_inside_a_running_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python example, as a notebook cell would run it (a loop is running here),
    on a scripted OpenAI-compatible server instead of the embedded model so it is fast."""
    import asyncio

    asyncio.get_running_loop()  # the point of the test: sync API inside a running loop
    code = _readme_python()
    with FakeOpenAIServer() as srv:
        code = code.replace('model="gemma3-270m"', f'model="openai:fake-model", model_args={{"base_url": "{srv.url}"}}')
        code = code.replace("limit=100", "limit=12")
        monkeypatch.setenv("PRE_CACHE_DIR", str(tmp_path))
        namespace: dict = {}
        exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    record = namespace["record"]
    assert record.status == "attacked"
    assert record.pdr is not None and record.pdr_ci95 is not None
    assert record.pdr_ci95[0] <= record.pdr <= record.pdr_ci95[1]
    assert namespace["clean"].clean and all(c.ci95[0] <= c.score <= c.ci95[1] for c in namespace["clean"].clean)


def test_imports_follow_the_layers() -> None:
    """The directions the README draws (tests/import_rules.py), function-level imports included."""
    from tests.import_rules import violations

    assert violations(ROOT) == []


def test_the_import_check_fails_on_violations_planted_in_a_copy(tmp_path: Path) -> None:
    from tests.import_rules import PACKAGES, cli_surface_violations, violations

    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(tmp_path) == []
    plants = {
        "engine/measuring/protocol.py": "from promptrobust.engine.runs.run_folder import RunFolder\n",
        "engine/serving/cache.py": "def _late():\n    from promptrobust.engine.runs.session import Session\n",
        "attacks/registry.py": "from ..engine.measuring import workbench\n",
        "tasks/base.py": "import promptrobust.testing.backends\n",
        "engine/runs/session.py": "from promptrobust.engine.analysis import transfer\n",
    }
    for rel, code in plants.items():
        with open(tmp_path / rel, "a", encoding="utf-8") as fh:
            fh.write("\n" + code)
    found = "\n".join(violations(tmp_path))
    assert cli_surface_violations(tmp_path) == []
    with open(tmp_path / "cli" / "run.py", "a", encoding="utf-8") as fh:  # the CLI reaching past its surface
        fh.write("\ndef _late():\n    from promptrobust.engine.measuring.workbench import open_workbench\n")
    with open(tmp_path / "cli" / "output.py", "a", encoding="utf-8") as fh:  # an error type the error base already covers
        fh.write("\nfrom promptrobust.engine.serving import cache\n")
    cli_found = cli_surface_violations(tmp_path)
    assert [line.split(": ", 1)[1] for line in cli_found] == [
        "promptrobust.cli.output imports promptrobust.engine.serving.cache, which is not the CLI's library surface",
        "promptrobust.cli.run imports promptrobust.engine.measuring.workbench, which is not the CLI's library surface",
    ]
    assert "engine/measuring/protocol.py" in found and "measuring may not import runs" in found
    assert "engine/serving/cache.py" in found and "serving may not import runs" in found  # a function-level import counts
    assert "attacks/registry.py" in found and "attacks may not import measuring" in found  # a relative import counts
    assert "tasks/base.py" in found and "tasks may not import testing" in found
    assert "engine/runs/session.py" in found and "runs may not import analysis" in found
    assert len({line.split(": ")[0] for line in violations(tmp_path)}) == 5  # the five planted lines, nothing else
    from tests.import_rules import cycles

    with open(tmp_path / "engine" / "runs" / "session.py", "a", encoding="utf-8") as fh:
        fh.write("\ndef _late():\n    from promptrobust.engine.runs.sweep import runner as sweep\n")  # sweep already imports session
    assert any({"promptrobust.engine.runs.session", "promptrobust.engine.runs.sweep.runner"} <= set(c) for c in cycles(tmp_path))


def test_the_cli_imports_only_its_library_surface() -> None:
    """Issue 29: a command is arguments -> settings -> plan -> run -> write -> print, so the CLI
    needs the library's surface (tests/import_rules.py CLI_SURFACE), not its insides."""
    from tests.import_rules import CLI_SURFACE, cli_library_imports, cli_surface_violations

    assert cli_surface_violations(ROOT) == []
    assert set(cli_library_imports(ROOT)) == set(CLI_SURFACE)  # every listed module is used: no stale entry
    assert len(CLI_SURFACE) <= 12


def test_no_import_circles() -> None:
    """No circles anywhere: engine's (session and sweep, report's package and its build/html)
    and tasks/'s (the package and its registry, common and fewshot) are gone."""
    from tests.import_rules import cycles

    assert cycles(ROOT) == []


def test_a_circle_hidden_under_type_checking_is_found(tmp_path: Path) -> None:
    """Issue 39: two modules that need each other for their annotations are a circle too (the session
    and the executor were one): the check reads ``if TYPE_CHECKING:`` imports."""
    from tests.import_rules import PACKAGES, cycles

    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = cycles(tmp_path)
    with open(tmp_path / "engine" / "runs" / "session.py", "a", encoding="utf-8") as fh:  # the executor imports the session
        fh.write("\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from promptrobust.engine.runs.executor import Context\n")
    found = [c for c in cycles(tmp_path) if c not in before]
    assert any({"promptrobust.engine.runs.session", "promptrobust.engine.runs.executor"} <= set(c) for c in found)


def test_tasks_import_their_own_modules_at_the_top() -> None:
    """In tasks/, function-level imports are for optional heavy dependencies (datasets,
    polars, sacrebleu, ...) only; a late import of our own module would hide a circle."""
    from tests.import_rules import late_imports

    assert late_imports(ROOT, "tasks") == []


def test_a_circle_planted_in_tasks_is_found(tmp_path: Path) -> None:
    from tests.import_rules import PACKAGES, cycles, late_imports

    for folder in PACKAGES:
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    assert cycles(tmp_path) == []
    with open(tmp_path / "tasks" / "common.py", "a", encoding="utf-8") as fh:
        fh.write("\ndef _late():\n    from promptrobust.tasks.fewshot import fixed_examples\n")  # fewshot imports common
    assert ["promptrobust.tasks.common", "promptrobust.tasks.fewshot"] in cycles(tmp_path)
    assert late_imports(tmp_path, "tasks") == ["tasks/common.py:" + str(_last_line(tmp_path / "tasks" / "common.py")) + ": promptrobust.tasks.fewshot"]
    with open(tmp_path / "tasks" / "registry.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom promptrobust.tasks import prompt_sets\n")  # the package imports registry through prompt_sets
    assert any({"promptrobust.tasks", "promptrobust.tasks.registry"} <= set(c) for c in cycles(tmp_path))


def _last_line(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_public_api_is_written_out_for_static_tools() -> None:
    """``import promptrobust as pr; pr.evaluate`` resolves for mypy, pyright and IDEs: every lazily
    loaded name is also imported under ``TYPE_CHECKING`` from the module that defines it, and
    ``__all__`` is a literal list of the same names (static tools do not run ``__getattr__``)."""
    import ast

    import promptrobust

    tree = ast.parse((ROOT / "promptrobust" / "__init__.py").read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                for a in imp.names:
                    typed[a.asname or a.name] = imp.module if (a.asname or a.name) == a.name else f"{imp.module}:{a.name}"
    assert typed == promptrobust._EXPORTS
    literal = next(n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    assert isinstance(literal, ast.List)
    assert sorted(ast.literal_eval(literal)) == sorted(["__version__", *promptrobust._EXPORTS])
    for name in promptrobust._EXPORTS:  # and each one really loads
        assert getattr(promptrobust, name) is not None
