"""The serving core: how a request reaches a model and its answer comes back.

``types`` (requests and completions, the core's plain structs), ``scheduler`` (batching,
concurrency, rate limits, retries; one per model), ``cache`` (SQLite answers), ``ratelimit``,
``retry``, ``model_store`` (embedded models converted once), ``model_args`` and ``registry``
(model names -> backends), ``backends`` (hf, vllm, openai-compatible, random).

It knows nothing of tasks, attacks, measuring, runs or analysis: every backend speaks the
same request/completion types, so nothing above cares where the model runs.
"""
