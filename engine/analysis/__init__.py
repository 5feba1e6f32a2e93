"""Analyses of prompts and finished runs, as library code (the CLI only calls them).

- ``statistics``: intervals, paired tests, chance flags and APDR (one convention);
- ``report``: tables, plots and the HTML page over run folders;
- ``prompt_eval``: score a prompts file, or clean/adversarial pairs (``pre eval``);
- ``transfer``: adversarial prompts of one model scored on another (``pre transfer``);
- ``defense``: PDR with and without spell correction (``pre defend``);
- ``attention``: which prompt words a model relies on (``pre attention``; needs torch);
- ``commands``: eval, transfer, defense and attention as plans and their runs (what the CLI calls);
- ``scoring`` and ``sources``: what those share (scoring pairs with their
  statistics; reading attack records of earlier runs).

Nothing is imported here, so ``import promptrobust.engine.measuring.statistics``
stays light.
"""
