"""Reconstruction attacks (Dinur-Nissim 2003): too many too-accurate answers reveal every secret.

The setting: ``n`` people, each with public quasi-identifiers (here one unique public integer
``qid``, standing for a zip code + birth date) and one **secret** (a bit, or a small integer in
``[0, levels)``). A data system answers *subset-sum queries* "how many people in subset S have the
secret bit set?" (``SELECT COUNT(*) FROM people WHERE secret = 1 AND <predicate on qid>``), maybe
with noise. The attacker knows the public column and chooses the subsets, so each answer is one
noisy linear equation ``a_j · x ≈ y_j`` in the unknown secret vector ``x``.

**What the attack proves** (Dinur-Nissim 2003; Dwork-McSherry-Talwar 2007): if every one of
``m = Θ(n)`` random subset-sum answers is within ``E = o(sqrt(n))`` of the truth, the linear
program below recovers all but ``o(n)`` of the secret bits. "Blatant non-privacy" follows from
accuracy alone, whatever the system does to hide rows (no raw data leaves it, only counts).
The only way out is noise of order ``sqrt(n)`` *per query*, or a cap on the number of queries:
that is what a differential-privacy budget enforces (noise grows as ``sqrt(m)/ε`` under
composition).

Attacks:

* :func:`exhaustive_attack` -- ``n <= 20``: try every candidate ``x`` and keep the one whose
  answers are closest (smallest max error, ties by the L1 error). Dinur-Nissim's first theorem:
  with the answers to *all* ``2^n`` subsets within ``E``, the winner differs from the truth in
  at most ``4E`` positions; a few times ``n`` random subsets already pin it down for small ``E``.
* :func:`lp_attack` -- any ``n``: the Dinur-Nissim linear program, solved with scipy's HiGHS.
  With a known noise bound ``E`` it finds a fractional ``x in [0, levels-1]^n`` with
  ``|A x - y|_inf <= E`` (the original attack); without one it minimises the L1 error
  ``sum_j |a_j · x - y_j|`` (the maximum-likelihood estimate under Laplace noise). The fractional
  solution is rounded to the nearest allowed value.
* :func:`lsq_attack` -- any ``n``: least squares, ``x_hat = argmin ||A x - y||_2`` (optionally
  constrained to the box ``[0, levels-1]^n``), rounded. Unconstrained, it is the best linear
  unbiased estimate (Gauss-Markov) for *any* zero-mean noise of equal variance, and its error is
  exactly predictable: ``x_hat - x ~ (A^T A)^{-1} A^T z``, covariance ``sigma^2 (A^T A)^{-1}``
  (:func:`lsq_predicted_rate`). It needs no noise bound and costs milliseconds.

Subsets (what the attacker asks for; they live in :mod:`dpkit.attacks.subsets` and are
re-exported here):

* :func:`random_subsets` -- independent fair coins per person, written as ``qid IN (...)``;
* :func:`hashed_subsets` -- ``{i : ((a qid_i + b) mod p) mod 2 = 0}`` with random salts ``a, b``:
  the trick of the Diffix attacks (Cohen-Nissim 2018; Dick-Joseph-Schutzman 2023 use related
  hash-like predicates): a short predicate that the system cannot tell from an ordinary filter,
  yet selects a pseudo-random half of the people.

All randomness comes from :mod:`dpkit.noise` (pass ``source=dp.noise.seeded(…)`` to reproduce).

>>> import dpkit as dp
>>> from dpkit.attacks import oracles, reconstruction as rc
>>> src = dp.noise.seeded(3)
>>> people = rc.make_population(16, source=src)
>>> queries = rc.random_subsets(people.qid, 48, source=src)
>>> answers = oracles.ExactOracle(people).ask(queries)
>>> guess = rc.exhaustive_attack(rc.subset_matrix(queries), answers)
>>> rc.recovery_rate(guess, people.secret)
1.0
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpkit.attacks.oracles import NoisyOracle, Oracle
from dpkit.attacks.subsets import (
    HASH_MODULUS,
    Population,
    SubsetQuery,
    check_qid,
    hashed_subsets,
    make_population,
    random_subsets,
    subset_matrix,
)
from dpkit.noise import Source

__all__ = [
    "ATTACKS",
    "HASH_MODULUS",
    "Population",
    "ReconstructionResult",
    "SubsetQuery",
    "exhaustive_attack",
    "hashed_subsets",
    "lp_attack",
    "lsq_attack",
    "lsq_predicted_rate",
    "make_population",
    "random_subsets",
    "reconstruct",
    "recovery_rate",
    "recovery_sweep",
    "subset_matrix",
    "uniform_noise_variance",
]

#: Attacks :func:`reconstruct` can run.
ATTACKS = ("lp", "lsq", "lsq-box", "exhaustive")


# --------------------------------------------------------------------------- attacks
def _check_system(A: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    A = np.asarray(A, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if A.ndim != 2 or y.shape != (A.shape[0],):
        raise ValueError(f"A must be (m, n) and y (m,) (got {A.shape} and {y.shape})")
    keep = np.isfinite(y)  # NaN: the system did not answer (suppressed or refused)
    return A[keep], y[keep]


def exhaustive_attack(
    A: Any, y: Any, *, levels: int = 2, max_candidates: int = 2**22
) -> np.ndarray:
    """Try every ``x in [0, levels)^n``; return the one with the smallest max error
    ``max_j |a_j · x - y_j|`` (ties broken by the L1 error, then by the first found).

    Dinur-Nissim's exhaustive attack: if all answers are within ``E`` of the truth, the winner
    is consistent within ``E`` too (the truth is a candidate), and a candidate consistent with
    every subset differs from the truth in at most ``4E`` positions. With exact answers and
    enough random subsets to separate all candidates (``m`` a few times ``n`` does, w.h.p.) the
    winner is the truth itself.
    Cost: ``levels^n`` candidates (at most ``max_candidates``), in blocks of 65536.
    """
    A, y = _check_system(A, y)
    n = A.shape[1]
    levels = int(levels)
    total = levels**n
    if total > max_candidates:
        raise ValueError(
            f"{levels}^{n} = {total} candidates exceed max_candidates={max_candidates}; use "
            f"lp_attack for n this large (or raise max_candidates)"
        )
    if A.shape[0] == 0:
        return np.zeros(n, dtype=np.int64)
    powers = levels ** np.arange(n, dtype=np.int64)
    best = (math.inf, math.inf, 0)
    block = 1 << 16
    for start in range(0, total, block):
        ids = np.arange(start, min(total, start + block), dtype=np.int64)
        X = (ids[None, :] // powers[:, None]) % levels  # (n, block) digits
        err = np.abs(A @ X - y[:, None])
        linf = err.max(axis=0)
        l1 = err.sum(axis=0)
        i = int(np.lexsort((l1, linf))[0])
        if (linf[i], l1[i]) < best[:2]:
            best = (float(linf[i]), float(l1[i]), int(ids[i]))
    return (best[2] // powers) % levels


def lp_attack(
    A: Any, y: Any, *, levels: int = 2, noise_bound: float | None = None
) -> np.ndarray:
    """The Dinur-Nissim linear-programming attack (scipy HiGHS, interior point).

    Variables ``x in [0, levels-1]^n`` (relaxed to reals). With ``noise_bound=E``: find ``x``
    with ``|A x - y|_inf <= E`` (Dinur-Nissim 2003; falls back to the L1 program if no such
    ``x`` exists, i.e. the bound was wrong); HiGHS' interior-point method rounded better here
    than its dual simplex (79-86% vs 70-82% over four populations at E = 16, n = 256).
    Without: minimise ``sum_j |a_j · x - y_j|`` (L1 decoding, Dwork-McSherry-Talwar 2007; the
    maximum-likelihood estimate under Laplace noise, and robust to a few wild answers).
    Returns ``round(x)`` clipped to ``[0, levels)`` (int64). Rows of ``y`` that are NaN (no
    answer) are dropped.
    """
    from scipy import sparse
    from scipy.optimize import linprog

    A, y = _check_system(A, y)
    m, n = A.shape
    hi = float(int(levels) - 1)
    if m == 0:
        return np.zeros(n, dtype=np.int64)
    x: np.ndarray | None = None
    if noise_bound is not None:
        if not (math.isfinite(noise_bound) and noise_bound >= 0):
            raise ValueError(f"noise_bound must be a finite number >= 0 (got {noise_bound!r})")
        res = linprog(
            np.zeros(n),
            A_ub=np.vstack([A, -A]),
            b_ub=np.concatenate([y + noise_bound, noise_bound - y]),
            bounds=[(0.0, hi)] * n,
            method="highs-ipm",
        )
        if res.status == 0:
            x = res.x
    if x is None:
        # A x - y = u - v with u, v >= 0; minimise sum(u + v) = the L1 error (m equality rows)
        eye = sparse.identity(m, format="csr")
        A_eq = sparse.hstack([sparse.csr_matrix(A), -eye, eye]).tocsr()
        res = linprog(
            np.concatenate([np.zeros(n), np.ones(2 * m)]),
            A_eq=A_eq,
            b_eq=y,
            bounds=[(0.0, hi)] * n + [(0.0, None)] * (2 * m),
            method="highs-ipm",
        )
        if res.status != 0:  # pragma: no cover - the L1 program is always feasible
            raise RuntimeError(f"HiGHS failed on the L1 program: {res.message}")
        x = res.x[:n]
    return np.clip(np.rint(x), 0, hi).astype(np.int64)


def lsq_attack(A: Any, y: Any, *, levels: int = 2, box: bool = False) -> np.ndarray:
    """Least-squares reconstruction: ``x_hat = argmin_x ||A x - y||_2``, rounded.

    ``box=False`` (default): the ordinary least-squares estimate (normal equations, or
    ``numpy.linalg.lstsq`` -- the minimum-norm solution -- when ``A`` has fewer rows than columns
    or is ill-conditioned). For full-rank ``A`` and noise
    ``z`` with independent zero-mean entries of variance ``sigma^2``, ``x_hat = x + (A^T A)^{-1}
    A^T z`` is unbiased with covariance ``sigma^2 (A^T A)^{-1}`` whatever the noise's shape
    (Gauss-Markov: the best linear unbiased estimate), so its success rate is predictable
    (:func:`lsq_predicted_rate`). For ``m`` random half-subsets, ``E[A^T A] = (m/4)(I + 11^T)``
    and each coordinate's error has sd ``~ 2 sigma / sqrt(m)``; a secret bit is recovered when
    its error is below 1/2. ``box=True``: minimise over ``x in [0, levels-1]^n``
    (``scipy.optimize.lsq_linear``, bounded-variable least squares), which uses the knowledge
    that secrets are bounded, at the price of a closed form.

    Returns ``round(x_hat)`` clipped to ``[0, levels)`` (int64, ties at 1/2 rounded to even by
    ``numpy.rint``). Rows of ``y`` that are NaN (no answer) are dropped.

    >>> import numpy as np
    >>> A = np.array([[1.0, 0, 1], [0, 1, 1], [1, 1, 0], [1, 1, 1]])
    >>> lsq_attack(A, A @ np.array([1, 0, 1]) + np.array([0.3, -0.2, 0.1, -0.3])).tolist()
    [1, 0, 1]
    """
    A, y = _check_system(A, y)
    m, n = A.shape
    hi = float(int(levels) - 1)
    if m == 0:
        return np.zeros(n, dtype=np.int64)
    if box:
        from scipy.optimize import lsq_linear

        res = lsq_linear(A, y, bounds=(0.0, hi), method="bvls")
        if not res.success:  # pragma: no cover - BVLS terminates on any finite input
            raise RuntimeError(f"lsq_linear failed: {res.message}")
        x = res.x
    else:
        x = _ols(A, y)
    return np.clip(np.rint(x), 0, hi).astype(np.int64)


def _ols(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``argmin ||A x - y||_2``: Cholesky on the normal equations when ``A`` is tall and well
    conditioned (5x faster than an SVD at 1024 x 256; subset matrices have condition numbers
    in the tens), else LAPACK's SVD solver (minimum-norm for rank-deficient ``A``)."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    if A.shape[0] >= A.shape[1]:
        try:
            factor = cho_factor(A.T @ A)
        except LinAlgError:
            factor = None
        if factor is not None:
            d = np.abs(np.diag(factor[0]))
            if d.min() > 1e-4 * d.max():  # cond(A^T A) < ~1e8: the normal equations are safe
                return cho_solve(factor, A.T @ y)
    return np.linalg.lstsq(A, y, rcond=None)[0]


def uniform_noise_variance(bound: int) -> float:
    """Variance of uniform integer noise on ``{-E, …, E}``: ``((2E+1)^2 - 1)/12 = E(E+1)/3``
    (the continuous ``U(-E, E)`` has ``E^2/3``)."""
    e = int(bound)
    if e < 0:
        raise ValueError(f"bound must be >= 0 (got {bound!r})")
    return e * (e + 1) / 3.0


def lsq_predicted_rate(A: Any, noise_variance: float, *, per_bit: bool = False) -> Any:
    """Predicted recovery rate of the unconstrained :func:`lsq_attack` on secret *bits*.

    With ``C = (A^T A)^{-1}`` (for the realised ``A``), bit ``i``'s error is approximately
    ``N(0, noise_variance * C_ii)`` (a sum of ``m`` independent noise terms; central limit
    theorem), and rounding at 1/2 is right when the error is below 1/2 on the side away from
    the truth, so ``P(bit i right) = Phi(0.5 / sqrt(noise_variance * C_ii))``.

    For random half-subsets ``E[A^T A] = (m/4)(I + 11^T)``, giving ``C_ii ~ 4/m``; for the
    realised matrix ``C_ii`` is larger, about ``4/(m - n)`` (the inverse of a Wishart-like
    matrix is inflated by ``m/(m - n - 1)``): at ``n = 256, m = 1024`` the sd is ~15% above
    ``2 sigma / sqrt(m)``. Returns the mean over bits (or the per-bit array with ``per_bit``).
    Needs ``A`` of full column rank.
    """
    from scipy.special import ndtr

    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] < A.shape[1]:
        raise ValueError(f"A must be (m, n) with m >= n for a unique estimate (got {A.shape})")
    if not (math.isfinite(noise_variance) and noise_variance >= 0):
        raise ValueError(f"noise_variance must be a finite number >= 0 (got {noise_variance!r})")
    c = np.diag(np.linalg.inv(A.T @ A))
    p = np.ones_like(c) if noise_variance == 0 else ndtr(0.5 / np.sqrt(noise_variance * c))
    return p if per_bit else float(p.mean())


def recovery_rate(guess: Any, truth: Any) -> float:
    """Fraction of secrets guessed exactly."""
    g = np.asarray(guess)
    t = np.asarray(truth)
    if g.shape != t.shape or g.size == 0:
        raise ValueError(f"guess and truth must have one non-empty shape ({g.shape} vs {t.shape})")
    return float(np.mean(g == t))


# --------------------------------------------------------------------------- end to end
@dataclass(frozen=True)
class ReconstructionResult:
    """What an attacker got: a guess per person, and what the system answered."""

    guess: np.ndarray
    asked: int
    answered: int
    refused: int
    suppressed: int
    subsets: str
    attack: str
    unasked: int = 0  # not sent after repeated refusals (see CuratorOracle)
    rate: float | None = None  # filled in when the truth is known (evaluation only)
    #: the (m, n) subset matrix of the *answered* questions (for lsq_predicted_rate)
    matrix: np.ndarray | None = field(default=None, repr=False, compare=False)

    def with_truth(self, truth: Any) -> ReconstructionResult:
        """The same result with ``rate`` = fraction of ``truth`` recovered."""
        return dataclasses.replace(self, rate=recovery_rate(self.guess, truth))


def reconstruct(
    oracle: Oracle,
    qid: Any,
    *,
    queries: int = 1024,
    subsets: str = "random",
    attack: str = "lp",
    levels: int = 2,
    noise_bound: float | None = None,
    source: Source | None = None,
) -> ReconstructionResult:
    """Ask ``queries`` subset-sum questions of ``oracle`` and reconstruct every secret.

    ``subsets``: ``"random"`` or ``"hashed"``; ``attack``: ``"lp"`` (see :func:`lp_attack`,
    ``noise_bound`` passed on), ``"lsq"`` (least squares, :func:`lsq_attack`), ``"lsq-box"``
    (least squares in ``[0, levels-1]^n``) or ``"exhaustive"`` (``n <= 20``). Unanswered
    questions (suppressed, refused by a budget) are dropped. ``source`` draws the attacker's
    subsets.
    """
    q = check_qid(qid)
    if subsets == "random":
        qs = random_subsets(q, queries, source=source)
    elif subsets == "hashed":
        qs = hashed_subsets(q, queries, source=source)
    else:
        raise ValueError(f"subsets must be 'random' or 'hashed' (got {subsets!r})")
    if attack not in ATTACKS:
        raise ValueError(f"attack must be one of {ATTACKS} (got {attack!r})")
    before = (oracle.refused, oracle.suppressed, oracle.unasked)
    y = oracle.ask(qs)
    A = subset_matrix(qs)
    if attack == "lp":
        guess = lp_attack(A, y, levels=levels, noise_bound=noise_bound)
    elif attack in ("lsq", "lsq-box"):
        guess = lsq_attack(A, y, levels=levels, box=attack == "lsq-box")
    else:
        guess = exhaustive_attack(A, y, levels=levels)
    return ReconstructionResult(
        guess=guess,
        asked=len(qs),
        answered=int(np.isfinite(y).sum()),
        refused=oracle.refused - before[0],
        suppressed=oracle.suppressed - before[1],
        subsets=subsets,
        attack=attack,
        unasked=oracle.unasked - before[2],
        matrix=A[np.isfinite(y)],
    )


def recovery_sweep(
    levels_of_noise: Sequence[float],
    *,
    n: int = 256,
    queries: int = 1024,
    noise: str = "uniform",
    subsets: str = "random",
    known_bound: bool = False,
    repeats: int = 1,
    attack: str = "lp",
    source: Source | None = None,
) -> list[tuple[float, float]]:
    """Recovery rate of an attack against fresh noise of each level (evaluation helper).

    For each level ``E`` and each of ``repeats`` fresh populations of ``n`` people: a
    :class:`~dpkit.attacks.oracles.NoisyOracle` with ``noise`` of scale ``E``, ``queries``
    subsets, and ``attack`` (``"lp"``: the LP attack, told the bound ``E`` when
    ``known_bound``, uniform noise only; ``"lsq"``, ``"lsq-box"``: least squares).
    Returns ``[(E, mean recovery rate), …]``.
    """
    if known_bound and (noise != "uniform" or attack != "lp"):
        raise ValueError("known_bound is for the LP attack on bounded (uniform) noise")
    out = []
    for level in levels_of_noise:
        rates = []
        for _ in range(int(repeats)):
            people = make_population(n, source=source)
            oracle = NoisyOracle(people, scale=float(level), noise=noise, source=source)
            res = reconstruct(
                oracle, people.qid, queries=queries, subsets=subsets, attack=attack,
                source=source, noise_bound=float(math.floor(level)) if known_bound else None,
            )
            rates.append(recovery_rate(res.guess, people.secret))
        out.append((float(level), float(np.mean(rates))))
    return out
