"""Find whole-array copies of the KV cache in a compiled executable's HLO text.

A copy whose result has a KV-pool array's full shape means XLA moves an entire layer's
cache every step, most often to change its layout for a custom call (the Pallas kernel
needs row-major pages where TPU's default layout for a small head_dim puts the page axis
minor) or to evict it from a faster memory space. A decode step that should read a few
pages per sequence then reads and writes the whole pool. A bitcast-convert of a pool array
(f16 bits to a bf16 container, say) counts too: XLA:TPU runs it as its own pass over the
whole array, a copy by another name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# "%copy.56 = bf16[8192,16,4,64]{3,2,1,0:T(4,128)(2,1)} copy(%p)" and the async form
# "%copy-start.1 = (bf16[..]{..}, bf16[..]{..}, u32[]) copy-start(%p)"; copy-done ends a
# copy-start and is not counted again; "%b.3 = bf16[..]{..} bitcast-convert(%p)" is a pass too.
_COPY_OP = re.compile(r"=\s*(?P<result>.+?)\s+(?:copy|copy-start|bitcast-convert)\(")
_ARRAY_TYPE = re.compile(r"(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[0-9,]*)\]")

Shape = tuple[str, tuple[int, ...]]  # (HLO element type such as "bf16", dims)


def count_full_copies(hlo_text: str, shapes: Iterable[Shape]) -> int:
    """Copy instructions (sync, or async starts) and bitcast-converts whose result is an
    array of one of ``shapes``.

    ``shapes`` are (HLO element type, dims) pairs, e.g. ("bf16", (8192, 16, 4, 64)); the
    layout is ignored, since a layout change is exactly the copy being looked for.
    """
    wanted = set(shapes)
    count = 0
    for line in hlo_text.splitlines():
        match = _COPY_OP.search(line)
        if match is None:
            continue
        for array in _ARRAY_TYPE.finditer(match["result"]):
            dims = tuple(int(d) for d in array["dims"].split(",") if d)
            if (array["dtype"], dims) in wanted:
                count += 1
                break
    return count


def hlo_shape(dtype_name: str, dims: tuple[int, ...]) -> Shape:
    """(numpy dtype name, dims) -> the HLO spelling: ("bfloat16", d) -> ("bf16", d)."""
    return (_HLO_TYPES.get(dtype_name, dtype_name), tuple(dims))


_HLO_TYPES = {
    "bfloat16": "bf16",
    "float16": "f16",
    "float32": "f32",
    "int8": "s8",
    "uint8": "u8",
    "int16": "s16",
    "uint16": "u16",
    "int32": "s32",
    "uint32": "u32",
    "float8_e4m3fn": "f8e4m3fn",
}
