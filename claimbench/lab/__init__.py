"""Experiment helpers: what experiments share to build engines, offer load and measure
(precision arms, quality, tenant runs, open-loop load, interleaved arms, speculative trials,
probes, time slicing). Part of every experiment's design hash (harness/design.py), except
lab/figures: what the claim pages draw with, which scoring never reads."""
