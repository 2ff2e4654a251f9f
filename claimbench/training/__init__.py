"""Training and evaluating the shipped models: the tiny Llama, the tiny MoE, exit heads, the
held-out evaluation and fp8 KV scale calibration."""
