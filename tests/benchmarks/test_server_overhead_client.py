"""benchmarks/server_overhead.py's load-generator connection: a streamed response read with
a low-water mark comes back whole, and one shorter than the mark (an error) still comes
back, once the mark is dropped."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "server_overhead.py"


def load_benchmark():
    spec = importlib.util.spec_from_file_location("server_overhead_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CHUNKS = [b"data: " + b"x" * 150 + b"\n\n" for _ in range(20)]


async def serve_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked response written a chunk at a time (as a server streams), or a short 400."""
    head = await reader.readuntil(b"\r\n\r\n")
    size = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = await reader.readexactly(size)
    if body == b"bad":
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nnope!")
    else:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for chunk in CHUNKS:
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
    await writer.drain()


def test_low_water_reads_a_stream_whole_and_never_waits_forever_on_a_short_one(monkeypatch):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "LOW_WATER_WAIT_S", 0.3)

    async def run() -> tuple[bytes, str, float]:
        server = await asyncio.start_server(serve_once, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            first = bench.RawConnection("127.0.0.1", port)
            streamed = await first.post("/x", b"ok", at_least=15 * 150)
            assert first.low_water == 1  # dropped once the sure part came
            first.close()
            second = bench.RawConnection("127.0.0.1", port)
            start = asyncio.get_running_loop().time()
            try:
                await second.post("/x", b"bad", at_least=10_000)
                error = ""
            except RuntimeError as e:
                error = str(e)
            waited = asyncio.get_running_loop().time() - start
            second.close()
        return streamed, error, waited

    streamed, error, waited = asyncio.run(run())
    assert streamed == b"".join(CHUNKS)
    assert error.startswith("HTTP 400") and "nope!" in error
    assert waited < 5  # the mark was dropped after 0.3 s, not kept until the end
