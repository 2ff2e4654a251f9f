"""The scoring core: the claims file, the experiment registry, the run context, the results
store, design hashes and run checks, scoring, intervals and calibration."""
