"""dpkit.noise: the only source of randomness in dpkit, and exact samplers on the integers.

>>> import dpkit.noise as noise
>>> src = noise.seeded(42)                 # reproducible, INSECURE: tests only
>>> noise.discrete_laplace(3, 4, source=src).dtype
dtype('int64')

``source=None`` (the default everywhere) means :func:`default_source`, the operating system's
CSPRNG. Samplers are exact: see ``docs/noise.md`` for the algorithms and proofs.
``ConstantWork(source)`` runs the discrete Laplace / Gaussian samplers, ``bernoulli``,
``uniform_int`` (and the exponential mechanism's samplers) on fixed plans whose work depends on
public parameters only, and ``gaussian_float`` on three words per pair (:mod:`.constant`).
"""

from __future__ import annotations

from . import constant, grid, trace
from .constant import (
    ConstantWork,
    ScopeShare,
    bernoulli,
    charge_scope,
    discrete_gaussian,
    discrete_laplace,
    reserve_share,
    shared_scope,
    uniform_int,
)
from .gaussian import gaussian_float, gaussian_float32, gaussian_on_grid
from .samplers import (
    MAX_DGAUSS_SIGMA2,
    MAX_DLAP_SCALE,
    as_rational,
    bernoulli_exp,
    bernoulli_exp_lanes,
    bernoulli_lanes,
    bernoulli_matrix,
    dlap_effective_scale,
    fair_bits,
    permutation,
    uniform_float01,
)
from .sources import (
    SecureSource,
    SeededSource,
    Source,
    default_source,
    secure,
    seeded,
    token_bytes,
    token_hex,
)

__all__ = [
    "MAX_DGAUSS_SIGMA2",
    "MAX_DLAP_SCALE",
    "ConstantWork",
    "ScopeShare",
    "SecureSource",
    "SeededSource",
    "Source",
    "as_rational",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_lanes",
    "bernoulli_lanes",
    "bernoulli_matrix",
    "charge_scope",
    "constant",
    "default_source",
    "discrete_gaussian",
    "discrete_laplace",
    "dlap_effective_scale",
    "fair_bits",
    "gaussian_float",
    "gaussian_float32",
    "gaussian_on_grid",
    "grid",
    "permutation",
    "reserve_share",
    "secure",
    "seeded",
    "shared_scope",
    "token_bytes",
    "token_hex",
    "trace",
    "uniform_float01",
    "uniform_int",
]
