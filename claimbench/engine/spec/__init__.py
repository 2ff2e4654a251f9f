"""Speculative decoding: proposers (a draft model, n-gram lookup), the draft model's runner and
steps, and verification."""
