"""The serving engine: ``LLMEngine.step()`` = schedule -> build the step -> run it -> postprocess.

config.py, engine.py and build.py hold the engine itself; its parts live in subpackages:
sched/ (which requests run), kv/ (where their KV lives), worker/ (the device step) and
spec/ (speculative decoding)."""
