"""Runs: what a user starts, and where its results go.

``plan`` (everything a run decides, decided before it starts: ``RunPlan``) and ``execute``
(running one, target by target), ``session`` (cache + one scheduler per model, the API's
centre), ``api`` (the synchronous one-call functions), ``prompt_choice``, ``catalog`` (what a
run can use), ``run_folder`` and ``run_results`` (the one writer and layout of run folders),
``sync`` (sync over async, also inside Jupyter) and ``sweep`` (grids of jobs: plan, config,
runner, estimate, checks, sharding, Ray).

Knows measuring and below; never analysis or the CLI.
"""
