"""`base_model=true`: a base model behind an API gets the paper's few-shot rule."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.serving.registry import ModelArgsError, resolve_model
from promptrobust.testing.fake_openai import FakeOpenAIServer


def test_base_model_argument_sets_the_spec_and_is_validated() -> None:
    assert not resolve_model("openai:m").base_model
    spec = resolve_model("openai:m", {"base_model": True, "api": "completions"})
    assert spec.base_model and "base_model" not in spec.args and spec.args["api"] == "completions"
    assert not resolve_model("gemma3-270m", {"base_model": False}).base_model  # a registry default can be overridden
    with pytest.raises(ModelArgsError, match="base_model=true or base_model=false"):
        resolve_model("openai:m", {"base_model": "maybe"})


@pytest.mark.parametrize(("flag", "shots"), [("", 0), (",base_model=true", 3)])
def test_openai_base_model_runs_few_shot_like_the_paper(tmp_path: Path, flag: str, shots: int) -> None:
    with FakeOpenAIServer() as srv:
        code = main([
            "run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url},api=completions{flag}",
            "--dataset", "rotten_tomatoes", "--limit", "4", "--mode", "choices",
            "--prompt-text", "Is this review positive or negative?", "--no-progress",
            "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"),
        ])
        prompts = [b["prompt"] for path, b in srv.bodies if path == "/v1/completions" and isinstance(b.get("prompt"), str)]
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    results = orjson.loads((folder / "results.json").read_bytes())
    measurement = results["configs"]["measurement"]
    assert measurement["shots"] == shots and measurement["input_format"] == "completion"
    # The fake server scores no prompt tokens: the run says labels were approximated.
    assert measurement["label_scoring"].startswith("approximate")
    scored = [p for p in prompts if "Is this review positive or negative?" in p]
    assert scored and all(p.count("Answer:") == shots + 1 for p in scored)
