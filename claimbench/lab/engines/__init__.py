"""The engines an experiment builds and the arms it compares: the engines of a run and of
tpu-check (``engine_settings``), the ``counterfactual`` param (``counterfactuals``), arms that
take turns within every trial (``interleaved_arms``), a device of fixed step time
(``slow_device``), and one prompt's completion on an engine of its own (``single_completion``,
`claimbench generate`)."""
