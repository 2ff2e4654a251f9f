"""/metrics costs the engine one page per PAGE_CACHE_S however often it is asked for (keyless
loops on it once starved every stream), yet a client reading it after its request ended
sees that request counted."""

from __future__ import annotations

import asyncio
import dataclasses
import re

import httpx
import pytest
from hardening_helpers import KEYS, MODEL, in_process_server

from claimbench.serving.api.app import create_app
from claimbench.serving.monitoring.metrics_page import MetricsPage


class CountingEngine:
    """The in-process engine, counting the pages /metrics asks it for."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.num_pages = 0

    async def render_metrics(self) -> bytes:
        self.num_pages += 1
        return await self._engine.render_metrics()

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


def generated(text: str) -> float:
    found = re.search(r'^vllm:generation_tokens_total\{tenant="alice"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_metrics_loops_render_one_page_and_a_finished_request_renders_another():
    server = in_process_server()
    engine = CountingEngine(server.state.engine)
    app = create_app(dataclasses.replace(server.state, engine=engine))
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}

    async def scrape_loops() -> list[str]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            together = await asyncio.gather(*(client.get("/metrics") for _ in range(40)))
            one_by_one = [await client.get("/metrics") for _ in range(40)]
        return [r.text for r in together + one_by_one if r.status_code == 200]

    async def complete_then_scrape() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"model": MODEL, "prompt": "x = ", "max_tokens": 3, "ignore_eos": True}
            response = await client.post("/v1/completions", json=body, headers=headers)
            assert response.status_code == 200
            return (await client.get("/metrics")).text

    pages = server.run(scrape_loops())
    assert len(pages) == 80
    assert engine.num_pages == 1  # 80 answers, one page (it was one per call)
    before = generated(pages[-1])
    after = server.run(complete_then_scrape())
    assert engine.num_pages == 2  # the request that ended is on the next page
    assert generated(after) >= before + 3


def test_a_page_is_rendered_again_once_stale_and_a_failed_render_is_not_kept():
    calls = []

    async def render() -> bytes:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("engine gone")
        return b"page %d" % len(calls)

    async def scenario():
        page = MetricsPage(render, cache_s=0.0)  # always stale: every call renders
        assert await page.get() == b"page 1"
        with pytest.raises(RuntimeError):
            await page.get()
        assert await page.get() == b"page 3"
        kept = MetricsPage(render, cache_s=3600.0)
        assert await kept.get(7) == b"page 4"
        assert await kept.get(7) == b"page 4"  # fresh, same version: kept
        assert await kept.get(8) == b"page 5"  # a request ended: rendered again

    asyncio.new_event_loop().run_until_complete(scenario())
    with pytest.raises(ValueError, match="-1"):
        MetricsPage(render, cache_s=-1.0)
