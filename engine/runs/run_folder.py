"""The one writer of run folders, and the one ``results.json`` layout.

A run writes into ``<output-dir>/.<name>.partial`` and renames it to
``<output-dir>/<name>`` only when every file is written, so a crash or an
error never leaves a folder that looks like a finished run::

    with RunFolder(output_dir, [model, dataset]) as folder:
        folder.write_records(records)            # results.jsonl + results.parquet
        folder.write_results(ResultsDocument(...))
    print(folder.final)

Every command (``pre run``, ``pre run --attack``, ``pre eval``, ``pre
transfer``, ``pre defend``) writes ``results.json`` in one layout, close to
lm-evaluation-harness's and described by ``results.schema.json`` (shipped with
the package)::

    format    "promptrobust-results/1"
    command   argv, secrets redacted
    versions  promptrobust, git commit and git_dirty (null outside a checkout; read when the
              session opens), python, torch,
              transformers, vllm, openai (null when not installed); vllm is the
              server's (its /version) when a vLLM server answered the run
    tasks     (a user's own task only) its provenance: name, task file, definition and its
              hash, data location and SHA-256, few-shot file and hash, labels, metric
    models    the identity of every model queried (backend, name, revision, extra)
    configs   the settings: "measurement" (MeasurementSettings) and the command's own
    results   "clean" (every prompt's clean score with its interval and flag),
              "records" (counts by kind and status), "apdr" (figures with intervals),
              and what the command adds
    samples   sample counts ("evaluated" per prompt, "logged" when --log-samples)
    date      "started", "finished" (UTC, ISO 8601); wall_seconds
    library_warnings  third-party warnings this process saw (a deprecation in transformers
              that promptrobust must follow, ...), in our words and theirs
              (``engine.progress.library_warnings``); usually empty

Every file goes through ``engine.atomic_io`` (temp file, fsync, rename), the one
place to point at a shared atomic writer.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from promptrobust.engine.progress import library_warnings
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.records import AttackRecord, append_jsonl, consolidate_parquet, now, read_jsonl
from promptrobust.engine.runs.lm_eval_args import argument_secrecy
from promptrobust.engine.serving.registry import model_argument_secrecy

__all__ = [
    "FORMAT",
    "OWNER_FILE",
    "RunFolder",
    "RunFolderError",
    "SweepFolder",
    "SCHEMA_PATH",
    "now",
    "recorded_cache",
    "redact_argv",
    "remove_stale_partials",
    "ResultsDocument",
    "WrittenAsResults",
    "versions",
]

FORMAT = "promptrobust-results/1"
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")
#: Inside a ``.partial`` folder: the pid of the run writing it (stale when that process is gone).
OWNER_FILE = ".owner-pid"


class RunFolderError(PromptRobustError, ValueError):
    """The output folder cannot be used; the message names the fix."""

    setting = "output_dir"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "run"


def remove_stale_partials(root: Path) -> list[Path]:
    """Delete ``.NAME.partial`` folders whose run was killed (kill -9, power loss).

    A folder counts as stale when the process named in its owner file is gone,
    or when it has no owner file and is older than a day (written by an older
    release). Returns what was removed."""
    removed = []
    for partial in root.glob(".*.partial"):
        if not partial.is_dir():
            continue
        owner = partial / OWNER_FILE
        try:
            stale = not atomic_io.process_alive(int(owner.read_text().strip())) if owner.exists() else (time.time() - partial.stat().st_mtime > 86400)
        except (OSError, ValueError):
            stale = True
        if stale:
            shutil.rmtree(partial, ignore_errors=True)
            removed.append(partial)
    return removed


class RunFolder:
    """A run folder that is either complete or absent (see the module docstring)."""

    def __init__(self, output_dir: str | os.PathLike[str], name_parts: Sequence[str]) -> None:
        root = Path(output_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=root, prefix=".pre-probe-", delete=True)
            probe.close()
        except OSError as exc:
            if root.is_symlink() and not root.exists():  # mkdir's "File exists" would not say why
                raise RunFolderError(f"output folder {root} is a symbolic link to {os.readlink(root)}, which does not exist; "
                                     "create that folder, or choose another output folder") from None
            raise RunFolderError(
                f"output folder {root} is not writable ({exc.strerror}); choose a writable output folder"
            ) from None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = "_".join([stamp, *(_slug(p) for p in name_parts)])
        self.started = now()
        for stale in remove_stale_partials(root):
            print(f"pre: removed {stale}, the unfinished folder of a killed run", file=sys.stderr)
        # Unique even for runs started in the same second (an exclusive claim; see atomic_io).
        self.partial, self.final = atomic_io.reserve_folder(root, name)
        try:
            atomic_io.write_bytes(self.partial / OWNER_FILE, str(os.getpid()).encode())
        except BaseException:
            self.discard()  # a full disk at the very start leaves no claim behind
            raise

    def path(self, name: str) -> Path:
        return self.partial / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        return atomic_io.write_bytes(self.path(name), data)

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    def write_json(self, name: str, data: object) -> Path:
        return self.write_bytes(name, atomic_io.json_bytes(data))

    def write_results(self, document: ResultsDocument) -> Path:
        """``results.json`` in the one layout."""
        return self.write_json("results.json", _checked(document).to_json())

    def append_records(self, records: Iterable[AttackRecord | Mapping[str, Any]]) -> None:
        """Append records to ``results.jsonl`` the moment they exist (one flushed, fsynced line each)."""
        append_jsonl(self.path("results.jsonl"), records)

    def write_records(self, records: Sequence[AttackRecord | Mapping[str, Any]]) -> None:
        """All records at once: ``results.jsonl`` and ``results.parquet``."""
        if records:
            self.append_records(records)
        self.consolidate()

    def consolidate(self) -> None:
        """``results.parquet`` from ``results.jsonl`` (when there are records)."""
        if self.path("results.jsonl").exists():
            consolidate_parquet(self.path("results.jsonl"), self.path("results.parquet"))

    def write_jsonl(self, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """``samples.jsonl``, ``errors.jsonl``: one JSON object a line; returns the line count (no file for none)."""
        rows = list(rows)
        if rows:
            self.write_bytes(name, atomic_io.jsonl_bytes(rows))
        return len(rows)

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Commit when the block finished, discard on any exception (Ctrl-C included)."""
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def commit(self) -> Path:
        (self.partial / OWNER_FILE).unlink(missing_ok=True)
        self.final = atomic_io.commit_folder(self.partial, self.final)  # the next suffix if taken meanwhile
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)


