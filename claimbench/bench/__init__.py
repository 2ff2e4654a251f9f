"""Benchmarks' library: the serving benchmark behind `claimbench bench` (serving.py), and the
peer comparisons benchmarks/engine_vs_vllm.py stores (peers.py), read as series over nights
(peer_history.py). Not experiment helpers: no claim's design hash reaches them."""
