"""Commands over the claims project: list and show claims, run their experiments, score the
results, publish the site, and read the run history and device budget."""
