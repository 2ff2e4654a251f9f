"""Prometheus metrics with vLLM's names and buckets, each labelled with the tenant.

Latencies are observed where the engine runs (its process or thread) from the engine's own
event times (the same definitions as engine/metrics.py: TTFT from arrival, ITL between
consecutive tokens, E2E from arrival to finish). Gauges (running, waiting, KV usage) are
read from an engine snapshot when /metrics is scraped, so serving pays nothing for them
between scrapes.
Each server has its own registry: two servers in one process never share counters.
"""

from __future__ import annotations

from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from claimbench.engine.engine import LLMEngine
from claimbench.engine.outputs import Event, FinishEvent, RejectEvent, TokenEvent
from claimbench.serving.monitoring.labelled_histogram import HistogramSeries, LabelledHistogram
from claimbench.serving.monitoring.metric_totals import MetricTotals, carry_into, totals_of
from claimbench.serving.monitoring.snapshot import EngineSnapshot

# vLLM's buckets (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
TTFT_BUCKETS += (7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
ITL_BUCKETS += (7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0)
E2E_BUCKETS += (60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# Tokens one engine step ran (vLLM's iteration_tokens_total; its buckets follow the batch
# sizes it compiles, these the powers of two our token buckets take).
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _TenantSeries(NamedTuple):
    ttft: HistogramSeries
    itl: HistogramSeries
    e2e: HistogramSeries
    prompt_tokens: Counter
    generation_tokens: Counter


class ServerMetrics:
    def __init__(self, carried: MetricTotals | None = None) -> None:
        """Empty metrics, or ones starting from ``carried`` (a dead engine's, metric_totals)."""
        self.registry = CollectorRegistry()
        r = self.registry
        # Observed per token or request where the engine runs: lock-free (labelled_histogram).
        self.ttft = LabelledHistogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token in seconds.",
            "tenant",
            TTFT_BUCKETS,
            r,
        )
        self.itl = LabelledHistogram(
            "vllm:inter_token_latency_seconds",
            "Inter-token latency in seconds.",
            "tenant",
            ITL_BUCKETS,
            r,
        )
        self.e2e = LabelledHistogram(
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency in seconds.",
            "tenant",
            E2E_BUCKETS,
            r,
        )
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", ["tenant"], registry=r
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            ["tenant"],
            registry=r,
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of finished requests by finish reason.",
            ["tenant", "finished_reason"],
            registry=r,
        )
        self.rejected = Counter(
            "claimbench:requests_rejected",
            "Requests refused at admission.",
            ["tenant"],
            registry=r,
        )
        self.running = Gauge(
            "vllm:num_requests_running",
            "Requests in model execution batches.",
            ["tenant"],
            registry=r,
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting to be processed.", ["tenant"], registry=r
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc",
            "Share of the KV pool's pages held (1 = full); per tenant, its own references.",
            ["tenant"],
            registry=r,
        )
        # Not per tenant: a step's batch is shared. Its count is the engine's steps, its sum
        # the tokens they scheduled (a client reads the batch's fill from two scrapes).
        self.iteration_tokens = Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            buckets=ITERATION_TOKEN_BUCKETS,
            registry=r,
        )
        self._steps_seen = 0  # the engine's step count when observe() last ran
        self.tenants_seen: set[str] = set()
        self._series: dict[str, _TenantSeries] = {}
        if carried is not None:
            carry_into(self, carried)

    def totals(self) -> MetricTotals:
        """Every counter and per-tenant histogram series's values now (metric_totals.py)."""
        return totals_of(self)

    def observe(self, engine: LLMEngine, events: list[Event]) -> None:
        """Record one step's events and the steps run since the last call (called where the
        engine runs)."""
        self._observe_steps(engine)
        generated: dict[str, int] = {}
        requests, series = engine.requests, self._series
        for event in events:
            request = requests[event.request_id]
            tenant = request.tenant
            if type(event) is RejectEvent:
                self.tenants_seen.add(tenant)
                self.rejected.labels(tenant).inc()
                continue
            mine = series.get(tenant) or self._of(tenant)
            if type(event) is TokenEvent:  # the common case first: a token mid-output
                generated[tenant] = generated.get(tenant, 0) + 1
                index = event.index
                if index:
                    mine.itl.observe(event.time_s - request.token_times[index - 1])
                else:
                    mine.ttft.observe(event.time_s - request.arrival_time)
                    mine.prompt_tokens.inc(request.num_prompt_tokens)
            elif type(event) is FinishEvent:
                mine.e2e.observe(event.time_s - request.arrival_time)
                self.success.labels(tenant, event.reason).inc()
        for tenant, n in generated.items():
            series[tenant].generation_tokens.inc(n)

    def _observe_steps(self, engine: LLMEngine) -> None:
        """The scheduled tokens of every step recorded since the last call. Records may have
        been trimmed meanwhile (``trim_step_records``); their numbers keep counting."""
        records, new = engine.step_records, engine.num_steps - self._steps_seen
        for record in records[max(0, len(records) - new) :]:
            self.iteration_tokens.observe(record.num_scheduled_tokens)
        self._steps_seen = engine.num_steps

    def _of(self, tenant: str) -> _TenantSeries:
        """``tenant``'s labelled series, looked up once (labels() takes a lock each call,
        and the engine observes every token)."""
        series = self._series.get(tenant)
        if series is None:
            self.tenants_seen.add(tenant)
            series = self._series[tenant] = _TenantSeries(
                self.ttft.labels(tenant),
                self.itl.labels(tenant),
                self.e2e.labels(tenant),
                self.prompt_tokens.labels(tenant),
                self.generation_tokens.labels(tenant),
            )
        return series

    def render(self, snapshot: EngineSnapshot) -> bytes:
        """The text exposition, with the gauges set from ``snapshot``."""
        self.tenants_seen |= set(snapshot.running) | set(snapshot.waiting)
        self.tenants_seen |= set(snapshot.tenant_pages)
        # list(): the engine thread may add a tenant meanwhile (a set copy is atomic).
        for tenant in list(self.tenants_seen):  # a tenant gone idle reads 0, not its last
            self.running.labels(tenant).set(snapshot.running.get(tenant, 0))
            self.waiting.labels(tenant).set(snapshot.waiting.get(tenant, 0))
            pages = snapshot.tenant_pages.get(tenant, 0)
            self.kv_usage.labels(tenant).set(pages / snapshot.num_usable_pages)
        return generate_latest(self.registry)
