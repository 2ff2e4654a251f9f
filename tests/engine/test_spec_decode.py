"""Speculative decoding's pieces without an engine: n-gram lookup, exact acceptance, the
multi-token append and the block manager's trim."""

import dataclasses

import jax
import numpy as np
import pytest
from engine_helpers import make_request

from claimbench.engine.kv.block_manager import BlockManager
from claimbench.engine.spec.spec_decode import propose_ngram
from claimbench.engine.worker.acceptance import accept
from claimbench.engine.worker.sampler import SamplingBatch, sample

accept_jit = jax.jit(accept)


def batch(num_seqs, temperature=0.0, seeds=None):
    return SamplingBatch(
        temperature=np.full(num_seqs, temperature, np.float32),
        top_k=np.zeros(num_seqs, np.int32),
        top_p=np.ones(num_seqs, np.float32),
        seeds=np.arange(num_seqs, dtype=np.uint32) if seeds is None else seeds,
        output_index=np.zeros(num_seqs, np.int32),
        all_greedy=np.asarray(temperature == 0.0),
    )


def test_ngram_proposes_what_followed_the_longest_most_recent_match():
    # Suffix [7, 8] (n = 2) occurred twice; the most recent is followed by 9, 1, 7.
    assert propose_ngram([7, 8, 5, 0, 7, 8, 9, 1, 7, 8], k=3) == [9, 1, 7]
    # Only the 1-gram [4] matches (min_n = 1): what followed it, cut at k.
    assert propose_ngram([4, 5, 6, 2, 4], k=2) == [5, 6]
    # A match needs at least min_n tokens; nothing repeats here.
    assert propose_ngram([1, 2, 3], k=4) == []
    assert propose_ngram([3, 3], k=4, min_n=2) == []
    # The longest n wins over a more recent shorter match: [1, 2, 3] -> 4, not 2 -> 9.
    assert propose_ngram([1, 2, 3, 4, 2, 9, 1, 2, 3], k=1, max_n=3) == [4]
    # Up to k tokens: fewer when the match is near the end.
    assert propose_ngram([5, 6, 5], k=4) == [6, 5]


def test_greedy_acceptance_lengths_differ_per_sequence():
    # Vocab 6, k = 3. The target's argmax at positions 0..3 of every row is 1, 2, 3, 4.
    logits = np.full((4, 4, 6), -5.0, np.float32)
    for j, token in enumerate((1, 2, 3, 4)):
        logits[:, j, token] = 5.0
    drafts = np.array(
        [
            [5, 2, 3],  # wrong at once: accept 0, emit the target's 1
            [1, 2, 0],  # accept 2, then the target's 3 replaces the 0
            [1, 2, 3],  # all 3 accepted, plus the bonus 4
            [1, 5, 5],  # only one real draft token (num_draft 1): accept it, bonus 2
        ],
        np.int32,
    )
    num_draft = np.array([3, 3, 3, 1], np.int32)
    tokens, logprobs, num_accepted = accept_jit(logits, drafts, num_draft, batch(4))
    assert np.asarray(num_accepted).tolist() == [0, 2, 3, 1]
    emitted = [np.asarray(tokens)[i, : a + 1].tolist() for i, a in enumerate([0, 2, 3, 1])]
    assert emitted == [[1], [1, 2, 3], [1, 2, 3, 4], [1, 2]]
    # The model's own log-prob of each token: log softmax of a 5 among five -5s.
    np.testing.assert_allclose(np.asarray(logprobs)[2], -np.log1p(5 * np.exp(-10.0)), atol=1e-6)


def _total_variation(samples, dist):
    counts = np.bincount(samples, minlength=len(dist)) / len(samples)
    return 0.5 * np.abs(counts - dist).sum()


@pytest.mark.slow
@pytest.mark.parametrize("proposer", ["draft", "one-hot", "draft-prefix"])
def test_sampled_tokens_follow_the_target_distribution(proposer):
    # vLLM's rejection-sampler check: a known target p and draft q over 8 tokens; every
    # emitted token must be p-distributed whatever q proposed. "draft-prefix": a draft whose
    # vocabulary is the target's first 6 ids (it never proposes ids 6 and 7).
    rng = np.random.default_rng(0)
    vocab, k, num_samples = 8, 2, 20000
    p = rng.dirichlet(np.ones(vocab))
    q = rng.dirichlet(np.ones(vocab))
    logits = np.broadcast_to(np.log(p), (num_samples, k + 1, vocab)).astype(np.float32)
    if proposer == "draft":
        drafts = rng.choice(vocab, size=(num_samples, k), p=q).astype(np.int32)
    elif proposer == "draft-prefix":
        q = np.concatenate([rng.dirichlet(np.ones(vocab - 2)), np.zeros(2)])
        drafts = rng.choice(vocab, size=(num_samples, k), p=q).astype(np.int32)
    else:  # n-gram: a deterministic guess, q one-hot on it
        drafts = np.full((num_samples, k), int(np.argmax(p)), np.int32)
    num_draft = np.full(num_samples, k, np.int32)
    tokens, _, num_accepted = accept_jit(
        logits, drafts, num_draft, batch(num_samples, temperature=1.0)
    )
    tokens, num_accepted = np.asarray(tokens), np.asarray(num_accepted)
    # Every emitted token, pooled (each position's target is the same p).
    emitted = np.concatenate([tokens[i, : a + 1] for i, a in enumerate(num_accepted)])
    assert 0 < num_accepted.mean() < k  # some drafts accepted, some rejected
    references = rng.dirichlet(np.ones(vocab), size=5)
    small, large = emitted[:200], emitted
    to_p = _total_variation(small, p), _total_variation(large, p)
    to_refs = [(_total_variation(small, r), _total_variation(large, r)) for r in references]
    # Distance to p shrinks like 1/sqrt(n) (100x the samples: ~10x closer); to a random
    # reference it stays near TV(p, r).
    assert to_p[1] < 0.02 and to_p[1] < 0.35 * to_p[0]
    for before, after in to_refs:
        assert after > 5 * to_p[1] and after > 0.5 * before
    # Emitting the draft tokens themselves would not converge to p.
    assert _total_variation(drafts.ravel(), p) > 5 * to_p[1]


