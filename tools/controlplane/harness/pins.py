"""tools/upstream.py (the pinned upstream modules) made importable for the harness."""

from __future__ import annotations

import sys

from harness.paths import CONTROLPLANE

if str(CONTROLPLANE.parent) not in sys.path:
    sys.path.insert(0, str(CONTROLPLANE.parent))
import upstream  # noqa: E402  (tools/upstream.py)

__all__ = ["upstream"]
