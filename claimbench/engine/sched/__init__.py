"""Scheduling policy: the scheduler, queue orderings and preemption victims, virtual token
counters, fairness, admission, per-tenant quotas, the degradation ladder and the tenant table."""
