"""Experiment helpers: what experiments share to build engines, offer load and measure.

Six subpackages, lowest first (each imports only itself and those before it):

- ``metrics/``: arithmetic over an engine's frames and layout, no engine run (vLLM's serving
  metrics, per-tenant service and its gap, KV and weight capacity, bucket padding).
- ``engines/``: the engines an experiment builds and the arms it compares (engine settings,
  the counterfactual switch, interleaved arms, a device of fixed step time, one prompt's
  completion).
- ``load/``: load offered to a served engine and what it met (tenant runs, service rate at
  saturation, open loop, the fixed-step driver, time slicing, serving over HTTP).
- ``quality/``: model quality as served (precision arms, perplexity and top-1 agreement, the
  float32 reference, destructive quantizers, early-exit quality).
- ``probes/``: what a fresh process or the host shows (cold start, compile events, memory
  bandwidth and matmul rate, a process's children and CPU time).
- ``speculative/``: speculative-decoding trials and the draft models they load.

All of them are part of every experiment's design hash (harness/design.py), except
lab/figures: what the claim pages draw with, which scoring never reads."""
