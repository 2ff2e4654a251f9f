"""Processes that hold or try to take a results store's metered-run lock
(ledger/metered_lock.py), as a metered run in another process would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# A process that takes the store's lock as a metered run does, says so, and holds it until
# its stdin closes.
HOLD = """\
import sys
from pathlib import Path
from claimbench.ledger import metered_lock
metered_lock.hold(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""

# A process that tries to take it: exits 0 having held it, 1 with the refusal on stdout.
TRY = """\
import sys
from pathlib import Path
from claimbench.ledger import metered_lock
try:
    metered_lock.hold(Path(sys.argv[1]))
except metered_lock.MeteredRunBusy as err:
    print(err)
    sys.exit(1)
"""


@contextmanager
def holder(store: Path) -> Iterator[subprocess.Popen]:
    """Another process holding ``store``'s metered-run lock for the ``with`` body."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(30)


def try_hold(store: Path) -> subprocess.CompletedProcess:
    """Another process trying to take ``store``'s lock: returncode 0 when it could, 1 with
    the refusal on stdout when it could not."""
    return subprocess.run(
        [sys.executable, "-c", TRY, str(store)], capture_output=True, text=True, timeout=60
    )
