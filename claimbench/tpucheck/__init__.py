"""What `tpu-check` compiles for the claims project (through tpucompile/): the profile's model
and engine, each claim's engines and bf16-not-fp16's float32 reference."""
