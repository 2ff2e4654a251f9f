"""ProcessEngine: the engine loop in a spawned process, as `claimbench serve` runs it.

Messages (protocol.py) are pickled over two one-way pipes. What comes back is read on the
server's event loop (``loop.add_reader`` on the pipe: no reader thread to contend for the
lock). If the engine process dies, the pipe reads end of file: every waiting request and
stream gets EngineStopped at once (engine_client.py).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import struct
import time

from claimbench.serving.engine_loop.engine_client import EngineClient
from claimbench.serving.engine_loop.engine_core import run_engine_core
from claimbench.serving.engine_loop.protocol import (
    CoreInfo,
    CoreOptions,
    Ready,
    StopRequest,
    ToEngine,
)

log = logging.getLogger("claimbench.serving")
READ_SIZE = 1 << 20  # bytes asked of the pipe per read
START_TIMEOUT_S = 900.0  # building and compiling on a busy CPU host takes minutes at worst


class FrameReader:
    """Whole messages out of a non-blocking pipe written by ``Connection.send_bytes``
    (a 4-byte big-endian length, or -1 and an 8-byte one, then the bytes): a message may
    arrive in pieces, and a piece is kept until the rest comes."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def read(self, fd: int) -> tuple[list[bytes], bool]:
        """The messages complete after reading everything ``fd`` holds now, and whether
        the writer has closed its end. A read shorter than asked for emptied the pipe:
        no second read (and its error) to learn that; the loop calls again when more
        comes, or the end."""
        while True:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return self.split(), False
            if not chunk:
                return self.split(), True
            self._buffer += chunk
            if len(chunk) < READ_SIZE:
                return self.split(), False

    def split(self) -> list[bytes]:
        """The complete messages at the buffer's front, taken off it."""
        messages, buffer, start = [], self._buffer, 0
        while len(buffer) - start >= 4:
            (size,) = struct.unpack_from("!i", buffer, start)
            header = 4
            if size == -1:
                if len(buffer) - start < 12:
                    break
                (size,) = struct.unpack_from("!Q", buffer, start + 4)
                header = 12
            end = start + header + size
            if len(buffer) < end:
                break
            messages.append(bytes(buffer[start + header : end]))
            start = end
        del buffer[:start]
        return messages


class EngineProcessError(RuntimeError):
    """The engine process could not start (its error, or how it ended)."""


class ProcessEngine(EngineClient):
    """The engine in a spawned process; ``launch()`` (blocking) before serving, ``start()``
    on the event loop that serves, ``shutdown()`` to end it."""

    what = "the engine process"

    def __init__(self, options: CoreOptions) -> None:
        super().__init__(options)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None  # to the engine process (blocking writes)
        self._inbox = None  # from it (read without blocking on the event loop)
        self._frames = FrameReader()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ending = False  # this side is ending the process: its end is no failure
        self._pid: int | None = None  # kept once the process is reaped and released
        self._exitcode: int | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else self._pid

    @property
    def exitcode(self) -> int | None:
        """How the engine process ended (None while it runs); -9 when killed."""
        return self._process.exitcode if self._process is not None else self._exitcode

    @property
    def is_alive(self) -> bool:
        return self._process is not None and self._process.is_alive() and not self._closed

    @property
    def _started(self) -> bool:
        return self._process is not None

    def launch(self, timeout_s: float = START_TIMEOUT_S) -> CoreInfo:
        """Spawn the engine process and wait until it has built, compiled and recorded the
        golden completion. EngineProcessError if it fails or ends first."""
        context = multiprocessing.get_context("spawn")  # JAX is not fork-safe
        # Two one-way pipes: the reading end is non-blocking on the event loop, the
        # writing end stays blocking (a message is never half sent).
        their_inbox, our_outbox = context.Pipe(duplex=False)
        our_inbox, their_outbox = context.Pipe(duplex=False)
        process = context.Process(
            target=run_engine_core,
            args=(self.options, their_inbox, their_outbox),
            name="claimbench-engine",
            daemon=True,  # never outlives the server
        )
        process.start()
        their_inbox.close()
        their_outbox.close()
        self._process, self._conn, self._inbox = process, our_outbox, our_inbox
        deadline = time.monotonic() + timeout_s
        while not our_inbox.poll(0.2):
            if not process.is_alive() or time.monotonic() > deadline:
                self._kill()
                code = process.exitcode
                raise EngineProcessError(f"the engine process ended during start-up ({code})")
        try:
            message = pickle.loads(our_inbox.recv_bytes())
        except EOFError as e:
            self._kill()
            raise EngineProcessError("the engine process ended during start-up") from e
        if not isinstance(message, Ready):
            self._kill(grace_s=10.0)  # it exits by itself after reporting
            raise EngineProcessError(message.message)
        self.info = message.info
        self.heartbeat = time.monotonic()
        return self.info

    def start(self) -> None:
        """Read the engine's messages on the running event loop from now on."""
        self._loop = asyncio.get_running_loop()
        os.set_blocking(self._inbox.fileno(), False)
        self._loop.add_reader(self._inbox.fileno(), self._on_readable)

    async def shutdown(self, timeout_s: float = 30.0) -> None:
        """Abort whatever is still in flight (its events still come), end the process."""
        if self._process is None:
            return
        deadline = time.monotonic() + timeout_s
        self._ending = True  # its end from here on is this side's doing, not a crash
        self._send_quietly(StopRequest())
        # The reader delivers the last events meanwhile; the pipe ends as the process does.
        while (not self._closed or self._process.is_alive()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self._kill()  # reaps it (or ends it, past the deadline)

    def kill(self) -> None:
        """End the engine process now, without draining (what a crash looks like)."""
        if self._process is not None:
            self._process.kill()

    def _send(self, message: ToEngine) -> None:
        self._conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    # -- the event loop's reader ----------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            messages, ended = self._frames.read(self._inbox.fileno())
        except OSError:
            messages, ended = [], True
        self.heartbeat = time.monotonic()
        for message in messages:
            self._handle(pickle.loads(message))
        if ended:
            self._on_closed()

    def _on_closed(self) -> None:
        """The engine process is gone: wake everything that waits on it."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._inbox.fileno())
        if not self._ending and self._process is not None:
            # Not ended by this side: a crash, whatever its code. The pipe can close a moment
            # before the process is reaped, so wait for its exit code briefly.
            self._process.join(1.0)
            code = self._process.exitcode
            self.error = EngineProcessError(f"the engine process ended with exit code {code}")
            log.error("%s", self.error)
        self._fail_waiters()

    def _kill(self, grace_s: float = 0.0) -> None:
        """Reap the engine process, killing it if it has not ended within ``grace_s``."""
        self._ending = True
        process = self._process
        if process is not None and grace_s > 0:
            process.join(grace_s)
        if process is not None and process.is_alive():
            process.kill()
        if process is not None:
            process.join(5)
        self._on_closed()
        for conn in (self._conn, self._inbox):
            if conn is not None:
                conn.close()
        if process is not None and process.exitcode is not None:
            # Process.close releases the two pipes its spawn keeps (its sentinel and the
            # one it sent the process's arguments on); without it each restart leaked both.
            self._pid, self._exitcode = process.pid, process.exitcode
            process.close()
            self._process = None
