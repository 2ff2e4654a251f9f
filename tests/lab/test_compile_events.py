"""JAX's compile events counted over a stretch of work: every program built, whoever asked."""

import jax
import numpy as np

from claimbench.engine.sampling_params import SamplingParams
from claimbench.lab.probes.cold_start_probe import SAMPLING_PATHS, serving_batches
from claimbench.lab.probes.compile_events import CompileCounter


def test_counts_each_program_built_inside_and_nothing_outside():
    def double_plus_one(x):
        return x * 2 + 1

    f = jax.jit(double_plus_one)
    # Host arrays: jnp.ones would build programs of its own (and be counted, rightly).
    with CompileCounter() as counter:
        f(np.ones(3)).block_until_ready()  # a new program
        f(np.ones(3)).block_until_ready()  # the same one, from the in-memory cache
        f(np.ones(5)).block_until_ready()  # a new shape is a new program
    f(np.ones(7)).block_until_ready()  # after the stretch: not counted
    assert counter.num_programs == 2
    # A persistent cache the test run shares may supply a program instead of XLA.
    assert counter.num_compiled + counter.num_cache_hits == 2
    assert counter.names == ["jit(double_plus_one)"] * 2
    assert counter.compile_s > 0


def test_serving_batches_take_every_path_and_hit_the_prefix():
    first, workload = [5, 6, 7, 8], [[9, 10], [11, 12, 13]]
    batches = serving_batches(first, workload, max_tokens=3)
    settings = [s for _, group in batches for s in group]
    # Each sampling setting alone, then all mixed in one batch.
    for options in SAMPLING_PATHS.values():
        expected = SamplingParams(max_tokens=3, ignore_eos=True, **options)
        assert sum(s == expected for s in settings) >= len(workload) + 1
    mixed = batches[len(SAMPLING_PATHS)][1]
    assert len(set(mixed)) == len(SAMPLING_PATHS)
    # The last batch extends the first prompt: its cached blocks are prefix hits.
    assert all(p[: len(first)] == first for p in batches[-1][0])
