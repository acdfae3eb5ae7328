from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

# Test helpers (hand-made tables, ...) live next to the tests.
sys.path.insert(0, str(Path(__file__).parent))

# NNI writes a registry of experiments to ~/nni-experiments (its path is fixed when nni
# is imported, and NasExperiment always writes it): give the test session its own home
# so that running the tests leaves the user's home untouched.
os.environ["HOME"] = tempfile.mkdtemp(prefix="nni-hwaware-tests-home-")
