"""TPU without a TPU: the engine's step (and a draft model's) compiled ahead of time for TPU
chips through libtpu on any host, the compiled HLO read for copies, collectives and bytes, and
a KV pool sized from a chip's HBM by that compile (pool_fit.py)."""
