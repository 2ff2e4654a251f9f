"""Speculative decoding for experiments: one plain-against-speculative comparison
(``spec_trials``) and the draft model a claim names, its directory, shapes and pin
(``draft_models``)."""
