"""benchmarks/attention_kernel.py runs at a tiny size, times the XLA and native paths over rotating
layer pools, and sets the native decode kernel, timed alone, against the read ceilings
(contiguous, and the step's own pages in the kernel's order) and against its own rate with its
KV in the caches (benchmarks/decode_ceiling.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from claimbench.kernels import native_attention

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "attention_kernel.py"


TINY = [
    *("--num-q-heads", "4", "--num-kv-heads", "2", "--head-dim", "16", "--decode-seqs", "3"),
    *("--context-len", "40", "--chunk-len", "24", "--prefill-seqs", "2", "--iters", "2"),
    *("--layers", "2"),
]
BATCHES = ("decode-heavy", "prefill-heavy", "decode-only")


def run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("kv_dtype", ["f32", "int8"])
def test_attention_benchmark_runs_side_by_side(kv_dtype):
    proc = run("--kv-dtype", kv_dtype, *TINY, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    impls = {(r["batch"], r["impl"]) for r in report["results"]}
    expected = {"xla"} | ({"native"} if native_attention.unavailable_reason() is None else set())
    assert impls == {(b, i) for b in BATCHES for i in expected}
    assert all(r["ms"] > 0 and r["bytes_moved"] > 0 for r in report["results"])
    # 3 decodes over the context lengths the script draws, each KV row 2 heads x 2 x 16 values.
    row_bytes = 2 * 2 * 16 * (4 if kv_dtype == "f32" else 1) + (
        2 * 2 * 4 if kv_dtype == "int8" else 0
    )
    decode_only = next(r for r in report["results"] if r["batch"] == "decode-only")
    kv_bytes = report["rotation"]["decode_kv_bytes"]
    assert kv_bytes % row_bytes == 0 and report["rotation"]["layers"] == 2
    # The 3 new rows written, and q (3 tokens x 4 heads x 16, f32 with f32 KV, else bf16) read
    # and its output written.
    q_bytes = 3 * 4 * 16 * (4 if kv_dtype == "f32" else 2)
    assert decode_only["bytes_moved"] == kv_bytes + 3 * row_bytes + 2 * q_bytes
    assert report["host"]["cores"] >= 1


@pytest.mark.slow
@pytest.mark.skipif(native_attention.unavailable_reason() is not None, reason="no native kernels")
def test_read_ceiling_and_the_decode_kernel_fraction_of_it():
    proc = run("--kv-dtype", "f32", *TINY, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    ceiling = report["read_ceiling"]
    assert ceiling["bytes"] == report["rotation"]["decode_kv_bytes"]
    assert set(ceiling["gb_per_s"]) == {"1", "2"} and min(ceiling["gb_per_s"].values()) > 0
    # The kernel is timed on each thread count and set against the read on as many threads.
    assert set(ceiling["kernel_ms"]) == {"1", "2"}
    kv = {t: ceiling["bytes"] / (ms / 1e3) / 1e9 for t, ms in ceiling["kernel_ms"].items()}
    assert ceiling["kernel_kv_gb_per_s"] == pytest.approx(kv)
    assert ceiling["native_decode_kernel_ms"] == ceiling["kernel_ms"]["2"]
    assert ceiling["native_decode_kv_gb_per_s"] == pytest.approx(kv["2"])
    for threads, rate in ceiling["gb_per_s"].items():
        assert ceiling["fraction"][threads] == pytest.approx(kv[threads] / rate)
    assert set(ceiling["paged_gb_per_s"]) == {"1", "2"}
    for threads, rate in ceiling["paged_gb_per_s"].items():
        assert ceiling["paged_fraction"][threads] == pytest.approx(kv[threads] / rate)
    text = run("--kv-dtype", "f32", *TINY)
    assert text.returncode == 0, text.stderr[-2000:]
    assert "host: " in text.stdout and "2 layer pools in turn" in text.stdout
    fractions = [ln for ln in text.stdout.splitlines() if "GB/s of KV =" in ln]
    assert len(fractions) == 4 and all(" of it" in ln for ln in fractions)
    assert [ln.split()[0] for ln in fractions] == ["contiguous"] * 2 + ["paged"] * 2
    # TINY's 3 sequences of under 40 tokens fit half of any L3 together.
    assert ceiling["in_cache"]["seqs"] == 3 and ceiling["in_cache"]["bytes"] == ceiling["bytes"]
    lines = text.stdout.splitlines()
    assert any(ln.startswith("the kernel with its KV in the caches (3 of") for ln in lines)


def test_the_paged_ceiling_reads_the_pages_a_decode_step_reads():
    # Three sequences of 5, 16 and 17 tokens over 4-token pages: 2, 4 and 5 pages of their
    # page-table rows, in row order; the rows' unused tails are not read.
    table = np.array([[9, 3, 0, 0, 0, 0], [1, 2, 8, 7, 0, 0], [4, 5, 6, 10, 11, 12]], np.int32)
    md = SimpleNamespace(page_indices=table, kv_lens=np.array([5, 16, 17], np.int32))
    cache = SimpleNamespace(pages=np.zeros((13, 4, 2, 8), np.float32))
    pages = decode_ceiling().step_pages([None, None, None, cache, md])
    assert pages.tolist() == [9, 3, 1, 2, 8, 7, 4, 5, 6, 10, 11]


def test_in_cache_takes_the_first_sequences_whose_kv_fits_half_the_l3():
    fit = decode_ceiling().in_cache_seqs
    # Rows of 100 bytes, an L3 of 2,000: half is 1,000 bytes, 10 rows.
    assert fit([4, 6, 1], 100, 2_000) == 2  # 4 + 6 rows fit exactly; the 11th does not
    assert fit([3, 3, 3], 100, 2_000) == 3  # all of them
    assert fit([11, 1], 100, 2_000) == 1  # one at least, even when it does not fit
    assert fit([2, 20, 1], 100, 2_000) == 1  # the first sequences only, in order


def test_the_kernel_pass_is_the_decode_kernel_on_each_pool_in_turn():
    if native_attention.unavailable_reason() is not None:
        pytest.skip("no native kernels")
    import jax
    import jax.numpy as jnp

    from claimbench.kernels.kv_quant import LayerKV
    from claimbench.kernels.metadata import AttentionMetadata

    # Two sequences of 5 and 3 tokens over 4-token pages, two pools of different values.
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.standard_normal((2, 4, 8)), jnp.float32)
    k = jnp.zeros((2, 2, 8), jnp.float32)
    md = AttentionMetadata(
        slot_mapping=jnp.asarray([4 + 0, 12 + 2], jnp.int32),
        cu_q_lens=jnp.asarray([0, 1, 2], jnp.int32),
        kv_lens=jnp.asarray([5, 3], jnp.int32),
        page_indices=jnp.asarray([[2, 1], [3, 0]], jnp.int32),
        num_seqs=jnp.asarray([2], jnp.int32),
        distribution=jnp.asarray([2, 2, 2], jnp.int32),
    )
    pools = [LayerKV(jnp.asarray(rng.standard_normal((4, 4, 4, 8)), jnp.float32), None)
             for _ in range(2)]  # fmt: skip
    got = decode_ceiling().kernel_pass([q, k, k, pools[0], md], pools, 0.5)()
    qg = q.reshape(2, 2, 2, 8)
    expected = jnp.zeros(qg.shape, jnp.float32)
    for pool in pools:
        expected = expected + native_attention.paged_decode_attention(
            qg + 1e-9 * expected, pool, md, jnp.float32, 0.5, None, None
        )
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6, atol=1e-6)
    one = native_attention.paged_decode_attention(qg, pools[1], md, jnp.float32, 0.5, None, None)
    assert not np.allclose(np.asarray(got), 2 * np.asarray(one))  # each pool, not one twice
    jax.block_until_ready(got)


def decode_ceiling():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import decode_ceiling
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return decode_ceiling


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--layers", "--iters"])
def test_bad_counts_are_one_line(flag):
    proc = run(flag, "0")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == f"{flag} must be >= 1, got 0"
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("order", ["random", "adjacent"])
def test_page_order_puts_each_sequence_s_pages_in_a_run_or_scatters_them(order):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import attention_kernel
    finally:
        sys.path.remove(str(SCRIPT.parent))
    args = SimpleNamespace(
        page_size=4, num_q_heads=2, num_kv_heads=1, head_dim=8, kv_dtype="f32", page_order=order
    )
    md = attention_kernel.build_step(args, [1] * 6, [24] * 6, seed=0)[4]
    table = np.asarray(md.page_indices)
    assert sorted(table.ravel().tolist()) == list(range(1, 37))  # every page once, null page not
    steps = np.diff(table, axis=1)
    if order == "adjacent":
        assert np.all(steps == 1)
    else:
        assert np.mean(steps == 1) < 0.5
