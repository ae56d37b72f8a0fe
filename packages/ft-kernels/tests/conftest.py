"""ft-kernels tests: this folder on sys.path for its helpers (``fp32_bounds``)."""

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
