"""Is the server well: golden-output health, the offline golden check, Prometheus metrics."""
