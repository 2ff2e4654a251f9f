"""The native kernels' own threads (native/parallel.h): the helpers take work, the number of
threads can be set, and a kernel's output does not depend on how many threads computed it nor
on other calls running at the same time (several virtual devices, independent XLA ops)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_native_attention import LENS, decode_case

from claimbench.kernels import native_attention, native_dense, native_threads
from claimbench.kernels.xla_decode import decode_attention

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernels cannot be built here",
)

SM_SCALE = 0.125


def native_decode(q, cache, md):
    fn = jax.jit(
        lambda q, c, m: native_attention.paged_decode_attention(
            q, c, m, jnp.float32, SM_SCALE, None, None
        )
    )
    return np.asarray(fn(q, cache, md))


def test_set_threads_is_read_back_and_restored():
    before = native_threads.kernel_threads()
    with native_threads.threads(3):
        assert native_threads.kernel_threads() == 3
    assert native_threads.kernel_threads() == before
    with pytest.raises(ValueError, match="at least 1"):
        native_threads.set_kernel_threads(0)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_helpers_take_items(n):
    # Items long enough (0.32 s a call) that a sleeping helper wakes and is scheduled before
    # the caller has run them all, even on a host busy with other tests.
    with native_threads.threads(n):
        assert native_threads.threads_seen(items=64, item_us=5000) == n


def test_decode_output_does_not_depend_on_the_threads():
    q, cache, md = decode_case(LENS * 3, 20, 8, 4, 64, "f32", seed=3)
    outs = {}
    for n in (1, 2, 5):
        with native_threads.threads(n):
            outs[n] = native_decode(q, cache, md)
    xla = np.asarray(decode_attention(q, cache, md, jnp.float32, SM_SCALE, None, None))
    np.testing.assert_allclose(outs[1], xla, rtol=2e-5, atol=2e-5)
    for n in (2, 5):
        np.testing.assert_array_equal(outs[n], outs[1])


def test_dense_output_does_not_depend_on_the_threads():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((130, 96)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((96, 200)), jnp.float32)
    packed = native_dense.pack(w)
    fn = jax.jit(native_dense.dense, static_argnums=2)
    outs = {}
    for n in (1, 2, 5):
        with native_threads.threads(n):
            outs[n] = np.asarray(fn(x, packed, 200))
    np.testing.assert_allclose(outs[1], np.asarray(x) @ np.asarray(w), rtol=1e-4, atol=1e-4)
    for n in (2, 5):
        np.testing.assert_array_equal(outs[n], outs[1])


def test_calls_from_several_threads_at_once_each_get_their_own_answer():
    cases = [decode_case(LENS * 2, 14, 4, 4, 64, "f32", seed=s) for s in range(4)]
    with native_threads.threads(1):
        expected = [native_decode(*case) for case in cases]
    got: dict[int, list[np.ndarray]] = {i: [] for i in range(len(cases))}

    def call(i):
        for _ in range(5):
            got[i].append(native_decode(*cases[i]))

    with native_threads.threads(2):
        workers = [threading.Thread(target=call, args=(i,)) for i in range(len(cases))]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
    for i, outs in got.items():
        assert len(outs) == 5
        for out in outs:
            np.testing.assert_array_equal(out, expected[i])


def test_a_forked_child_gets_helpers_of_its_own():
    # A fork copies only the forking thread: the child starts its helpers again, and no lock a
    # parent's helper held at the fork is left held in the child.
    with native_threads.threads(2):
        assert native_threads.threads_seen(items=64, item_us=5000) == 2  # parent's helpers up
        pid = os.fork()
        if pid == 0:  # the child: no JAX here, only the native library's own threads
            os._exit(0 if native_threads.threads_seen(items=64, item_us=5000) == 2 else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_helper_s_spin_between_calls_is_counted_as_waiting():
    def one_spin() -> float:
        native_threads.threads_seen(items=8, item_us=100)  # the helper is awake
        before = native_threads.waiting_seconds()
        native_threads.threads_seen(items=8, item_us=100)
        time.sleep(0.05)  # no call: the helper spins for its while, then sleeps
        return native_threads.waiting_seconds() - before

    # The spin is counted on the helper's CPU clock: on a host busy with other work the helper
    # may lose its core for part of a spin, so the spin that kept its core is the one read.
    with native_threads.threads(2):
        waited = max(one_spin() for _ in range(5))
    # At least the spin after the call (200 us), at most that and the waits inside the call:
    # a sleeping helper counts nothing.
    assert 150e-6 < waited < 0.02


STOPPED_WHILE_SPINNING = """
import json, os, signal, time
from claimbench.kernels import native_threads
native_threads.set_kernel_threads(2)
native_threads.threads_seen(items=8, item_us=100)  # the helper is up
waiting, cpu = native_threads.waiting_seconds(), time.process_time()
native_threads.threads_seen(items=8, item_us=100)
os.kill(os.getpid(), signal.SIGSTOP)  # the helper is in its spin after the call: stopped too
time.sleep(0.05)  # it finishes its spin, then sleeps
print(json.dumps([native_threads.waiting_seconds() - waiting, time.process_time() - cpu]))
"""


def test_a_spin_the_host_stops_counts_only_the_cpu_it_had():
    # The waiting is subtracted from the process's CPU time: counted in wall time, a spin the
    # host deschedules (here: stops for 0.3 s) counted time the thread never ran, and a round's
    # idle share read above 1.
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WHILE_SPINNING], stdout=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 120
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGCONT)
    out, _ = child.communicate(timeout=120)
    waited, cpu = json.loads(out)
    assert waited < 0.05
    assert waited <= cpu
