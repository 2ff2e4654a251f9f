"""What a fresh process or the host shows: one cold start run as its own process
(``cold_start_probe``), XLA compilations from JAX's monitoring events (``compile_events``), the
device's sustained memory bandwidth and matmul rate (``memory_probe``), and a process's
children and CPU seconds from /proc (``processes``)."""
