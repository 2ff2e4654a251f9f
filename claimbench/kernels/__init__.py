"""Attention kernels and KV quantization: the pure-jnp reference, the XLA paths, the native CPU
kernels (C++ through jax.ffi) and the Pallas TPU kernel, each checked against the reference."""