def recorded_cache(folder: str | Path) -> str | None:
    """The score cache a run or sweep folder's config.json names, when that file is still there."""
    config = Path(folder) / "config.json"
    cache = orjson.loads(config.read_bytes()).get("cache") if config.is_file() else None
    return cache if cache and Path(cache).is_file() else None


class SweepFolder:
    """A sweep's folder: unlike a ``RunFolder`` it is resumable, so it is written in
    place (records append across reruns; a rerun skips what ``results.jsonl`` holds).
    The local executor and the Ray driver both write through it."""

    #: What a sweep writes in its folder; none of them may be a symbolic link.
    FILES = ("results.jsonl", "results.parquet", "results.json", "config.json", "errors.jsonl")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.results = self.path / "results.jsonl"
        self.started = now()
        for name in self.FILES:  # said before anything runs (the appends refuse links too)
            if (self.path / name).is_symlink():
                raise RunFolderError(f"{self.path / name} is a symbolic link: a sweep writes its files in place and never "
                                     "through a link (it may point outside the folder); replace it with the file itself")

    def write_config(self, config: Mapping[str, Any], *, resume_key: Callable[[Mapping[str, Any]], Any] | None = None) -> Path:
        """``config.json``. With ``resume_key`` (the settings every record depends on), a folder
        that already holds records made under another key is refused: a rerun would skip their
        prompts as done and mix two settings in one sweep."""
        old_path = self.path / "config.json"
        if resume_key is not None and old_path.is_file() and self.results.is_file() and self.results.stat().st_size:
            try:
                old = resume_key(orjson.loads(old_path.read_bytes()))
            except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
                old = None
            new = resume_key(config)
            if old is not None and old != new:
                differ = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)) if isinstance(old, dict) else []
                raise RunFolderError(
                    f"{self.path} holds records made with other settings ({', '.join(differ[:3]) or 'settings'} differ); "
                    "resuming would mix them: give the sweep another name or output folder", setting="output_dir")
        return atomic_io.write_json(old_path, config)

    def append_records(self, records: Iterable[AttackRecord | Mapping[str, Any]]) -> None:
        append_jsonl(self.results, records)

    def record_error(self, job_id: str, row: Mapping[str, Any] | None) -> None:
        """``errors.jsonl`` keeps the latest failure of each job once: a resumed sweep replaces an
        earlier failure, and a job that now succeeds (``row`` None) is taken off."""
        path = self.path / "errors.jsonl"
        if not path.exists() and row is None:
            return
        rows = [r for r in read_jsonl(path) if r.get("job_id") != job_id] if path.exists() else []
        if row is not None:
            rows.append(dict(row))
        atomic_io.write_jsonl(path, rows)

    def consolidate(self) -> None:
        consolidate_parquet(self.results, self.path / "results.parquet")

    def write_results(self, document: ResultsDocument) -> Path:
        """``results.json`` in the one layout (``run_results.sweep_document``)."""
        return atomic_io.write_json(self.path / "results.json", _checked(document).to_json())


