"""Runs: what a user starts, and where its results go.

``session`` (cache + one scheduler per model, the API's centre), ``api`` (the synchronous
one-call functions), ``prompt_choice``, ``run_folder`` and ``run_results`` (the one writer and
layout of run folders), ``sync`` (sync over async, also inside Jupyter) and ``sweep``
(grids of jobs: config, runner, estimate, sharding, Ray).

Knows measuring and below; never analysis or the CLI.
"""
