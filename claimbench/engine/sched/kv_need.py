"""The KV slots a request may ever hold: one rule for admission and allocation.

Admission refuses a request whose pages at full length cannot fit the pool (or its tenant's
quota), and allocation reserves pages up front under the reserve modes. Both must count the
same slots, or a request is accepted that allocation can never place, and (without quotas)
it blocks every request queued behind it. So both read ``num_kv_slots``.
"""

from __future__ import annotations

from claimbench.engine.config import EngineConfig
from claimbench.engine.request import Request


def num_kv_slots(cfg: EngineConfig, request: Request) -> int:
    """KV slots ``request`` may hold at full length under ``cfg.kv_allocation``.

    paged and reserve_request: prompt + max_tokens - 1, since the last sampled token ends
    the request before any step writes its K/V (draft tokens never run past it: a proposer
    drafts at most the outputs left after the verify step's own token). reserve_max: every
    slot of max_model_len, as a server that reserves the model's maximum length does."""
    if cfg.cache.kv_allocation == "reserve_max":
        return cfg.scheduler.max_model_len
    return request.max_total_tokens - 1
