"""Measuring: turning prompts into scores with their uncertainty.

``settings`` (what a measurement is made under), ``requests`` (prompt + sample -> request),
``evaluator`` (score one prompt text over the samples, with exact early stopping),
``early_stop``, ``statistics`` (intervals, paired tests, APDR), ``records`` (the one record
type, with its kind), ``workbench`` (the one owner of measuring: task, samples, few-shot
and mode decided once), ``protocol`` (rank prompts, attack the top k) and ``holdout``.

Knows the serving core, tasks and the attacks' seam; never runs, analysis or the CLI.
"""
