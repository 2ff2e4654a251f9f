"""The decode-bandwidth-bound experiment: the roofline arithmetic on a hand-sized model, then a
tiny run."""

from __future__ import annotations

import json

import pytest
from tenant_exp_helpers import assert_claim_metrics_recorded, run_tiny, write_checkpoint

from claimbench.hardware.decode_roofline import decode_bytes, weight_storage_bytes
from claimbench.hardware.model_presets import ModelShape
from claimbench.lab.probes.memory_probe import matmul_flops_per_s, stream_bytes_per_s

CLAIM = "decode-bandwidth-bound"
TINY = {
    "engine": {
        "dtype": "float32",
        "page_size": 8,
        "max_num_batched_tokens": 32,
        "max_model_len": 128,
    },
    "batches": [1, 3],
    "prompt_len": 6,
    "output_len": 6,
}
SHAPE = ModelShape(
    name="hand",
    num_layers=2,
    hidden_size=8,
    num_heads=4,
    num_kv_heads=2,
    head_dim=2,
    intermediate_size=16,
    vocab_size=50,
    tie_word_embeddings=True,
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "model")


def test_decode_bytes_count_weights_once_and_each_sequences_kv():
    d = decode_bytes(SHAPE, batch=3, context=10, weight_bytes_per_param=4, kv_bytes_per_element=2)
    # K and V per token: 2 x 2 layers x 2 KV heads x head_dim 2 = 16 values, 32 bytes.
    assert d.kv_read_bytes == 3 * 10 * 32
    assert d.kv_write_bytes == 3 * 32
    assert d.weight_bytes == SHAPE.num_params * 4  # read once, whatever the batch
    # 2 FLOPs per weight per token; QK^T and PV: 4 per cached token per query dim (4 x 2 x 2).
    assert d.flops == 3 * (2 * SHAPE.num_active_params + 4 * 10 * 16)
    assert d.total_bytes == d.weight_bytes + 960 + 96
    with pytest.raises(ValueError, match="batch and context must be >= 1"):
        decode_bytes(SHAPE, batch=0, context=1, weight_bytes_per_param=2, kv_bytes_per_element=2)


def test_weights_are_counted_in_their_storage_width():
    assert weight_storage_bytes("int8", "bfloat16") == 1
    assert weight_storage_bytes("fp8", "float32") == 1
    assert weight_storage_bytes("bf16", "float32") == 4  # the engine computes and stores f32
    assert weight_storage_bytes("bf16", "bfloat16") == 2


def test_probes_reject_sizes_that_would_measure_a_cache():
    with pytest.raises(ValueError, match="num_bytes must be >= 1 MiB"):
        stream_bytes_per_s(num_bytes=4096)
    with pytest.raises(ValueError, match="n must be >= 64"):
        matmul_flops_per_s(n=8)


@pytest.mark.slow
def test_tiny_run_compares_each_batch_with_its_own_roofline(checkpoint):
    ctx = run_tiny(CLAIM, checkpoint, trials=2, base=TINY)
    frame = assert_claim_metrics_recorded(ctx)
    labels = frame["labels"].map(json.loads)
    frame = frame.assign(batch=labels.map(lambda x: x.get("batch")))
    for trial in (0, 1):
        rows = frame[frame["trial"] == trial]
        at = rows[rows["metric"] == "step_over_roofline_at"].set_index("batch")["value"]
        # The claim's metric is the worst batch's ratio.
        worst = rows.loc[rows["metric"] == "step_over_roofline", "value"].item()
        assert worst == pytest.approx(at.max())
        roof = rows[rows["metric"] == "roofline_step_s"].set_index("batch")["value"]
        assert roof[3] > roof[1]  # three sequences' KV to read instead of one
        source = labels[(frame["trial"] == trial) & (frame["metric"] == "roofline_bytes_per_s")]
        assert source.item() == {"source": "measured on this host"}  # a CPU has no spec
    saved = ctx.frames()["steps"]
    # Each batch ran alone: its full-batch decode steps hold exactly that many sequences and
    # nothing was preempted; 5 decode steps follow the prefill's first token.
    for batch in (1, 3):
        steps = saved[(saved["batch"] == batch) & (saved["trial"] == 0)]
        full = steps[(steps["num_decode_seqs"] == batch) & (steps["num_seqs"] == batch)]
        assert len(full) == 5 and steps["num_preempted"].sum() == 0
        assert not steps["overlapped"].any()  # synchronous: device_s is the step's own


@pytest.mark.slow
def test_params_are_checked(checkpoint):
    with pytest.raises(ValueError, match="batches must be a list of positive integers"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, batches=[0])
    with pytest.raises(ValueError, match="output_len must be >= 3"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, output_len=2)
    with pytest.raises(ValueError, match="exceeds max_model_len=128"):
        run_tiny(CLAIM, checkpoint, trials=1, base=TINY, prompt_len=100, output_len=40)
