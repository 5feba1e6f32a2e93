"""Sweeps: a grid of models x datasets x prompt types x attacks run as jobs sharing one
session; resumable, shardable across machines (``sharding``) or run on Ray
(``ray_executor``); ``estimate`` says what a grid will cost before it runs."""
