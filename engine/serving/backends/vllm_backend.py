"""vLLM in process: one ``AsyncLLM`` (vLLM V1 engine) answering single requests.

The scheduler sends many concurrent single requests (``batching = False``);
vLLM's own scheduler batches them continuously, and automatic prefix caching
shares the KV cache of a prompt (instruction, few-shot block) across samples.

Choice scoring never uses ``prompt_logprobs`` (a request that asks for them
skips prefix-cache reads). Instead each choice is scored from the log-probs of
*generated* positions: a request with ``max_tokens=1`` and
``logprob_token_ids`` returns the log-probability of exactly the listed token
ids at the first generated position, normalised over the full vocabulary
(vLLM's default ``raw_logprobs`` mode: log-softmax of the raw logits, before
temperature or any sampler restriction). We do not use ``allowed_token_ids``:
restricting the sampler would not change raw log-probs, but it is not needed
either, and it would add a logits processor per request.

Multi-token choices are scored exactly, as the sum of their token
log-probabilities: the choices' token sequences form a trie, and every inner
node (the prompt followed by a shared choice prefix) is one 1-token request
that reads the log-probs of all children of that node. The requests of one
``score_choices`` call share the prompt, so the prefix cache makes the extra
nodes cheap. The common case (all choices single tokens) is one request.

Prompts are tokenised here (chat messages through the tokenizer's chat
template with ``add_generation_prompt=True``) and sent as token ids, so the
ids that reach vLLM's prefix cache are exactly the ones choices are split
against.

vLLM's engine runs in child processes; on CPU it always uses the ``spawn``
start method, which re-imports ``__main__``: scripts that start this backend
need an ``if __name__ == "__main__":`` guard.

The floor is vLLM 0.20.0, the first release whose ``SamplingParams`` has
``logprob_token_ids`` (checked in the release sdists: 0.19.0 lacks it);
``AsyncLLM``, ``AsyncEngineArgs`` and ``TokensPrompt`` are older. An older vLLM
is refused at start in one line.

On CPU (vllm-cpu) two of vLLM's defaults do not fit a small machine:
``gpu_memory_utilization`` is the share of *host* RAM the engine reserves, and
must be free at start (0.9 of a 24 GiB machine with 21 GiB free fails), and one
core is kept from the model's threads for the scheduler (half of a 2-core
machine). Unless set, the share here is half of the RAM free at start (at most
0.9) and every core runs the model (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``);
``engine_settings`` says what was used, and start-up logs it.

Every exception vLLM raises (engine construction, ``SamplingParams``, a
request) reaches the caller as a one-line ``BackendError``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import math
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from promptrobust.engine.serving.backends.base import (
    MASS_TOLERANCE,
    BackendError,
    BackendUnavailable,
    BadAnswerError,
    PerRequestBackend,
)
from promptrobust.engine.serving.backends.label_tokens import (  # noqa: F401 - re-exported
    TokenIds,
    check_label_ids,
    continuation_ids,
    excess_mass,
    sum_choice_logprobs,
    trie_queries,
)
from promptrobust.engine.serving.model_args import Flag, Number, Text, check_fields, model_arg
from promptrobust.engine.serving.registration import BackendRegistration, ModelSpec
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request

MISSING_VLLM = (
    "vllm is not installed: pip install 'promptrobust[vllm]' (GPU) "
    "or see scripts/install_vllm_cpu.sh (CPU)"
)

#: vLLM's upper bound on ``SamplingParams.logprob_token_ids`` per request.
MAX_IDS_PER_REQUEST = 128
#: The first vLLM release this backend runs on (``SamplingParams.logprob_token_ids``).
VLLM_FLOOR = (0, 20, 0)
#: The longest context and the largest seed a model argument may ask for.
MAX_MODEL_LEN = 10_000_000
MAX_SEED = 2**63 - 1
#: vLLM's own default share of (GPU) memory, kept on GPUs.
GPU_MEMORY_SHARE = 0.9
#: On CPU, the share of the RAM free at start that the engine may reserve.
CPU_FREE_RAM_SHARE = 0.5
#: The smallest host-RAM share worth starting an engine with.
MIN_CPU_MEMORY_SHARE = 0.05
_RESERVED_CPU_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"

log = logging.getLogger(__name__)

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")



# --------------------------------------------------------------------------
# Pure helpers (no vLLM needed; unit-tested on plain data)
# --------------------------------------------------------------------------


def position_logprobs(position: Any, token_ids: Iterable[int]) -> dict[int, float]:
    """Read the log-probs of ``token_ids`` from one generated position.

    ``position`` is what vLLM puts in ``CompletionOutput.logprobs[0]``: a
    mapping from token id to an object with a ``logprob`` attribute (plain
    floats are accepted too). A requested id that is absent is an error: with
    ``logprob_token_ids`` vLLM must return every one of them.
    """
    if position is None:
        raise BackendError(
            "vLLM returned no log-probs for the scored position (was logprob_token_ids ignored?)"
        )
    out: dict[int, float] = {}
    for tok in token_ids:
        if tok not in position:
            raise BackendError(
                f"vLLM did not return a log-prob for token id {tok}; cannot score this choice"
            )
        entry = position[tok]
        out[tok] = float(getattr(entry, "logprob", entry))
    return out


def weights_digest(model_dir: str | os.PathLike[str]) -> str:
    """sha256 over the weight files (and config) of a local model directory.

    Reads every byte once (about a second per GB); pass ``identity_revision``
    to skip it for very large models whose revision you already know.
    """
    root = Path(model_dir)
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name == "config.json")
    )
    if not files:
        raise BackendError(
            f"no weight files (*.safetensors, *.bin, ...) under {root}: point model= at a model directory"
        )
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\x00")
        with path.open("rb") as fh:
            while chunk := fh.read(4 << 20):
                h.update(chunk)
    return "sha256:" + h.hexdigest()[:16]


def _has_chat_template(model_dir: Path) -> bool:
    if (model_dir / "chat_template.jinja").is_file() or (
        model_dir / "chat_template.json"
    ).is_file():
        return True
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        try:
            return bool(
                json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
            )
        except (OSError, ValueError):
            return False
    return False


# --------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"0.32.0+cpu"`` -> (0, 32, 0); parts that are not numbers count as 0."""
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits) if digits else 0)
    return (parts + [0, 0, 0])[0], (parts + [0, 0, 0])[1], (parts + [0, 0, 0])[2]


