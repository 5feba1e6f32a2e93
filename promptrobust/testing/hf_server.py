"""An OpenAI-compatible completions server whose answers come from a real transformers model.

For tests of exact label scoring over HTTP: the log-probabilities it returns are
the model's own (one forward pass per prompt), so an ``openai:`` client can be
compared number for number with the in-process ``hf:`` backend on the same
weights. It speaks what vLLM's server speaks on ``/v1/completions``:

* ``echo=true`` + ``logprobs=N``: the prompt's tokens with their log-probs
  (the first has none), then the generated ones; ``tokens``,
  ``token_logprobs``, ``text_offset``, ``top_logprobs``;
* ``prompt_logprobs=0`` (a vLLM extension): per prompt position ``None`` or
  ``{token_id: {"logprob", "rank", "decoded_token"}}``;
* plain greedy completion, with ``logprobs=N`` giving the top-N alternatives of
  each generated token.

* ``logprob_token_ids=[ids]`` with ``logprobs`` (vLLM 0.26+): the first
  generated position's ``top_logprobs`` holds the sampled token and every listed
  id (named ``token_id:N`` with ``return_tokens_as_token_ids``);
* ``return_token_ids``: each completion carries ``prompt_token_ids``;

on ``/v1/chat/completions`` vLLM's ``prompt_logprobs`` of the conversation
rendered with the model's chat template (``add_generation_prompt``,
``continue_final_message`` as vLLM takes them), at the top of the answer, and
``logprob_token_ids`` at the first generated position (``logprobs.content``;
``return_token_ids`` puts the conversation's ids at the top); and vLLM's
``POST /tokenize`` (at the server root) for a prompt or a conversation. Its
``/v1/models`` entry says ``owned_by: vllm``, as vLLM's does, and ``GET
/version`` says 0.32.0 (0.25.1, a release before ``logprob_token_ids``, when
made to refuse it).

``prompt`` may be a string, a list of token ids, or a list of either (one
completion each). ``echo=False`` / ``prompt_logprobs=False`` /
``logprob_token_ids=False`` make it refuse those options with HTTP 400, like
servers that do not offer them. Needs torch ([local] extra).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HFCompletionsServer"]


class HFCompletionsServer:
    """``with HFCompletionsServer(model, tokenizer, name="m") as srv: srv.url``."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "hf-model", echo: bool = True,
                 prompt_logprobs: bool = True, logprob_token_ids: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.echo = echo
        self.prompt_logprobs = prompt_logprobs
        self.logprob_token_ids = logprob_token_ids
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> HFCompletionsServer:
        outer = self

        class Handler(_Handler):
            state = outer

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the model ------------------------------------------------------------------
    def _encode(self, text: str | list[int]) -> list[int]:
        if isinstance(text, list):  # token ids, as vLLM takes them
            return list(text)
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize``: a prompt (``add_special_tokens``) or a conversation (its template)."""
        if body.get("messages") is not None:
            text = self.tokenizer.apply_chat_template(
                list(body["messages"]), tokenize=False,
                continue_final_message=bool(body.get("continue_final_message", False)),
                add_generation_prompt=bool(body.get("add_generation_prompt", True)))
            ids = list(self.tokenizer(text, add_special_tokens=bool(body.get("add_special_tokens", False)))["input_ids"])
        else:
            ids = list(self.tokenizer(str(body.get("prompt", "")),
                                      add_special_tokens=bool(body.get("add_special_tokens", True)))["input_ids"])
        return {"count": len(ids), "max_model_len": 8192, "tokens": ids, "token_strs": None}

    def _piece(self, token_id: int, position: int, text: str) -> str:
        """A token's text; a special token the tokenizer added (not in ``text``) reads as ''."""
        piece = self.tokenizer.decode([token_id])
        if token_id in set(self.tokenizer.all_special_ids) and not text.startswith(piece) and position == 0:
            return ""
        return piece

    def _logprobs(self, ids: list[int]) -> Any:
        """log-softmax over the vocabulary at every position, shape (n, V)."""
        import torch

        with torch.inference_mode():
            logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A chat answer: one greedy token, and the prompt log-probs when asked (thread-safe)."""
        continue_final = bool(body.get("continue_final_message", False))
        text = self.tokenizer.apply_chat_template(
            list(body.get("messages") or []), tokenize=False, continue_final_message=continue_final,
            add_generation_prompt=bool(body.get("add_generation_prompt", not continue_final)),
        )
        with self._lock:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            logp = self._logprobs(ids)
        nxt = int(logp[-1].argmax())
        listed = [int(t) for t in body.get("logprob_token_ids") or []]
        logprobs = None
        if listed and body.get("logprobs"):
            name = (lambda t: f"token_id:{t}") if body.get("return_tokens_as_token_ids") else (
                lambda t: self.tokenizer.decode([t]))
            logprobs = {"content": [{"token": name(nxt), "logprob": float(logp[-1, nxt]), "bytes": None,
                                     "top_logprobs": [{"token": name(t), "logprob": float(logp[-1, t]), "bytes": None}
                                                      for t in [nxt, *listed]]}]}
        out: dict[str, Any] = {
            "id": "chatcmpl-hf", "object": "chat.completion", "created": 0, "model": self.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.tokenizer.decode([nxt])},
                         "logprobs": logprobs, "finish_reason": "length"}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 1, "total_tokens": len(ids) + 1},
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = ids
        if body.get("prompt_logprobs") is not None:
            out["prompt_logprobs"] = [None] + [
                {str(ids[i]): {"logprob": float(logp[i - 1, ids[i]]), "rank": 1, "decoded_token": self.tokenizer.decode([ids[i]])}}
                for i in range(1, len(ids))
            ]
        return out

    def complete(self, text: str | list[int], body: dict[str, Any], index: int) -> dict[str, Any]:
        """One completion object of the answer (thread-safe: one forward pass at a time)."""
        with self._lock:
            return self._complete(text, body, index)

    def _complete(self, prompt: str | list[int], body: dict[str, Any], index: int) -> dict[str, Any]:
        asked = body.get("max_tokens")
        max_tokens = int(asked) if asked is not None else 16
        top_n = body.get("logprobs")
        listed = [int(t) for t in body.get("logprob_token_ids") or []]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        ids = self._encode(prompt)
        text = prompt if isinstance(prompt, str) else self.tokenizer.decode(ids)
        n_prompt = len(ids)
        generated: list[tuple[int, float, list[tuple[str, float]]]] = []
        logp = self._logprobs(ids)
        for _ in range(max_tokens):
            last = logp[-1]
            nxt = int(last.argmax())
            alts = []
            if listed:  # vLLM: the listed ids replace the natural top-k; the sampled token is added
                alts = [(f"token_id:{t}" if as_ids else self.tokenizer.decode([t]), float(last[t]))
                        for t in [nxt, *listed]]
            elif top_n:
                values, idx = last.topk(int(top_n))
                alts = [(self.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, idx)]
            generated.append((nxt, float(last[nxt]), alts))
            if nxt == self.tokenizer.eos_token_id:
                break
            ids = ids + [nxt]
            if len(generated) < max_tokens:
                logp = self._logprobs(ids)
        prompt_logp = logp if len(generated) <= 1 else self._logprobs(ids[:n_prompt])
        gen_text = "".join(self.tokenizer.decode([g[0]]) for g in generated)
        out: dict[str, Any] = {"index": index, "text": gen_text, "logprobs": None,
                               "finish_reason": "length" if len(generated) == max_tokens else "stop"}
        pieces = [self._piece(t, i, text) for i, t in enumerate(ids[:n_prompt])]
        if body.get("echo"):
            out["text"] = text + gen_text
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = ids[:n_prompt]
        if top_n is not None:
            tokens: list[str] = []
            token_logprobs: list[float | None] = []
            tops: list[dict[str, float] | None] = []
            if body.get("echo"):
                tokens += pieces
                token_logprobs += [None] + [float(prompt_logp[i - 1, ids[i]]) for i in range(1, n_prompt)]
                tops += [None] * n_prompt
            tokens += [f"token_id:{g[0]}" if as_ids else self.tokenizer.decode([g[0]]) for g in generated]
            token_logprobs += [g[1] for g in generated]
            tops += [dict(g[2]) for g in generated]
            offsets, at = [], 0
            for tok in tokens:
                offsets.append(at)
                at += len(tok)
            out["logprobs"] = {"tokens": tokens, "token_logprobs": token_logprobs, "text_offset": offsets, "top_logprobs": tops}
        if body.get("prompt_logprobs") is not None:
            out["prompt_logprobs"] = [None] + [
                {str(ids[i]): {"logprob": float(prompt_logp[i - 1, ids[i]]), "rank": 1, "decoded_token": pieces[i]}}
                for i in range(1, n_prompt)
            ]
        return out


class _Handler(BaseHTTPRequestHandler):
    state: HFCompletionsServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        if self.path.split("?")[0].rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.state.name, "object": "model", "owned_by": "vllm"}]})
            return
        if self.path.split("?")[0].rstrip("/") == "/version":
            self._send(200, {"version": "0.32.0" if self.state.logprob_token_ids else "0.25.1"})
            return
        self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        st = self.state
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._error(400, "body is not JSON")
            return
        st.bodies.append(body)
        if self.path.split("?")[0].rstrip("/") == "/tokenize" and body.get("model") == st.name:
            self._send(200, st.tokenize(body))
            return
        if body.get("logprob_token_ids") and not st.logprob_token_ids:
            self._error(400, "Unrecognized request argument supplied: logprob_token_ids")
            return
        if self.path.split("?")[0].rstrip("/") == "/v1/chat/completions" and body.get("model") == st.name:
            if body.get("prompt_logprobs") is not None and not st.prompt_logprobs:
                self._error(400, "Unrecognized request argument supplied: prompt_logprobs")
                return
            self._send(200, st.chat(body))
            return
        if self.path.split("?")[0].rstrip("/") != "/v1/completions":
            self._error(404, f"no route {self.path}")
            return
        if body.get("model") != st.name:
            self._error(404, f"The model `{body.get('model')}` does not exist")
            return
        if body.get("echo") and not st.echo:
            self._error(400, "echo is not supported")
            return
        if body.get("prompt_logprobs") is not None and not st.prompt_logprobs:
            self._error(400, "Unrecognized request argument supplied: prompt_logprobs")
            return
        prompt = body.get("prompt", "")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt = [prompt]  # one prompt of token ids
        texts = prompt if isinstance(prompt, list) else [prompt]
        texts = [t if isinstance(t, list) else str(t) for t in texts]
        choices = [st.complete(t, body, i) for i, t in enumerate(texts)]
        prompt_tokens = sum(len(st._encode(t)) for t in texts)
        self._send(200, {
            "id": "cmpl-hf", "object": "text_completion", "created": 0, "model": st.name, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 0, "total_tokens": prompt_tokens},
        })
