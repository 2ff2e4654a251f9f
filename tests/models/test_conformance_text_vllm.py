"""Same text in, same tokens out, against vLLM: its offline ``LLM.generate`` on the random
Llama-3-, Qwen2- and Mixtral checkpoints of text_checkpoints.py gives the prompt ids, greedy
ids and text our engine gives, its stop ids taken from generation_config.json as ours are.

vLLM lives in its own environment (``bash scripts/setup_vllm.sh``; its python from
CLAIMBENCH_VLLM_PYTHON, else ../vllm-venv beside the checkout); without it these tests skip.
Offline, not ``vllm serve``: vLLM 0.32's server dies importing on some AVX2 hosts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from text_checkpoints import LLAMA3, NUM_TOKENS, QWEN2, TEXT, write_checkpoint

from claimbench.engine.build import build_engine
from claimbench.engine.config import EngineConfig
from claimbench.engine.sampling_params import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parents[1] / "vllm_text_worker.py"
PROMPTS = [TEXT, "x = 1  # café ∑ 🐍\n", "  two leading spaces"]
MAX_MODEL_LEN = 256


def vllm_python() -> Path:
    """The benchmark's own choice of the vLLM environment (one source for where it lives)."""
    spec = importlib.util.spec_from_file_location(
        "engine_vs_vllm", ROOT / "benchmarks" / "engine_vs_vllm.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return Path(os.environ.get(module.VLLM_PYTHON_ENV) or module.DEFAULT_VLLM_PYTHON)


def has_vllm(python: Path) -> bool:
    if not python.is_file():
        return False
    return subprocess.run([str(python), "-c", "import vllm"], capture_output=True).returncode == 0


VLLM_PYTHON = vllm_python()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not has_vllm(VLLM_PYTHON),
        reason=f"no vLLM at {VLLM_PYTHON} (bash scripts/setup_vllm.sh installs it)",
    ),
]


ARCHES = {"llama": LLAMA3, "qwen2": QWEN2, "mixtral": QWEN2}  # arch -> the tokenizer family


@pytest.fixture(scope="module")
def checkpoints_and_vllm(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    """arch -> (its checkpoint, vLLM's outputs on it): one vLLM process for all three, so
    vLLM is imported once, not per checkpoint."""
    root = tmp_path_factory.mktemp("text-vllm")
    models = {arch: write_checkpoint(root / arch, arch, family) for arch, family in ARCHES.items()}
    job, out = root / "job.json", root / "out.json"
    job.write_text(
        json.dumps(
            {
                "models": [str(m) for m in models.values()],
                "prompts": PROMPTS,
                "max_tokens": NUM_TOKENS,
                "max_model_len": MAX_MODEL_LEN,
            }
        )
    )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB; these requests need kilobytes
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(WORKER), str(job), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(out.read_text())
    return {arch: (model, theirs[str(model)]) for arch, model in models.items()}


@pytest.mark.parametrize("arch", list(ARCHES))
def test_vllm_offline_gives_our_prompt_ids_and_greedy_text(arch, checkpoints_and_vllm) -> None:
    model, theirs = checkpoints_and_vllm[arch]
    assert theirs[0]["finish_reason"] == "stop"  # TEXT's reply ends on a stop id (checkpoints)
    config = EngineConfig(
        model_path=model,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        kv_pool_bytes=8 * 2**20,
    )
    ours = build_engine(config).generate(
        PROMPTS, SamplingParams(max_tokens=NUM_TOKENS, temperature=0.0)
    )
    for prompt, mine, vllm in zip(PROMPTS, ours, theirs, strict=True):
        assert mine.prompt_token_ids == vllm["prompt_token_ids"], prompt
        assert mine.token_ids == vllm["token_ids"], prompt
        assert mine.finish_reason == vllm["finish_reason"], prompt
        assert same_text(mine.text, vllm["text"], mine.finish_reason), prompt


def same_text(ours: str, theirs: str, finish_reason: str) -> bool:
    """Equal text, but for one known difference: an answer cut at max_tokens inside a
    multi-byte character ends, in ours as in transformers' decode, with U+FFFD for the bytes
    that came; vLLM's incremental detokenizer holds those bytes back and never emits them."""
    if ours == theirs:
        return True
    tail = ours[len(theirs) :]
    return finish_reason == "length" and ours.startswith(theirs) and set(tail) == {"\ufffd"}
