"""Probes of a running `claimbench serve` as a careless or hostile client would send them.

Each probe prints one line: what it sent, what came back, and the number that matters
(how long a refusal took, another tenant's longest gap between streamed chunks meanwhile,
a stream's time with and without /health/ready loops). The server needs a tenants file
with tenants alice and bob (plain) and tight (token_burst 40); ``--keys`` is a JSON file
of tenant -> API key.

    python benchmarks/server_probes.py --url http://127.0.0.1:8000 --keys keys.json \\
        [--probe oversize --probe stops ...]

The ``top_k`` probe goes last: on a server without bounds on it, it ends the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import time
from pathlib import Path

import httpx

MODEL = "claimbench-tiny"
PROBES = (
    "oversize",
    "stops",
    "ready",
    "health_loops",
    "bucket",
    "metrics_stop",
    "headers",
    "slowloris",
    "metrics_open",
    "top_k",
)


class Probe:
    def __init__(self, url: str, keys: dict[str, str]) -> None:
        self.url = url
        self.keys = keys

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=120)

    async def stream_gaps(self, tenant: str, max_tokens: int, started: asyncio.Event) -> dict:
        """A streamed completion's chunk times: its longest gap and its whole time."""
        body = {
            "model": MODEL,
            "prompt": "def main():\n    ",
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
        }
        times = []
        t0 = time.perf_counter()
        async with (
            self.client() as client,
            client.stream(
                "POST", "/v1/completions", json=body, headers=self.headers(tenant)
            ) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    times.append(time.perf_counter())
                    started.set()
        started.set()
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        return {"max_gap_s": max(gaps, default=0.0), "total_s": time.perf_counter() - t0}

    async def during_stream(self, send) -> tuple[dict, dict]:
        """``send()`` (timed) while bob streams; (its result, bob's stream)."""
        started = asyncio.Event()
        stream = asyncio.create_task(self.stream_gaps("bob", 200, started))
        await started.wait()
        t0 = time.perf_counter()
        result = await send()
        result["time_s"] = round(time.perf_counter() - t0, 3)
        return result, await stream

    async def post(self, body: bytes | dict, tenant: str = "alice") -> dict:
        async with self.client() as client:
            kwargs = {"json": body} if isinstance(body, dict) else {"content": body}
            headers = self.headers(tenant) | {"content-type": "application/json"}
            try:
                r = await client.post("/v1/completions", headers=headers, **kwargs)
            except httpx.HTTPError as e:
                return {"status": f"{type(e).__name__}"}
        return {
            "status": r.status_code,
            "body": r.text[:160],
            "retry_after": r.headers.get("retry-after"),
        }

    async def oversize(self) -> str:
        prompt = "x = 1\n" * (10 * 2**20 // 6)
        body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 4}).encode()
        result, stream = await self.during_stream(lambda: self.post(body))
        return (
            f"10 MB prompt: {result['status']} in {result['time_s']} s; bob's longest gap "
            f"{stream['max_gap_s']:.3f} s"
        )

    async def stops(self) -> str:
        body = {
            "model": MODEL,
            "prompt": "def f():",
            "max_tokens": 32,
            "stop": [f"never-{i}" for i in range(200_000)],
        }
        result, stream = await self.during_stream(lambda: self.post(body))
        return (
            f"200,000 stop strings: {result['status']} in {result['time_s']} s; bob's longest "
            f"gap {stream['max_gap_s']:.3f} s"
        )

    async def ready(self, path: str = "/health/ready") -> str:
        alone = await self.stream_gaps("alice", 128, asyncio.Event())
        stop = asyncio.Event()
        counts = {"checks": 0}

        async def loop() -> None:
            async with self.client() as client:
                while not stop.is_set():
                    await client.get(path)
                    counts["checks"] += 1

        async with self.client() as client:
            before = _golden_runs(await client.get("/metrics", headers=self.headers("alice")))
        loops = [asyncio.create_task(loop()) for _ in range(32)]
        await asyncio.sleep(0.5)
        loaded = await self.stream_gaps("alice", 128, asyncio.Event())
        stop.set()
        await asyncio.gather(*loops)
        await asyncio.sleep(0.5)
        async with self.client() as client:
            after = _golden_runs(await client.get("/metrics", headers=self.headers("alice")))
        return (
            f"{path} x32 loops: alice's 128-token stream {alone['total_s']:.2f} s alone, "
            f"{loaded['total_s']:.2f} s beside them ({counts['checks']} checks answered, "
            f"{after - before:.0f} golden generations run)"
        )

    async def health_loops(self) -> str:
        """The control for ``ready``: as many loops on /health (no engine work at all), so
        what remains is the cost of answering HTTP (and of the loops themselves, when they
        run on the server's host)."""
        return await self.ready("/health")

    async def bucket(self) -> str:
        body = {"model": MODEL, "prompt": "def f():", "max_tokens": 100}
        r = await self.post(body, tenant="tight")
        return (
            f"never fits tight's bucket (40): {r['status']} Retry-After={r['retry_after']} "
            f"{r['body'][:100]!r}"
        )

    async def metrics_stop(self) -> str:
        greedy = {
            "model": MODEL,
            "prompt": "def f():",
            "max_tokens": 12,
            "temperature": 0,
            "ignore_eos": True,
        }
        async with self.client() as client:
            headers = self.headers("alice")
            before = _count(await client.get("/metrics", headers=headers), "stop")
            text = (await client.post("/v1/completions", headers=headers, json=greedy)).json()
            stop = text["choices"][0]["text"][2:4]  # it occurs: the stop string ends it
            r = await client.post(
                "/v1/completions", headers=headers, json={**greedy, "stop": [stop]}
            )
            reason = r.json()["choices"][0]["finish_reason"]
            await asyncio.sleep(0.5)
            after = _count(await client.get("/metrics", headers=headers), "stop")
        return f"stop-string finish ({reason}): /metrics stop count {before} -> {after}"

    async def headers_probe(self) -> str:
        big = "a" * (8 * 2**20)
        async with self.client() as client:
            t0 = time.perf_counter()
            try:
                r = await client.get("/health", headers={"x-big": big})
                status = r.status_code
            except httpx.HTTPError as e:
                status = type(e).__name__
        return f"8 MB header: {status} in {time.perf_counter() - t0:.2f} s"

    async def slowloris(self) -> str:
        host, port = re.match(r"http://([^:]+):(\d+)", self.url).groups()
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(1.0)
        t0 = time.perf_counter()
        closed_after = None
        while time.perf_counter() - t0 < 20:
            try:
                if sock.recv(1024) == b"":
                    closed_after = time.perf_counter() - t0
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.perf_counter() - t0
                break
        sock.close()
        held = f"closed after {closed_after:.1f} s" if closed_after else "still open after 20 s"
        return f"slowloris (headers never finished): {held}"

    async def metrics_open(self) -> str:
        async with self.client() as client:
            r = await client.get("/metrics")
        return f"/metrics without a key: {r.status_code}"

    async def top_k(self) -> str:
        body = {"model": MODEL, "prompt": "def f():", "max_tokens": 4, "top_k": 2147483648}
        bad = await self.post(body)
        await asyncio.sleep(2.0)
        after = await self.post({"model": MODEL, "prompt": "def f():", "max_tokens": 4}, "bob")
        async with self.client() as client:
            health = (await client.get("/health")).status_code
        return (
            f"top_k=2147483648: {bad['status']}; another tenant's request then "
            f"{after['status']}; /health {health}"
        )


def _golden_runs(response: httpx.Response) -> float:
    """Golden completions the server has run (its health tenant's finished requests)."""
    found = re.findall(
        r'vllm:request_success_total{[^}]*tenant="_health"[^}]*} (\S+)', response.text
    )
    return sum(float(v) for v in found)


def _count(response: httpx.Response, reason: str) -> float:
    pattern = rf'vllm:request_success_total{{finished_reason="{reason}",tenant="alice"}} (\S+)'
    found = re.search(pattern, response.text)
    pattern_b = rf'vllm:request_success_total{{tenant="alice",finished_reason="{reason}"}} (\S+)'
    found = found or re.search(pattern_b, response.text)
    return float(found.group(1)) if found else 0.0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--keys", type=Path, required=True)
    parser.add_argument("--probe", action="append", choices=PROBES)
    args = parser.parse_args()
    probe = Probe(args.url, json.loads(args.keys.read_text()))
    for name in args.probe or PROBES:
        method = probe.headers_probe if name == "headers" else getattr(probe, name)
        print(await method(), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
