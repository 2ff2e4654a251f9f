"""TPU without a TPU: the engine's steps compiled ahead of time for TPU chips through libtpu on
a CPU host, the compiled HLO read for copies and bytes, and each claim's engines checked."""
