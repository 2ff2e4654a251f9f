"""Workloads: arrival processes, tenant mixes, length distributions, the held-out corpus and
request traces, all seeded."""
