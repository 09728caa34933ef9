"""Suite-wide settings.

One BLAS thread: CI and this project's machines have 2 shared cores, where OpenBLAS's own threads
made the linear-algebra tests (release/, attacks/) 5-10x slower, not faster. Set before numpy is
imported by any test module; an explicit setting in the environment wins.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
