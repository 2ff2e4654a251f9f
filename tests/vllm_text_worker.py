"""Run under the vLLM environment's python (scripts/setup_vllm.sh), not ours: vLLM's offline
``LLM.generate`` from text on each of several checkpoints in turn, greedy, its default stop
ids; one process for all of them, so vLLM is imported once.

    python vllm_text_worker.py JOB.json OUT.json

JOB.json: {"models": [dir, ...], "prompts": [text, ...], "max_tokens": N, "max_model_len":
M}. OUT.json: {dir: per prompt, the prompt ids vLLM's tokenizer gave, the output ids, the
text and the finish reason}. Offline, because ``vllm serve`` dies importing on some AVX2 hosts
(vLLM 0.32).
"""

from __future__ import annotations

import gc
import json
import sys


def generate(model: str, job: dict) -> list[dict]:
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=model,
        dtype="float32",
        max_model_len=job["max_model_len"],
        enable_prefix_caching=False,
        seed=0,
    )
    sampling = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"])
    outs = llm.generate(job["prompts"], sampling, use_tqdm=False)
    rows = [
        {
            "prompt_token_ids": list(out.prompt_token_ids),
            "token_ids": list(out.outputs[0].token_ids),
            "text": out.outputs[0].text,
            "finish_reason": out.outputs[0].finish_reason,
        }
        for out in outs
    ]
    # The next checkpoint gets a fresh engine: this one's engine process is stopped first.
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return rows


def main(job_path: str, out_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    results = {model: generate(model, job) for model in job["models"]}
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