def test_append_outputs_stops_at_the_first_stopping_token():
    r = make_request(3, max_tokens=10, stop_token_ids=(42,))
    assert r.append_outputs([5, 42, 6], [0.0] * 3, 1.0, eos_token_ids={2}) == "stop"
    assert r.output_token_ids == [5, 42]  # the 6 after the stop token is dropped
    r = make_request(3, max_tokens=3)
    assert r.append_outputs([5, 6], [0.0] * 2, 1.0, eos_token_ids={2}) is None
    assert r.append_outputs([7, 8, 9], [0.0] * 3, 2.0, eos_token_ids={2}) == "length"
    assert r.output_token_ids == [5, 6, 7] and r.token_times == [1.0, 1.0, 2.0]
    r = make_request(3, max_tokens=10)
    assert r.append_outputs([5, 2, 6], [0.0] * 3, 1.0, eos_token_ids={2}) == "stop"
    assert r.output_token_ids == [5, 2]  # EOS ends it


def test_trim_releases_the_rejected_tail_pages():
    bm = BlockManager(num_pages=8, page_size=4, prefix_caching="shared")
    r = make_request(6)
    bm.allocate(r, 6)
    r.num_computed_tokens = 5  # prompt computed but its last token; then a verify of 1 + 4
    bm.allocate(r, 5)
    assert len(r.block_table) == 3  # room for 10 tokens
    # One draft accepted: 7 tokens, the seventh not computed yet -> two pages kept.
    r.num_computed_tokens = 6
    r.output_token_ids = [9]
    kept = r.block_table[:2]
    assert bm.trim(r, r.num_tokens) == 1
    assert r.block_table == kept and bm.num_used_pages == 2 and bm.tenant_pages["default"] == 2
    assert bm.trim(r, r.num_tokens) == 0
    bm.free(r)
    # Only the one full computed block (tokens 0..3) entered the cache.
    assert bm.pool.num_cached_blocks == 1


def test_sampled_acceptance_emits_the_plain_samplers_tokens_whatever_was_drafted():
    # Each row's emitted tokens are those sample() draws at the same (seed, output index),
    # for any drafts and any number of them: the batch cannot change a seeded request's text.
    rng = np.random.default_rng(3)
    num_seqs, k, vocab = 64, 3, 12
    logits = rng.normal(size=(num_seqs, k + 1, vocab)).astype(np.float32) * 2
    seeds = rng.integers(0, 2**32, size=num_seqs, dtype=np.uint32)
    rows = batch(num_seqs * (k + 1), temperature=0.9, seeds=np.repeat(seeds, k + 1))
    rows = dataclasses.replace(
        rows, output_index=np.tile(np.arange(k + 1, dtype=np.int32), num_seqs)
    )
    plain = np.asarray(sample(logits.reshape(-1, vocab), rows)[0]).reshape(num_seqs, k + 1)
    drafts = plain[:, :k].copy()
    drafts[::2, 1] = (drafts[::2, 1] + 1) % vocab  # every other row's draft 1 is wrong
    for num in (0, 1, k):
        num_draft = np.full(num_seqs, num, np.int32)
        tokens, _, accepted = accept_jit(
            logits, drafts, num_draft, batch(num_seqs, temperature=0.9, seeds=seeds)
        )
        tokens, accepted = np.asarray(tokens), np.asarray(accepted)
        for i in range(num_seqs):
            assert tokens[i, : accepted[i] + 1].tolist() == plain[i, : accepted[i] + 1].tolist()
        assert accepted[1::2].tolist() == [num] * (num_seqs // 2)  # right drafts: all taken
        assert (accepted[::2] <= 1).all()


def test_threefry_draws_are_prefix_consistent():
    # A draft with fewer ids samples under the target's key: its noise on ids below its size
    # must be the target's, or its guesses decouple from the target's draws (acceptance drops;
    # what is emitted would not change).
    key = jax.random.key(11)
    assert (jax.random.gumbel(key, (80,)) == jax.random.gumbel(key, (97,))[:80]).all()
