"""The engine's speculation state: who proposes for which running request.

After every step the speculator proposes draft tokens for every running request that is
caught up (``request.spec_token_ids``); the scheduler then gives such a request 1 + k tokens
and the next step verifies them (worker/acceptance.accept). A request that gets no fresh proposal
has its old draft cleared, so a verify step never reads a stale draft.
"""

from __future__ import annotations

from claimbench.engine.config import EngineConfig
from claimbench.engine.request import Request
from claimbench.engine.spec.draft_runner import DraftProposer
from claimbench.engine.spec.spec_decode import propose_ngram
from claimbench.models.llama import LlamaForCausalLM


class Speculator:
    """Proposes for the running requests with the configured proposer (ngram | draft)."""

    def __init__(self, cfg: EngineConfig, draft_model: LlamaForCausalLM | None) -> None:
        self.cfg = cfg
        self.drafter = DraftProposer(cfg, draft_model) if draft_model is not None else None
        self.reset()

    def reset(self) -> None:
        if self.drafter is not None:
            self.drafter.reset()

    def precompile(self) -> tuple[int, float]:
        """Compile the draft's steps ahead of serving: (variants, seconds); n-gram has none."""
        return (0, 0.0) if self.drafter is None else self.drafter.precompile()

    def free(self, request: Request) -> None:
        """A request finished or was preempted: its draft state goes."""
        request.spec_token_ids = []
        if self.drafter is not None:
            self.drafter.free(request)

    def propose(self, running: list[Request]) -> None:
        """Set ``spec_token_ids`` on every running request (empty where none is proposed)."""
        if self.drafter is not None:
            drafts = self.drafter.propose(running)
            for request in running:
                request.spec_token_ids = drafts.get(request.request_id, [])
            return
        for request in running:
            # At most the outputs left after the verify step's own token.
            wanted = min(
                self.cfg.spec.num_spec_tokens,
                request.sampling.max_tokens - request.num_output_tokens - 1,
            )
            caught_up = request.num_uncomputed_tokens == 1
            request.spec_token_ids = (
                propose_ngram(request.token_ids(0, request.num_tokens), wanted)
                if caught_up and wanted > 0
                else []
            )
