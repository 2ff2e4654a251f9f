"""The scoring core: the claims file, the experiment registry, the run context, the results
store and what a run records of its provenance, design hashes and run checks, scoring,
intervals and calibration."""
