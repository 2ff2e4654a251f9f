"""Count the cross-device collectives in a compiled (SPMD-partitioned) executable's HLO text.

Under tensor parallelism each layer should all-reduce its activations twice (after o_proj
and after down_proj) and nothing else should cross devices but the vocabulary-split logits;
an all-gather of a weight or of the KV cache would mean the partitioner undid the split.
Counts and bytes are per device, per step: one instruction is one collective (an async
``*-start`` counts once; its ``*-done`` is not counted again), and its bytes are its result's.
"""

from __future__ import annotations

import re

import numpy as np

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# "%all-reduce.3 = bf16[16,256]{1,0} all-reduce(%x), ..." and the async
# "%all-gather-start.1 = (bf16[4,64]{1,0}, bf16[16,64]{1,0}) all-gather-start(%x), ..."
_OP = re.compile(
    r"=\s*(?P<result>.+?)\s+(?P<op>" + "|".join(COLLECTIVES) + r")(?P<start>-start)?\("
)
_ARRAY_TYPE = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[0-9,]*)\]")
_BITS = {"pred": 8}  # every other HLO element type spells its width: bf16, s8, f8e4m3fn


def count_collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """{op: {"count": n, "bytes": b}} for each collective op present in ``hlo_text``.

    A sync op's bytes are its result's (a combined all-reduce's tuple summed); an async
    all-reduce-start's likewise; any other async start's result is (operand, result,
    context...): its bytes are the second array's, the gathered or permuted value.
    """
    found: dict[str, dict[str, int]] = {}
    for line in hlo_text.splitlines():
        match = _OP.search(line)
        if match is None:
            continue
        arrays = [
            _array_bytes(a["dtype"], a["dims"]) for a in _ARRAY_TYPE.finditer(match["result"])
        ]
        if match["start"] and match["op"] != "all-reduce":
            arrays = arrays[1:2]
        entry = found.setdefault(match["op"], {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += sum(arrays)
    return found


def _array_bytes(dtype: str, dims: str) -> int:
    size = int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
    bits = _BITS.get(dtype)
    if bits is None:
        bits = int(re.search(r"\d+", dtype)[0])
    return size * bits // 8
