"""A running `claimbench serve`, seen from outside: its readiness and per-tenant metrics.

The URL is the operator's (`claimbench mcp --server-url`), never an agent's: a tool that
fetched any URL it was given would let an agent reach whatever this host can reach.
"""

from __future__ import annotations

from collections import defaultdict

from claimbench.ops.outputs import Health, Metrics, TenantMetrics

TIMEOUT_S = 30.0  # readiness generates a short completion: seconds on a busy CPU


def health(base_url: str) -> Health:
    """GET /health/ready; ready only on 200. httpx.HTTPError when the server cannot be reached."""
    import httpx

    url = base_url.rstrip("/") + "/health/ready"
    response = httpx.get(url, timeout=TIMEOUT_S)
    try:
        body = response.json()
    except ValueError:
        body = response.text[:2000]
    return Health(
        url=url, status_code=response.status_code, ready=response.status_code == 200, body=body
    )


def tenant_metrics(text: str) -> list[TenantMetrics]:
    """Prometheus exposition text -> per tenant, each tenant-labelled sample's value (histogram
    buckets left out: _count and _sum say how many and how long; other labels join the name)."""
    from prometheus_client.parser import text_string_to_metric_families

    per_tenant: dict[str, dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            tenant = sample.labels.get("tenant")
            if tenant is None or sample.name.endswith(("_bucket", "_created")):
                continue
            others = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "tenant")
            name = f"{sample.name}{{{others}}}" if others else sample.name
            per_tenant[tenant][name] = float(sample.value)
    return [
        TenantMetrics(tenant=t, samples=dict(sorted(s.items())))
        for t, s in sorted(per_tenant.items())
    ]


def metrics(base_url: str, key: str | None = None) -> Metrics:
    """GET /metrics (with ``key`` as its Bearer key when the server has one), summarized per
    tenant. httpx.HTTPError when the server cannot be reached or refuses."""
    import httpx

    url = base_url.rstrip("/") + "/metrics"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.get(url, timeout=TIMEOUT_S, headers=headers)
    response.raise_for_status()
    return Metrics(url=url, tenants=tenant_metrics(response.text))
