"""pytest setup for the dpkit.release tests: make ``src/`` importable from a bare checkout."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("dpkit") is None:  # running from a checkout without `pip install -e`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
