"""Model quality as the engine serves it: held-out perplexity and top-1 agreement from one
prompt pass (``quality``), the precision-lever experiments' shared steps (``precision``), a
float32 reference computed one layer at a time (``f32_reference``), quantizers that destroy
quality, for the counterfactual (``destructive_quantizers``), and early-exit quality through the
paged cache (``exit_quality``)."""
