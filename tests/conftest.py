from __future__ import annotations

import sys
from pathlib import Path

# Test helpers (hand-made tables, ...) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))