# -- the results.json document ------------------------------------------------------------

_SECRET_NAME = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|auth)", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
REDACTED = "<redacted>"


def _redact_value(text: str) -> str:
    text = _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", text)
    # key=value lists (--model-args api_key=...,base_url=...) and URL query strings (?token=...)
    return re.sub(r"([A-Za-z0-9_.-]+)=([^,&\s]*)",
                  lambda m: f"{m.group(1)}={REDACTED}" if _SECRET_NAME.search(m.group(1)) else m.group(0), text)


_MODEL_ARGS_FLAGS = ("--model-args", "--model_args")


def _declared_model_arguments() -> dict[str, bool]:
    """Each model argument a backend (or lm-eval's API spelling) declares -> whether it is a secret."""
    declared = argument_secrecy()
    for name, secret in model_argument_secrecy().items():
        declared[name] = declared.get(name, False) or secret
    return declared


def _redact_model_args(text: str, declared: dict[str, bool]) -> str:
    """``--model-args`` items: a declared argument by its declaration (a secret's value hidden; any other
    value keeps only URL credentials out), an argument nobody declares by its name, as any flag's."""
    items = []
    for item in text.split(","):
        key, eq, value = item.partition("=")
        if eq and key.strip() in declared:
            items.append(f"{key}={REDACTED}" if declared[key.strip()] else f"{key}={_redact_value(value)}")
        else:
            items.append(_redact_value(item))
    return ",".join(items)


def recorded_command(argv: Sequence[str] | None) -> list[str]:
    """The command a result records: the one given, else this process's command line (redacted
    when written: ``redact_argv``)."""
    return list(argv) if argv is not None else ["python", *sys.argv]


