"""A backend is one module plus its registration (issue 39 item 3).

The test writes a new backend into a temporary folder, as a plugin package would ship it: one
module declaring its options value, the backend and its ``REGISTRATION``, and the package's entry
point in the ``promptrobust.backends`` group. With that folder on ``PYTHONPATH``, ``pre run
--model echo:...``, its ``--model-args`` checks and ``pre sweep --dry-run`` take it, and no file of
the repository changes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from promptrobust.engine.serving.backends.base import Backend, PerRequestBackend
from promptrobust.engine.serving.types import ModelIdentity, Request

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cr3t-t0ken-of-the-echo-server"

PLUGIN = '''
"""A backend written outside promptrobust: every answer is one word."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.serving.model_args import Number, Text, check_fields, model_arg
from promptrobust.engine.serving.registration import BackendRegistration, ModelSpec
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request


@dataclass(frozen=True)
class EchoOptions:
    word: str = model_arg("positive", Text())
    """The word every answer is."""
    confidence: float = model_arg(0.9, Number(0, 1, above=True))
    """The probability that word gets when labels are scored."""
    token: str | None = model_arg(None, Text(optional=True), secret=True)
    """A credential for the (imagined) server: declared secret."""

    def __post_init__(self) -> None:
        check_fields(self)


class EchoBackend(Backend):
    kind = "echo"

    def __init__(self, model: str, options: EchoOptions) -> None:
        self.model, self.options = model, options

    @property
    def identity(self) -> ModelIdentity:
        return ModelIdentity(backend="echo", name=self.model, revision=self.options.word)

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        word, p = self.options.word, self.options.confidence
        out = []
        for r in requests:
            if r.kind == "score_choices":
                rest = math.log((1 - p) / max(1, len(r.choices) - 1)) if p < 1 else -50.0
                out.append(Completion(choice_logprobs=tuple(math.log(p) if c.strip() == word else rest for c in r.choices)))
            else:
                out.append(Completion(text=word, completion_tokens=1))
        return out


def _build(spec: ModelSpec, options: EchoOptions) -> EchoBackend:
    return EchoBackend(spec.model, options)


REGISTRATION = BackendRegistration(name="echo", options=EchoOptions, build=_build,
                                   description="one word for every answer (a plugin's backend)")
'''


@pytest.fixture()
def plugin(tmp_path: Path) -> dict[str, str]:
    """A folder holding the plugin's module and its package metadata (entry point); the environment to run pre with it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "pre_echo_plugin.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    meta = site / "pre_echo_plugin-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: pre-echo-plugin\nVersion: 0.1\n", encoding="utf-8")
    (meta / "entry_points.txt").write_text("[promptrobust.backends]\necho = pre_echo_plugin:REGISTRATION\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "PRE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPENAI_API_KEY", None)
    return env


def _pre(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promptrobust.cli.main", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _repository_state() -> str | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_a_plugin_backend_runs_is_checked_and_plans_a_sweep(plugin: dict[str, str], tmp_path: Path) -> None:
    before = _repository_state()

    listed = _pre(plugin, tmp_path, "list", "backends")
    assert listed.returncode == 0, listed.stderr
    assert "echo: one word for every answer" in listed.stdout and "confidence" in listed.stdout

    done = _pre(plugin, tmp_path, "run", "--model", "echo:one-word", "--model-args", f"word=positive,token={SECRET}",
                "--limit", "4", "--prompt", "sst2-task-01", "--mode", "choices", "--no-cache", "--output-dir", "out",
                "--no-progress")
    assert done.returncode == 0, done.stderr
    (folder,) = (tmp_path / "out").iterdir()
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    assert results["models"][0]["backend"] == "echo" and results["models"][0]["revision"] == "positive"
    assert "word=positive" in " ".join(results["command"]) and "token=<redacted>" in " ".join(results["command"])
    assert all(SECRET not in p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())
    assert SECRET not in done.stdout + done.stderr

    for bad, words in [("confidence=nan", "confidence must be a number > 0 and <= 1"),
                       ("confidence=1e308", "confidence must be a number > 0 and <= 1"),
                       ("colour=red", "colour not understood by the echo backend; it takes confidence, token, word")]:
        refused = _pre(plugin, tmp_path, "run", "--model", "echo:one-word", "--model-args", bad, "--limit", "4",
                       "--no-cache", "--output-dir", "refused", "--no-progress")
        (line,) = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and words in line and line.endswith("(--model-args)"), refused.stderr
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())

    (tmp_path / "grid.toml").write_text(textwrap.dedent('''
        [sweep]
        name = "echo"
        output_dir = "sweeps"
        limit = 4
        mode = "choices"

        [grid]
        models = ["echo:one-word"]
        datasets = ["rotten_tomatoes"]
        prompt_types = ["task"]
        attacks = ["checklist"]

        [models."echo:one-word"]
        model_args = "word=negative"
    '''), encoding="utf-8")
    planned = _pre(plugin, tmp_path, "sweep", "grid.toml", "--dry-run")
    assert planned.returncode == 0, planned.stderr
    # the per-model estimate names the plugin's backend (the hardware section lists the model too)
    (row,) = [line.strip() for line in planned.stdout.splitlines()
              if line.strip().startswith("echo:one-word ") and "size not known" not in line]
    assert row.split()[1] == "echo" and "blocked" not in planned.stdout.lower()

    assert _repository_state() == before  # nothing in the repository changed: one module and its entry point


def test_a_backend_implements_complete_batch_or_complete() -> None:
    """Neither default calls the other in a circle: a backend overriding neither cannot be built."""

    class Neither(Backend):
        @property
        def identity(self) -> ModelIdentity:
            return ModelIdentity(backend="x", name="x", revision="")

    class OnePerCallNeither(PerRequestBackend):
        @property
        def identity(self) -> ModelIdentity:
            return ModelIdentity(backend="x", name="x", revision="")

    for kind in (Neither, OnePerCallNeither):
        with pytest.raises(TypeError, match="abstract"):
            kind()  # type: ignore[abstract]

    class OnePerCall(OnePerCallNeither):
        async def complete(self, request: Request):  # noqa: ANN201
            from promptrobust.engine.serving.types import Completion

            return Completion(text=request.prompt or "")

    answers = asyncio.run(OnePerCall().complete_batch([Request("generate", prompt="a"), Request("generate", prompt="b")]))
    assert [a.text for a in answers] == ["a", "b"]
