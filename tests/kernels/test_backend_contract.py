"""Every attention backend checks its inputs the same way (kernels/metadata.py): shapes,
dtypes and options always, metadata values when concrete, each a ValueError naming the
values before any kernel runs; and every backend implements the one contract."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from jax.experimental.pallas import tpu as pltpu
from test_ragged_paged_attention import _bad_inputs

from claimbench.kernels import native_attention, pallas_rpa, reference, xla_rpa
from claimbench.kernels.backend import AttentionBackend
from claimbench.kernels.metadata import AttentionMetadata


def _pallas(*args, **kw):
    return pallas_rpa.ragged_paged_attention(*args, **kw, interpret=pltpu.InterpretParams())


BACKENDS: dict[str, AttentionBackend] = {
    "reference": reference.ragged_paged_attention,
    "xla": xla_rpa.ragged_paged_attention,
    "cpu": native_attention.ragged_paged_attention,
    "pallas": _pallas,
}


def _cases():
    cases = {name: case for name, case in _bad_inputs().items() if name != "knob"}
    (q, k, v, cache, md), _, _ = cases["window"]  # valid arguments, a bad option
    table = md.page_indices.at[0, 0].set(cache.pages.shape[0])  # one page past the pool
    corrupt = AttentionMetadata(
        md.slot_mapping, md.cu_q_lens, md.kv_lens, table, md.num_seqs, md.distribution
    )
    cases["page_id"] = ((q, k, v, cache, corrupt), {}, r"outside \[0, num_pages=5\)")
    cases["metadata_dtype"] = (
        (q, k, v, cache, AttentionMetadata(md.slot_mapping.astype(jnp.int16), *_rest(md))),
        {},
        r"metadata slot_mapping is int16\[5\], expected int32\[5\]",
    )
    return cases


def _rest(md: AttentionMetadata):
    return md.cu_q_lens, md.kv_lens, md.page_indices, md.num_seqs, md.distribution


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", list(_cases()))
def test_every_backend_rejects_bad_inputs_naming_the_values(backend, name):
    args, knobs, message = _cases()[name]
    with pytest.raises(ValueError, match=message):
        BACKENDS[backend](*args, sm_scale=0.1, **knobs)
