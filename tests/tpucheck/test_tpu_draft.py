"""A speculative engine's draft step compiled for a TPU chip ahead of time, beside the target's."""

from __future__ import annotations

import pytest

from claimbench.engine.config import EngineConfig
from claimbench.models.checkpoint import default_draft_path, read_config
from claimbench.tpucheck.claim_engines import ClaimEngine
from claimbench.tpucheck.claims import _check_engine
from claimbench.tpucompile import check as tpu_check
from claimbench.tpucompile.draft import draft_pool_bytes

pytestmark = pytest.mark.skipif(
    tpu_check.libtpu_unavailable() is not None, reason="libtpu not installed"
)


@pytest.mark.slow
def test_the_draft_step_is_compiled_and_counted_with_the_target() -> None:
    name, target = tpu_check.resolve_model("claimbench-tiny")
    options = dict(
        speculative="draft",
        num_spec_tokens=4,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=160,
        prefix_caching="off",
    )
    checked = _check_engine(ClaimEngine("c", "speculative", options), "v6e", name, target)
    assert checked.ok, checked.error
    draft = checked.draft
    # Its own pool: every one of the 8 slots at 160 tokens (10 pages), and the null page.
    expected = draft_pool_bytes(read_config(default_draft_path()), EngineConfig(**options))
    assert draft.kv_pool_bytes == expected and draft.full_cache_copies == 0
    assert 0 < draft.weight_bytes < checked.bucket.weight_bytes
    # Both steps' arguments stay resident: the engine's size counts the draft's as well.
    alone = checked.bucket.total_bytes - checked.bucket.temp_bytes
    assert checked.resident_bytes == alone + draft.total_bytes - draft.temp_bytes
