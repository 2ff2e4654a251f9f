"""Arithmetic over what an engine recorded or how it lays out memory, with no engine run:
vLLM's serving metrics (``serving_summary``), per-tenant service and the service gap
(``service``), KV and weight capacity in the engine's byte layout (``capacity``), and the
padding and compiled programs of a bucket policy (``bucket_policies``)."""