def check_vllm_version(version: str) -> None:
    """One line naming the floor when the installed vLLM is older than ``VLLM_FLOOR``."""
    if version_tuple(version) < VLLM_FLOOR:
        floor = ".".join(map(str, VLLM_FLOOR))
        raise BackendUnavailable(
            f"vllm {version} is older than {floor}, the first release with SamplingParams.logprob_token_ids "
            f"(exact label scores): pip install 'vllm>={floor}'"
        )


def cpu_memory_share(total_bytes: int, available_bytes: int) -> float:
    """The host-RAM share for vLLM on CPU: ``CPU_FREE_RAM_SHARE`` of what is free, at most vLLM's 0.9,
    rounded down to 0.01 (vLLM refuses to start when the share of the total exceeds what is free)."""
    if total_bytes <= 0:
        raise BackendUnavailable("vLLM on CPU: cannot read this machine's memory size; pass gpu_memory_utilization=")
    share = math.floor(min(GPU_MEMORY_SHARE, CPU_FREE_RAM_SHARE * available_bytes / total_bytes) * 100) / 100
    if share < MIN_CPU_MEMORY_SHARE:
        raise BackendUnavailable(
            f"vLLM on CPU: only {available_bytes / 2**30:.1f} of {total_bytes / 2**30:.1f} GiB of RAM is free; "
            "free memory or pass gpu_memory_utilization= (the share of RAM vLLM reserves on CPU)"
        )
    return share


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of RAM, from /proc/meminfo (Linux, where vllm-cpu runs)."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                name, _, rest = line.partition(":")
                if name in ("MemTotal", "MemAvailable"):
                    fields[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        return 0, 0
    return fields.get("MemTotal", 0), fields.get("MemAvailable", 0)


def _first_line(exc: BaseException, default: str | None = None) -> str:
    """The first line of an exception's message (vLLM's can be pages long);
    ``default`` (the exception's type name unless given) when it has none."""
    text = str(exc).strip()
    if text:
        return text.splitlines()[0]
    return type(exc).__name__ if default is None else default


@dataclass(frozen=True)
class VLLMOptions:
    """How the in-process vLLM engine is started (its model arguments). vLLM checks the rest itself."""

    revision: str | None = model_arg(None, Text(optional=True))
    """Hub revision (branch, tag or commit) of a Hugging Face id; None: the default branch."""
    dtype: str = model_arg("auto", Text())
    """vLLM's ``dtype`` (``auto``, ``bfloat16``, ``float16``, ``float32``). Part of the cache key."""
    max_model_len: int | None = model_arg(2048, Number(1, MAX_MODEL_LEN, whole=True, optional=True))
    """The longest input plus answer in tokens; None: the model's own limit. Part of the cache key."""
    gpu_memory_utilization: float | None = model_arg(None, Number(0, 1, above=True, optional=True))
    """The share of GPU memory (on CPU: of host RAM) the engine reserves; None: 0.9 on a GPU, half the free RAM on CPU."""
    tensor_parallel_size: int = model_arg(1, Number(1, 1024, whole=True))
    """GPUs one model is split over."""
    enable_prefix_caching: bool = model_arg(True, Flag())
    """vLLM's automatic prefix caching (the instruction and few-shot block computed once)."""
    seed: int = model_arg(0, Number(0, MAX_SEED, whole=True))
    """vLLM's seed (sampling at temperature > 0 only: pre decodes greedily)."""
    chat: bool | None = model_arg(None, Flag(optional=True))
    """Send chat messages through the tokenizer's chat template; None: whenever the model has one."""

    def __post_init__(self) -> None:
        check_fields(self)


class VLLMBackend(PerRequestBackend):
    """A model served by an in-process vLLM ``AsyncLLM``.

    ``options``: every choice, whole; ``engine_kwargs``: further ``vllm.AsyncEngineArgs`` fields
    (Python callers only, part of the cache key); ``identity_revision``: who the model is when the
    registry knows better than the folder (an embedded model: its GGUF's sha256).
    """

    kind = "vllm"

    def __init__(
        self,
        model: str,
        options: VLLMOptions | None = None,
        *,
        engine_kwargs: Mapping[str, Any] | None = None,
        identity_revision: str | None = None,
    ) -> None:
        if not model or not str(model).strip():
            raise ValueError(
                "vllm backend needs a model: pass a Hugging Face name or a local model directory"
            )
        options = options if options is not None else VLLMOptions()
        if not isinstance(options, VLLMOptions):
            raise TypeError(f"vllm backend: options must be a VLLMOptions, not {type(options).__name__}")
        self.options = options
        self.model = str(model)
        self.revision = options.revision
        self.dtype = options.dtype
        self.max_model_len = options.max_model_len
        self.gpu_memory_utilization = options.gpu_memory_utilization
        self.tensor_parallel_size = options.tensor_parallel_size
        self.enable_prefix_caching = options.enable_prefix_caching
        self.seed = options.seed
        self.engine_kwargs = dict(engine_kwargs or {})
        self.identity_revision = identity_revision
        self._chat = options.chat
        self._engine: Any = None
        self._tokenizer: Any = None
        self._vllm: Any = None  # (SamplingParams, RequestOutputKind) once imported
        self._identity: ModelIdentity | None = None
        #: What the engine was started with where we chose for the user (memory share, core reservation).
        self.engine_settings: dict[str, str] = {}
        self._ids = itertools.count()
        self._id_prefix = uuid.uuid4().hex[:8]

    # ----- identity -------------------------------------------------------

    @property
    def identity(self) -> ModelIdentity:
        if self._identity is None:
            revision = self.identity_revision or self.revision
            if not revision and os.path.isdir(self.model):
                revision = weights_digest(self.model)
            extra = [
                ("dtype", str(self.dtype)),
                ("max_model_len", str(self.max_model_len)),
            ]
            if self.engine_kwargs:
                extra.append(
                    (
                        "engine_kwargs",
                        json.dumps(self.engine_kwargs, sort_keys=True, default=str),
                    )
                )
            self._identity = ModelIdentity(
                backend=self.kind,
                name=self.model,
                revision=revision or "",
                extra=tuple(extra),
            )
        return self._identity

    @property
    def is_chat(self) -> bool:
        if self._chat is not None:
            return self._chat
        if self._tokenizer is not None:
            return bool(getattr(self._tokenizer, "chat_template", None))
        return os.path.isdir(self.model) and _has_chat_template(Path(self.model))

    # ----- lifecycle ------------------------------------------------------

    def _memory_share(self, on_cpu: bool) -> float:
        """The memory share given, else vLLM's 0.9 on a GPU, else what this machine's free RAM allows."""
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        if "gpu_memory_utilization" in self.engine_kwargs:
            return float(self.engine_kwargs["gpu_memory_utilization"])
        if not on_cpu or "kv_cache_memory_bytes" in self.engine_kwargs:
            return GPU_MEMORY_SHARE  # a fixed KV cache: vLLM on CPU then checks that instead of the share
        total, available = host_memory()
        share = cpu_memory_share(total, available)
        self.engine_settings["gpu_memory_utilization"] = (
            f"{share:g} (host RAM share: {CPU_FREE_RAM_SHARE:g} of the {available / 2**30:.1f} GiB free at start)")
        return share

    def _cpu_threads(self) -> None:
        """On CPU, every core runs the model unless the user set vLLM's reservation."""
        if _RESERVED_CPU_ENV in os.environ:
            self.engine_settings["reserved_cpus"] = f"{os.environ[_RESERVED_CPU_ENV]} (set by {_RESERVED_CPU_ENV})"
            return
        os.environ[_RESERVED_CPU_ENV] = "0"  # read by vLLM's CPU worker processes, which inherit it
        self.engine_settings["reserved_cpus"] = f"0 of {os.cpu_count()} cores ({_RESERVED_CPU_ENV}=0)"

    def _engine_args(self, engine_args_cls: type, *, on_cpu: bool = False) -> Any:
        kwargs: dict[str, object] = {
            "model": self.model,
            "revision": self.revision,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self._memory_share(on_cpu),
            "tensor_parallel_size": self.tensor_parallel_size,
            "enable_prefix_caching": self.enable_prefix_caching,
            "seed": self.seed,
            "disable_log_stats": True,
        }
        kwargs.update(self.engine_kwargs)
        try:
            return engine_args_cls(**kwargs)
        except TypeError as exc:
            raise ValueError(
                f"bad vLLM engine argument ({_first_line(exc)}); check engine_kwargs against vllm.AsyncEngineArgs"
            ) from exc
        except Exception as exc:  # vLLM validates some fields itself (pydantic, ValueError, ...): one line
            raise BackendUnavailable(
                f"vLLM refused the engine arguments for {self.model!r}: {_first_line(exc)}"
            ) from exc

    async def start(self) -> None:
        if self._engine is not None:
            return
        try:
            import vllm
        except ImportError as exc:
            raise BackendUnavailable(MISSING_VLLM) from exc
        check_vllm_version(str(getattr(vllm, "__version__", "0")))
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.platforms import current_platform
            from vllm.sampling_params import RequestOutputKind, SamplingParams
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise BackendUnavailable(f"this vllm ({getattr(vllm, '__version__', '?')}) lacks what the backend "
                                     f"uses: {_first_line(exc)}") from exc
        except Exception as exc:  # a broken install (a missing compiled library, ...): one line
            raise BackendUnavailable(f"vllm could not be imported: {type(exc).__name__}: {_first_line(exc)}") from exc
        on_cpu = bool(current_platform.is_cpu())
        if on_cpu:
            self._cpu_threads()
        args = self._engine_args(AsyncEngineArgs, on_cpu=on_cpu)
        if self.engine_settings:
            log.warning("vLLM on CPU: %s", "; ".join(f"{k}={v}" for k, v in self.engine_settings.items()))
        # Building the engine loads weights and warms up for a minute or more:
        # do it off the event loop. AsyncLLM starts its output handler lazily on
        # the first request, in the loop that makes it.
        try:
            engine = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
        except Exception as exc:  # vLLM raises many types here; keep one line
            raise BackendUnavailable(
                f"vLLM could not start {self.model!r}: {_first_line(exc)}"
            ) from exc
        try:
            tokenizer = engine.get_tokenizer()
            if asyncio.iscoroutine(tokenizer):  # older releases made it async
                tokenizer = await tokenizer
        except Exception as exc:
            engine.shutdown()
            raise BackendUnavailable(f"vLLM started {self.model!r} without a tokenizer: {_first_line(exc)}") from exc
        self._engine, self._tokenizer = engine, tokenizer
        self._vllm = (SamplingParams, RequestOutputKind)

    async def close(self) -> None:
        engine, self._engine = self._engine, None
        self._tokenizer = None
        if engine is None:
            return
        engine.shutdown()
        # AsyncLLM.__del__ calls shutdown() again; the object can outlive us
        # until interpreter exit, when vLLM's module globals are already gone
        # and that second call prints a TypeError. It is shut down: make the
        # repeat a no-op on this instance.
        engine.shutdown = lambda *args, **kwargs: None

    # ----- rendering ------------------------------------------------------

    def _render(self, request: Request) -> tuple[str, bool]:
        """The prompt text, and whether the tokenizer should add special tokens."""
        if request.messages is None:
            return request.prompt or "", True
        if not getattr(self._tokenizer, "chat_template", None):
            raise BackendError(
                f"{self.model} has no chat template: send prompt= requests, not messages="
            )
        messages = [{"role": m.role, "content": m.content} for m in request.messages]
        text = self._tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        # The template already carries BOS and role markers.
        return text, False

    def _encode(self, text: str, special: bool) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=special))

    # ----- requests -------------------------------------------------------

    def _require_started(self) -> None:
        if self._engine is None:
            raise BackendError(
                "vllm backend used before start(): await backend.start() first"
            )

    async def _engine_input(self, prompt_ids: list[int]) -> Any:
        """Token ids as vLLM's engine input (rendered, as AsyncLLM.generate asks)."""
        from vllm.inputs import TokensPrompt

        prompt = TokensPrompt(prompt_token_ids=prompt_ids)
        renderer = getattr(self._engine, "renderer", None)
        if renderer is None or not hasattr(renderer, "render_cmpl_async"):
            return prompt  # older vLLM: raw prompts are the API
        (rendered,) = await renderer.render_cmpl_async([prompt])
        return rendered

    async def _run(self, prompt_ids: list[int], params: Any) -> Any:
        request_id = f"pre-{self._id_prefix}-{next(self._ids)}"
        final = None
        try:
            engine_input = await self._engine_input(prompt_ids)
            async for out in self._engine.generate(engine_input, params, request_id):
                final = out
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            msg = _first_line(exc, default="")
            cause = exc.__cause__
            if not msg and cause is not None:
                msg = _first_line(cause)
            raise BackendError(
                f"vLLM request failed: {type(exc).__name__}: {msg or 'no message'}"
            ) from exc
        if final is None or not final.outputs:
            raise BackendError("vLLM finished a request without output")
        return final

    async def complete(self, request: Request) -> Completion:
        self._require_started()
        text, special = self._render(request)
        prompt_ids = self._encode(text, special)
        if request.kind == "generate":
            return await self._generate(prompt_ids, request)
        return await self._score(text, special, prompt_ids, request)

    def _params(self, **kwargs: Any) -> Any:
        """vLLM's ``SamplingParams``; whatever it raises (a value it refuses, a field this release lacks)
        becomes one line."""
        sampling_params, output_kind = self._vllm
        try:
            return sampling_params(output_kind=output_kind.FINAL_ONLY, **kwargs)
        except Exception as exc:
            raise BackendError(
                f"vLLM refused the sampling parameters: {type(exc).__name__}: {_first_line(exc, default='')}"
            ) from exc

    async def _generate(self, prompt_ids: list[int], request: Request) -> Completion:
        d = request.decoding
        params = self._params(
            temperature=d.temperature,
            max_tokens=d.max_tokens,
            stop=list(d.stop) or None,
            seed=self.seed if d.temperature > 0 else None,
        )
        out = (await self._run(prompt_ids, params)).outputs[0]
        return Completion(
            text=out.text,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(out.token_ids),
        )

    def _choice_ids(
        self, text: str, special: bool, prompt_ids: list[int], choice: str
    ) -> TokenIds:
        full = self._encode(text + choice, special)
        isolated = self._encode(choice, False)
        return continuation_ids(prompt_ids, full, isolated)

    async def _read_node(
        self, prompt_ids: list[int], prefix: TokenIds, token_ids: tuple[int, ...]
    ) -> dict[int, float]:
        found: dict[int, float] = {}
        for start in range(0, len(token_ids), MAX_IDS_PER_REQUEST):
            chunk = list(token_ids[start : start + MAX_IDS_PER_REQUEST])
            params = self._params(
                temperature=0.0,
                max_tokens=1,
                logprob_token_ids=chunk,
                detokenize=False,
            )
            out = (await self._run(prompt_ids + list(prefix), params)).outputs[0]
            if not out.logprobs:
                raise BackendError(
                    "vLLM returned no sample log-probs; this vLLM release may not support logprob_token_ids"
                )
            found.update(position_logprobs(out.logprobs[0], chunk))
        return found

    async def _score(
        self, text: str, special: bool, prompt_ids: list[int], request: Request
    ) -> Completion:
        choices = [
            self._choice_ids(text, special, prompt_ids, c) for c in request.choices
        ]
        check_label_ids(request.choices, choices)  # none empty, no two alike: else refused, never scored
        nodes = trie_queries(choices)
        prefixes = list(nodes)
        results = await asyncio.gather(
            *(self._read_node(prompt_ids, p, nodes[p]) for p in prefixes)
        )
        for found in results:
            mass = excess_mass(found.values())
            if mass is not None:
                raise BadAnswerError(
                    f"impossible answer from vLLM: the labels' tokens at one position have probabilities adding up "
                    f"to {mass:.4g} (at most {1 + MASS_TOLERANCE:g}): check the model, its dtype and the vLLM version"
                )
        node_logprobs = dict(zip(prefixes, results))
        return Completion(
            choice_logprobs=sum_choice_logprobs(choices, node_logprobs),
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(prefixes),
        )


def _build(spec: ModelSpec, options: VLLMOptions) -> VLLMBackend:
    """An embedded model from the model store (converted on first use; its own chat format unless set),
    else a hub id or a folder."""
    if spec.embedded:
        from promptrobust.engine.serving.model_store import ensure_embedded

        emb = ensure_embedded(spec.model)
        if options.chat is None:
            options = replace(options, chat=emb.is_chat)
        return VLLMBackend(str(emb.path), options, identity_revision=emb.revision)
    return VLLMBackend(spec.model, options)


REGISTRATION = BackendRegistration(
    name="vllm",
    options=VLLMOptions,
    build=_build,
    description="vLLM's engine in this process (GPU; CPU with vllm-cpu): vllm:ORG/NAME, a local folder, "
                "or backend=vllm for an embedded model",
    extra="vllm",
    chat_switch=("chat", True),
    weights_from_hub=True,
)
