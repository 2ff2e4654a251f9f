"""The device step: the model runner, the step batch and its buckets, the sampler, tensor
parallel sharding and the overlapped (async) step."""
