"""Sweeps: a grid of models x datasets x prompt types x attacks run as jobs sharing one
session; resumable, shardable across machines (``sharding``) or run on Ray
(``ray_executor``, with ``ray_options``); ``estimate`` says what a grid will cost and ``checks``
what cannot run here before it runs; ``plan`` is what a front end calls."""
