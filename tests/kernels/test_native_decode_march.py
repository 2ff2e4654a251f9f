"""The native decode kernels as built for another CPU than this one (CLAIMBENCH_NATIVE_MARCH).

On an AVX-512 host the default build instantiates the decode loops with 16-lane vectors only;
built with ``-march=x86-64-v3`` (AVX2 and FMA: 8-lane registers, 16 of them) they take the
AVX2 shapes, QueryState's 8-lane dots and value passes among them. That build runs in a
subprocess (one process registers one library) and every decode loop is checked there against
the XLA path, on the engine's page size and on contexts that end mid-page.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from claimbench.kernels.native.build import FLAGS, MARCH_ENV, compile_flags

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler: the native kernel cannot be built here",
)


def test_the_march_override_replaces_native_only(monkeypatch):
    monkeypatch.delenv(MARCH_ENV, raising=False)
    assert compile_flags() == FLAGS
    monkeypatch.setenv(MARCH_ENV, "x86-64-v3")
    flags = compile_flags()
    assert "-march=x86-64-v3" in flags and "-march=native" not in flags
    assert [f for f in flags if not f.startswith("-march")] == [
        f for f in FLAGS if not f.startswith("-march")
    ]


# Run in a fresh process built for AVX2: each loop against xla_decode, head_dim 64 and 128,
# groups 1, 2 and 4, 16-token pages, contexts of 1 token up to 5 pages, some ending mid-page.
CHECK = """
import os, sys
import jax, jax.numpy as jnp, numpy as np
from claimbench.kernels import native_attention
from claimbench.kernels.kv_quant import LayerKV
from claimbench.kernels.metadata import NULL_PAGE, AttentionMetadata
from claimbench.kernels.xla_decode import decode_attention

assert native_attention.unavailable_reason() is None, native_attention.unavailable_reason()
# The library says what it was built for, not what the CPU could run.
assert native_attention.built_vector_isa() == "avx2", native_attention.built_vector_isa()
rng = np.random.default_rng(0)
page_size, pages_per_seq, num_pages = 16, 5, 64
lens = [1, 15, 16, 17, 40, 80, 33]
n = len(lens)
worst = 0.0
for head_dim in (64, 128):
    for num_q_heads, kv_heads in ((2, 2), (4, 2), (8, 2)):
        pages = rng.standard_normal((num_pages, page_size, 2 * kv_heads, head_dim), np.float32)
        table = np.full((n, pages_per_seq), NULL_PAGE, np.int32)
        order = rng.permutation(num_pages)
        used = 0
        for i, length in enumerate(lens):
            k = -(-length // page_size)
            table[i, :k] = order[used : used + k]
            used += k
        md = AttentionMetadata(
            slot_mapping=jnp.zeros(n, jnp.int32),
            cu_q_lens=jnp.arange(n + 1, dtype=jnp.int32),
            kv_lens=jnp.asarray(lens, jnp.int32),
            page_indices=jnp.asarray(table),
            num_seqs=jnp.asarray([n], jnp.int32),
            distribution=jnp.asarray([n, n, n], jnp.int32),
        )
        group = num_q_heads // kv_heads
        q = jnp.asarray(rng.standard_normal((n, kv_heads, group, head_dim), np.float32))
        cache = LayerKV(jnp.asarray(pages), None)
        args = (jnp.float32, head_dim**-0.5, None, None)
        want = np.asarray(decode_attention(q, cache, md, *args))
        for loop in ("page", "page-reg", "page-row", "tiled", "tiled-query", "general"):
            os.environ["CLAIMBENCH_NATIVE_DECODE"] = loop
            got = np.asarray(native_attention.paged_decode_attention(q, cache, md, *args))
            np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5, err_msg=loop)
            worst = max(worst, float(np.max(np.abs(got - want))))
print(f"ok {worst:.2e}")
"""


@pytest.mark.slow
def test_decode_loops_built_for_avx2_match_xla(tmp_path):
    env = dict(os.environ, CLAIMBENCH_NATIVE_DIR=str(tmp_path), JAX_PLATFORMS="cpu")
    env[MARCH_ENV] = "x86-64-v3"
    proc = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("ok")