def redact_argv(argv: Sequence[str]) -> list[str]:
    """The command line with secrets replaced: ``--model-args`` items their backend's options declare
    secret, values of flags named like a secret (--api-key X, --token=X), other KEY=VALUE items whose
    key is, and URL credentials."""
    out: list[str] = []
    hide_next = model_args_next = False
    declared: dict[str, bool] | None = None
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        flag, eq, value = arg.partition("=")
        if model_args_next or (flag in _MODEL_ARGS_FLAGS and eq):
            declared = _declared_model_arguments() if declared is None else declared
            out.append(_redact_model_args(arg, declared) if model_args_next else f"{flag}={_redact_model_args(value, declared)}")
            model_args_next = False
            continue
        if arg in _MODEL_ARGS_FLAGS:
            out.append(arg)
            model_args_next = True
            continue
        if arg.startswith("--") and _SECRET_NAME.search(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(_redact_value(arg))
    return out


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _checkout_root(start: Path | None = None) -> Path | None:
    """The git checkout the package runs from (``start``: this file's folder); None for an installed copy."""
    here = (start or Path(__file__)).resolve().parent
    return next((p for p in (here, *here.parents) if (p / ".git").exists()), None)


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git_commit(start: Path | None = None) -> str | None:
    """The commit of the checkout the package runs from; None for an installed copy."""
    root = _checkout_root(start)
    commit = (_git(root, "rev-parse", "HEAD") or "").strip() if root is not None else ""
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _git_dirty(start: Path | None = None) -> bool | None:
    """Whether that checkout's tracked files differ from its commit (then the commit alone does not
    say which code ran); None for an installed copy or when git cannot tell."""
    root = _checkout_root(start)
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if root is not None else None
    return None if status is None else bool(status.strip())


_VERSIONS: dict[str, object] | None = None


def versions() -> dict[str, object]:
    """The software a result was made with (computed once per process)."""
    global _VERSIONS
    if _VERSIONS is None:
        _VERSIONS = {
            "promptrobust": _version("promptrobust"),
            "git_commit": _git_commit(),
            "git_dirty": _git_dirty(),
            "python": sys.version.split()[0],
            **{name: _version(name) for name in ("torch", "transformers", "vllm", "openai")},
        }
    return dict(_VERSIONS)


def _versions_for(models: Sequence[Mapping[str, Any]]) -> dict[str, object]:
    """``versions()``, with vLLM's the version of the vLLM server that answered (a model identity's
    ``server`` fact), when one did: that vLLM computed the results, not the one installed here."""
    out = versions()
    for m in models:
        extra = m.get("extra")
        served = str(extra.get("server", "")) if isinstance(extra, Mapping) else ""
        if served.startswith("vllm "):
            out["vllm"] = served.removeprefix("vllm ")
            break
    return out


def _record_counts(records: Sequence[AttackRecord | Mapping[str, Any]]) -> dict[str, object]:
    def get(r: AttackRecord | Mapping[str, Any], key: str) -> Any:
        return r.get(key) if isinstance(r, Mapping) else getattr(r, key, None)

    by_kind: dict[str, int] = {}
    by_status: dict[str, int] = {}
    for r in records:
        by_kind[str(get(r, "kind"))] = by_kind.get(str(get(r, "kind")), 0) + 1
        by_status[str(get(r, "status"))] = by_status.get(str(get(r, "status")), 0) + 1
    return {"total": len(records), "by_kind": by_kind, "by_status": by_status}


@dataclass(frozen=True)
class ResultsDocument:
    """``results.json``: the one layout every command writes (see the module docstring;
    ``results.schema.json`` describes it), built by each kind of result (``EvaluationResult``,
    ``run_results.protocol_document``, ``records_document``, ``sweep_document``) and written only
    by ``RunFolder.write_results`` / ``SweepFolder.write_results``."""

    command: Sequence[str]
    """argv as given; redacted when written."""
    models: Sequence[Mapping[str, Any]]
    """The identity of every model queried, as each backend reports it."""
    dataset: str | None
    measurement: Mapping[str, Any] | None
    """``MeasurementSettings.to_dict()`` of the figures."""
    configs: Mapping[str, Any]
    """The command's own settings (attack, sweep, sources, ...)."""
    started: str
    wall_seconds: float
    clean: Sequence[Mapping[str, Any]] = ()
    records: Sequence[AttackRecord | Mapping[str, Any]] = ()
    """Counted by kind and status (the records themselves are results.jsonl's)."""
    apdr: Sequence[Mapping[str, Any]] = ()
    extra_results: Mapping[str, Any] = field(default_factory=dict)
    """What the command adds under ``results`` (cost_by_attack, mean_score, held_out, ...)."""
    samples: int | None = None
    logged_samples: int = 0
    chance_rate: float | None = None
    counters: Mapping[str, Any] = field(default_factory=dict)
    model: str | None = None
    """The model's name as the user gave it, the name its records carry (one name per model
    everywhere); None: the first model identity's name."""
    tasks: Sequence[Mapping[str, Any]] = ()
    """The provenance of each user's own task measured (``Task.provenance``), written as ``tasks``
    only when there is one."""

    def to_json(self) -> dict[str, object]:
        """The document as written (secrets redacted, versions, the time it finished, warnings seen)."""
        first = self.models[0] if self.models else {}
        own = {"tasks": [dict(t) for t in self.tasks]} if self.tasks else {}
        return {
            "format": FORMAT,
            "command": redact_argv(self.command),
            "versions": _versions_for(self.models),
            "model": self.model if self.model is not None else first.get("name"),
            "dataset": self.dataset,
            **own,
            "models": [dict(m) for m in self.models],
            "configs": {"measurement": dict(self.measurement) if self.measurement is not None else None,
                        **dict(self.configs)},
            "results": {
                "clean": [dict(c) for c in self.clean],
                "records": _record_counts(self.records),
                "apdr": [dict(a) for a in self.apdr],
                **dict(self.extra_results),
            },
            "chance_rate": self.chance_rate,
            "samples": {"evaluated": self.samples, "logged": self.logged_samples},
            "date": {"started": self.started, "finished": now()},
            "wall_seconds": round(float(self.wall_seconds), 3),
            "counters": dict(self.counters),
            "library_warnings": library_warnings.noted(),
        }


def _checked(document: object) -> ResultsDocument:
    """Only the one layout is written as results.json (an untyped caller's dict is refused)."""
    if not isinstance(document, ResultsDocument):
        raise TypeError(f"results.json is written from a ResultsDocument, not a {type(document).__name__}")
    return document


@dataclass(frozen=True)
class WrittenWith:
    """What a run adds to a result when it writes ``results.json``."""

    #: The command to record (None: this process's command line).
    argv: Sequence[str] | None = None
    #: The command's settings (``configs`` of results.json).
    configs: Mapping[str, Any] = field(default_factory=dict)
    #: Samples written to samples.jsonl.
    logged: int = 0
    #: The scheduler counters to record (None: the result's own, where it has them).
    counters: Mapping[str, Any] | None = None


class WrittenAsResults(ABC):
    """A result a command writes as ``results.json``: ``document`` builds its ``ResultsDocument``
    with what the run adds (``WrittenWith``); ``to_dict`` is the JSON written (for a notebook)."""

    @abstractmethod
    def document(self, run: WrittenWith = WrittenWith()) -> ResultsDocument:
        """This result's ``results.json``."""

    def to_dict(self, run: WrittenWith = WrittenWith()) -> dict[str, object]:
        """This result as ``results.json`` in the one layout every command writes."""
        return self.document(run).to_json()


# -- a sweep folder's results.jsonl, read back (resume) --------------------------------


def completed_keys(results_file: Path) -> set[tuple[str, str]]:
    """(job id, prompt id) pairs already recorded by an earlier (possibly killed) run.
    Failed records do not count: a rerun tries them again."""
    if not results_file.exists():
        return set()
    return {
        (r.get("job_id", ""), r.get("prompt_id", ""))
        for r in read_jsonl(results_file)
        if r.get("status", "attacked") != "failed"
    }


def repair_torn_tail(results_file: Path) -> None:
    """Drop a half-written last line left by a crash, so appends start on a fresh line."""
    if not results_file.exists():
        return
    raw = results_file.read_bytes()
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        try:
            fd = os.open(results_file, os.O_WRONLY | atomic_io.NO_FOLLOW)  # never truncate a link's target
        except OSError as exc:
            raise atomic_io.output_error(exc, results_file) from None
        try:
            os.ftruncate(fd, cut)
        finally:
            os.close(fd)
