"""Run under the vLLM environment's python (scripts/setup_vllm.sh), not ours: vLLM's offline
``LLM.generate`` from text on one checkpoint, greedy, its default stop ids.

    python vllm_text_worker.py MODEL_DIR JOB.json OUT.json

JOB.json: {"prompts": [text, ...], "max_tokens": N, "max_model_len": M}. OUT.json: per
prompt, the prompt ids vLLM's tokenizer gave, the output ids, the text and the finish
reason. Offline, because ``vllm serve`` dies importing on some AVX2 hosts (vLLM 0.32).
"""

from __future__ import annotations

import json
import sys


def main(model: str, job_path: str, out_path: str) -> None:
    from vllm import LLM, SamplingParams

    with open(job_path) as f:
        job = json.load(f)
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
    with open(out_path, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
