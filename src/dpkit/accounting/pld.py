"""Privacy-loss distributions (PLD): tight (ε, δ) for compositions, as a bracket [lower, upper].

The privacy-loss distribution of a mechanism is the law of L = ln(P(o)/Q(o)), o ~ P, for its
worst pair of neighbouring outputs (P, Q) (a *dominating pair*). A composition adds independent
losses, and the mechanism is (ε, δ)-DP iff

    δ >= δ(ε) = P[L = +inf] + E[(1 - e^(ε - L))_+]              (Balle et al. 2018, Thm 5)

(Meiser-Mohammadi 2018; Sommer, Meiser, Mohammadi 2019; Koskela, Jälkö, Honkela 2020;
dp_accounting's ``pld`` package; Doroshenko et al. 2022 for connect-the-dots). This module
discretises each mechanism's loss law twice on a grid of width h, once **pessimistically** (every
δ(ε) of every composition is an upper bound: mean-preserving spreads of e^-L, losses rounded up,
cut tails moved to +inf) and once **optimistically** (a lower bound: contraction, a convex minorant,
tails dropped), composes each with one FFT per distinct mechanism on an exponentially tilted
window whose lost mass is bounded by Chernoff bounds (``pld_fft``), and solves for ε or δ. So

* ``epsilon(event, delta)`` returns ``(lower, upper)``: the true optimal ε of the event at δ lies in
  between (floating-point round-off aside); ``upper`` is a valid guarantee, ``lower`` says how
  much any accountant could still gain.
* ``delta(event, epsilon)`` likewise returns ``(lower, upper)``.

Neighbouring relation: events are stated for **add/remove one unit** (``"add_remove"``, default).
A Poisson-subsampled mechanism has different losses for adding and for removing a unit; both
directions are composed separately and the worse is reported (as dp_accounting does).
``neighboring="replace"`` (change one unit's data): the upper bound is the add/remove bound of
``dpkit.accounting._common.normalize(event, "replace")`` (sensitivities double, pure ε doubles,
(ε, δ) -> (2ε, (1 + e^ε)δ), Poisson amplification not credited), the lower bound the optimistic
PLD of a mechanism that realises the event under replacement (so the bracket stays honest, and
may be wide for subsampled events).

Worst-case pairs used (all symmetric): Gaussian(m): N(0,1) vs N(1/m,1); Laplace(m): Lap(0,m) vs
Lap(1,m); DiscreteLaplace / DiscreteGaussian: the integer noise vs its shift by the (integer)
sensitivity; RandomizedResponse(ε, k): the k-ary RR pair; PureDP(ε): binary RR at ε (tight for
any ε-DP mechanism); ApproxDP(ε, δ): RR at ε with δ at ±inf (Kairouz-Oh-Viswanath);
Exponential(ε): upper as PureDP(ε), lower from the ε-bounded-range instance RR(ε/2) (the
exponential mechanism on two candidates); PoissonSampled(q, e) for e a Gaussian (or a
composition of Gaussians), Laplace, discrete Laplace/Gaussian, RR, pure or approximate DP leaf
(Zhu, Dong, Wang 2022). Compositions of Gaussians are merged exactly (their PLD is Gaussian).

>>> import dpkit.events as ev
>>> lo, up = epsilon(ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062),
...                  1e-5)
>>> lo <= 2.3816 <= up <= 2.3840
True
>>> epsilon(ev.Laplace(2.0), 0.0)   # pure DP: exact
(0.5, 0.5)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize

from dpkit import events as ev
from dpkit.accounting._common import check_delta, check_epsilon, check_neighboring, normalize
from dpkit.accounting.pld_fft import (
    Factor,
    cgf,
    cgf_prime,
    compose_window,
    delta_in_window,
    epsilon_in_window,
    support,
    window_for,
)
from dpkit.accounting.pld_grid import DiscretePLD, discretize, truncation_bounds
from dpkit.accounting.pld_laws import (
    AtomicLaw,
    DiscreteGaussianLaw,
    DiscreteLaplaceLaw,
    GaussianLaw,
    LaplaceLaw,
    LossLaw,
    MixInfLaw,
    SubsampledLaw,
    approx_dp_law,
    identity_law,
    pure_dp_law,
    randomized_response_law,
)

__all__ = [
    "PrivacyLossDistribution",
    "UnsupportedByPLD",
    "delta",
    "epsilon",
    "from_event",
    "supports",
]

_N_TARGET = 1 << 17  # grid points across the untilted composition's window (most runs)
_N_MAX = 1 << 21  # largest FFT window
_LOG_TAU_WINDOW = math.log(1e-14)  # tilted mass left outside the window at each end
_MAX_DGAUSS_SIGMA2 = 1e10


class UnsupportedByPLD(ValueError):  # noqa: N818 - reads as a sentence
    """The event has no privacy-loss distribution here; the message names the part and a fix."""


# --------------------------------------------------------------------------------------------
# Events -> loss laws
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Term:
    """One mechanism in a plan: its law for removing / adding a unit, and its multiplicity."""

    remove: LossLaw
    add: LossLaw
    count: int


def _check_neighboring(neighboring: str) -> str:
    return check_neighboring("replace" if neighboring == "replace_one" else neighboring)


def _int_sensitivity(value: float, event: ev.Event) -> int:
    if float(value) != math.floor(value):
        raise UnsupportedByPLD(
            f"{event!r}: the PLD of a discrete Gaussian is exact for an integer sensitivity "
            f"only (got {value}); use method='zcdp' (rho = sensitivity²/(2 sigma2))")
    return int(value)


def _leaf_laws(event: ev.Event, scale: float, replace_lower: bool) -> tuple[LossLaw, LossLaw]:
    """(upper law, lower law) of a leaf; ``scale`` multiplies sensitivities (2 for replace)."""
    law: LossLaw
    if isinstance(event, ev.Laplace):
        law = LaplaceLaw(scale / event.noise_multiplier)
        return law, law
    if isinstance(event, ev.DiscreteLaplace):
        law = DiscreteLaplaceLaw(float(event.scale), round(scale) * event.sensitivity)
        return law, law
    if isinstance(event, ev.DiscreteGaussian):
        if event.sigma2 > _MAX_DGAUSS_SIGMA2:
            raise UnsupportedByPLD(f"{event!r}: sigma2 above {_MAX_DGAUSS_SIGMA2:g} is not "
                                   "tabulated; use method='zcdp' or the continuous Gaussian")
        sens = _int_sensitivity(event.sensitivity, event) * round(scale)
        law = DiscreteGaussianLaw(float(event.sigma2), sens)
        return law, law
    if isinstance(event, ev.RandomizedResponse):
        law = randomized_response_law(float(event.epsilon), event.categories)
        return law, law
    if isinstance(event, ev.PureDP):
        if event.epsilon == 0:
            return identity_law(), identity_law()
        if replace_lower:  # a Laplace-noised sum over values in [-1, 1]: ε add/remove, 2ε here
            return pure_dp_law(float(event.epsilon)), LaplaceLaw(2.0 * event.epsilon)
        return pure_dp_law(float(event.epsilon)), pure_dp_law(float(event.epsilon))
    if isinstance(event, ev.ApproxDP):
        e, d = float(event.epsilon), float(event.delta)
        if replace_lower:
            return approx_dp_law(e, d), MixInfLaw(LaplaceLaw(2.0 * e), d) if e > 0 else \
                approx_dp_law(0.0, d)
        return approx_dp_law(e, d), approx_dp_law(e, d)
    if isinstance(event, ev.Exponential):
        e = float(event.epsilon)
        # Upper: any ε-DP mechanism. Lower: the exponential mechanism on two candidates whose
        # utilities move by ∓Δ/2 is randomized response at ε/2 (ε-bounded range, t = ε/2).
        return pure_dp_law(e), pure_dp_law(e / 2.0 * (2.0 if replace_lower else 1.0))
    raise UnsupportedByPLD(f"{type(event).__name__} has no privacy-loss distribution here "
                           "(ZCDP, SampledWithoutReplacement and unknown kinds); use "
                           "method='rdp' or 'zcdp'")


def _gaussian_eta2(event: ev.Event, scale: float) -> float | None:
    """Σ (sensitivity/sigma)² if ``event`` is (a composition of) Gaussians / NoOps, else None."""
    if isinstance(event, ev.Gaussian):
        return (scale / event.noise_multiplier) ** 2
    if isinstance(event, ev.NoOp):
        return 0.0
    if isinstance(event, ev.SelfComposed):
        inner = _gaussian_eta2(event.event, scale)
        return None if inner is None else inner * event.count
    if isinstance(event, ev.Composed):
        total = 0.0
        for e in event.events:
            part = _gaussian_eta2(e, scale)
            if part is None:
                return None
            total += part
        return total
    return None


class _PlanBuilder:
    def __init__(self, side: str, replace: bool) -> None:
        self.side = side  # "upper" | "lower"
        self.replace = replace
        self.terms: dict[tuple[LossLaw, LossLaw], int] = {}
        self.eta2 = 0.0
        self.scale = 2.0 if replace else 1.0

    def add(self, remove: LossLaw, add: LossLaw, count: int) -> None:
        if count <= 0 or (remove.is_identity and add.is_identity):
            return
        key = (remove, add)
        self.terms[key] = self.terms.get(key, 0) + count

    def walk(self, event: ev.Event, count: int) -> None:
        if count == 0:
            return
        if isinstance(event, ev.NoOp):
            return
        if isinstance(event, ev.Gaussian):
            self.eta2 += count * (self.scale / event.noise_multiplier) ** 2
            return
        if isinstance(event, ev.SelfComposed):
            self.walk(event.event, count * event.count)
            return
        if isinstance(event, ev.Composed):
            for e in event.events:
                self.walk(e, count)
            return
        if isinstance(event, ev.PoissonSampled):
            self._sampled(event, count)
            return
        upper, lower = _leaf_laws(event, self.scale, self.replace and self.side == "lower")
        law = upper if self.side == "upper" else lower
        self.add(law, law, count)

    def _sampled(self, event: ev.PoissonSampled, count: int) -> None:
        q = float(event.sampling_probability)
        inner = event.event
        while isinstance(inner, ev.PoissonSampled):
            q *= float(inner.sampling_probability)
            inner = inner.event
        if q == 0.0:
            return
        if q == 1.0:
            self.walk(inner, count)
            return
        # Under replacement the lower bound uses a unit replaced by a null record (a valid
        # instance): the add/remove sampled pair with add/remove sensitivities.
        scale = 1.0 if self.replace else self.scale
        eta2 = _gaussian_eta2(inner, scale)
        if eta2 is not None:
            if eta2 == 0.0:
                return
            base: LossLaw = GaussianLaw(math.sqrt(eta2))
        else:
            if isinstance(inner, (ev.Composed, ev.SelfComposed)):
                raise UnsupportedByPLD(
                    f"PoissonSampled over {type(inner).__name__} of non-Gaussian events has no "
                    "single PLD here (the subsample is shared); use method='rdp'")
            upper, lower = _leaf_laws(inner, scale, False)
            base = upper if self.side == "upper" else lower
        if base.is_identity:
            return
        self.add(SubsampledLaw(base, q, "remove"), SubsampledLaw(base, q, "add"), count)

    def terms_list(self) -> tuple[_Term, ...]:
        out = [_Term(r, a, n) for (r, a), n in self.terms.items()]
        if self.eta2 > 0:
            g = GaussianLaw(math.sqrt(self.eta2))
            out.insert(0, _Term(g, g, 1))
        return tuple(out)


def _plan(event: ev.Event, side: str, neighboring: str) -> tuple[_Term, ...]:
    if not isinstance(event, ev.Event):
        raise TypeError(f"event must be a dpkit.events.Event (got {type(event).__name__})")
    neighboring = _check_neighboring(neighboring)
    if neighboring == "replace" and side == "upper":
        event = normalize(event, "replace")
        builder = _PlanBuilder(side, replace=False)
    else:
        builder = _PlanBuilder(side, replace=neighboring == "replace")
    builder.walk(event, 1)
    return builder.terms_list()


def supports(event: ev.Event, *, neighboring: str = "add_remove") -> bool:
    """True if this module can bracket ``event`` (see the module docstring for the list)."""
    try:
        _plan(event, "upper", neighboring)
        _plan(event, "lower", neighboring)
    except (UnsupportedByPLD, TypeError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------------------------
# Grid choice
# --------------------------------------------------------------------------------------------

def _atom_scale(law: LossLaw) -> float | None:
    """g > 0 if every finite loss with positive mass is an integer multiple of g; 0 if the law
    has a continuous part that does not care; None if no such g is known."""
    if isinstance(law, MixInfLaw):
        return _atom_scale(law.base)
    if isinstance(law, LaplaceLaw):
        return law.eps0
    if isinstance(law, DiscreteLaplaceLaw):
        return 1.0 / law.scale
    if isinstance(law, DiscreteGaussianLaw):
        return law.sensitivity / (2.0 * law.sigma2)
    if isinstance(law, AtomicLaw):
        return _smallest_divides_all([abs(x) for x in law.losses if x != 0.0])
    if isinstance(law, GaussianLaw):
        return 0.0
    return None


def _common_scale(laws: Sequence[LossLaw], scale_of=None) -> float | None:  # type: ignore[no-untyped-def]
    """g > 0 such that every law's atoms lie on g Z (None if unknown; 0.0 if no atoms)."""
    scales = [(scale_of or _atom_scale)(law) for law in laws]
    if any(s is None for s in scales):
        return None
    return _smallest_divides_all([float(s) for s in scales if s])


def _smallest_divides_all(values: list[float]) -> float | None:
    """min(values) if every value is an integer multiple of it (to 1e-9 relative), None if not;
    0.0 for no values."""
    if not values:
        return 0.0
    g = min(values)
    for x in values:
        ratio = x / g
        if abs(ratio - round(ratio)) > 1e-9 * ratio:
            return None
    return g


def _lattice(laws: Sequence[LossLaw]) -> float | None:
    """g if every law is purely atomic with all losses in g Z (then grid g is exact)."""
    if not all(isinstance(law, (AtomicLaw, DiscreteLaplaceLaw, DiscreteGaussianLaw))
               for law in laws):
        return None
    g = _common_scale(laws)
    return g if g else None


def _heavy_scale(law: LossLaw) -> float | None:
    """Like :func:`_atom_scale`, but for a discrete Laplace law only its two heavy atoms ±Δ/s
    count (the atoms in between, 2/s apart, are light when Δ is large and act as a continuum)."""
    if isinstance(law, MixInfLaw):
        return _heavy_scale(law.base)
    if isinstance(law, DiscreteLaplaceLaw):
        return law.hi
    return _atom_scale(law)


def _snap(h: float, laws: Sequence[LossLaw]) -> float:
    """Shrink h (by less than a factor 2) so that the laws' atoms fall on grid points, when the
    atoms lie on a common lattice g Z with g >= h. A lattice finer than h (a discrete Laplace or
    Gaussian with a huge sensitivity: g = 1/s ~ 1e-11) is not snapped to, which would need
    ~1/g grid points; the heavy atoms ±Δ/s of discrete Laplace laws are kept on the grid instead.
    Any h gives valid bounds (the discretisation works per cell); snapping only tightens them."""
    for scale_of in (_atom_scale, _heavy_scale):
        g = _common_scale(laws, scale_of)
        if g and g >= h * (1.0 - 1e-9):
            return g / math.ceil(g / h - 1e-9)
        if g is None:
            return h
    return h


@lru_cache(maxsize=256)
def _coarse(law: LossLaw) -> Factor | None:
    t_lo, t_hi = truncation_bounds(law, 1e-12)
    if not t_hi > t_lo:
        return None
    pmf = discretize(law, (t_hi - t_lo) / 4000.0, 1e-12, True)
    if pmf.probs.size == 0:
        return None
    return Factor(pmf, 1)


def _auto_h(terms: Sequence[_Term]) -> float:
    laws = {t.remove: t.count for t in terms}
    for t in terms:
        laws.setdefault(t.add, t.count)
    factors: list[Factor] = []
    sds: list[float] = []
    widest = 0.0
    for law, count in laws.items():
        t_lo, t_hi = truncation_bounds(law, 1e-60)
        widest = max(widest, t_hi - t_lo)
        f = _coarse(law)
        if f is None:
            continue
        w = np.exp(f.logp - f.logp.max())
        w /= w.sum()
        x = f.k * f.h
        mean = float((w * x).sum())  # (not np.dot: BLAS threads thrash on a loaded machine)
        sds.append(math.sqrt(max(float((w * (x - mean) ** 2).sum()), 0.0)))
        factors.append(Factor(f.pmf, count))
    if not factors:
        return max(1e-3, widest / _N_MAX)
    lower, upper = window_for(factors, 0.0, math.log(1e-13))
    width = max(upper - lower, 1e-12)
    # Discretisation errors add up over the runs: a few runs need far fewer grid points.
    runs = sum(laws.values())
    target = min(_N_TARGET, max(1 << 16, 2048 * math.ceil(math.sqrt(runs))))
    h = width / target
    positive = [s for s in sds if s > 0]
    if positive:
        h = min(h, min(positive) / 40.0)
    h = max(h, width / (_N_MAX // 2), widest / _N_MAX)
    g = _lattice(list(laws))
    if g is not None and (width + widest) / g <= _N_TARGET:
        return g  # every loss lies on g Z: the grid g is exact
    return _snap(h, list(laws))


# --------------------------------------------------------------------------------------------
# Solving
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=48)  # a discretised law can hold ~1e5-1e6 floats
def _pmf(law: LossLaw, h: float, tau: float, pessimistic: bool) -> DiscretePLD:
    return discretize(law, h, tau, pessimistic)


def _factors(laws: Sequence[tuple[LossLaw, int]], h: float, tau: float,
             pessimistic: bool) -> tuple[list[Factor], float]:
    """Discretised factors and the composed mass at +inf: Π(a+m)^n - Π a^n for finite masses a
    and inf masses m, computed through log1p(-m/(a+m)) so that m << 1 ulp of 1 survives."""
    factors: list[Factor] = []
    log_all = 0.0  # Σ n log(a + m)
    log_ratio = 0.0  # Σ n log(a / (a + m))
    for law, count in laws:
        pmf = _pmf(law, h, tau, pessimistic)
        fin = pmf.finite_mass
        tot = fin + pmf.inf_mass
        if tot <= 0:
            return [], 0.0
        log_all += count * math.log(tot)
        if fin <= 0:
            log_ratio = -math.inf
        else:
            log_ratio += count * math.log1p(-pmf.inf_mass / tot)
        if pmf.probs.size and not (pmf.probs.size == 1 and pmf.offset == 0):
            factors.append(Factor(pmf, count))
    inf_mass = math.exp(log_all) * -math.expm1(log_ratio)
    if log_ratio == -math.inf:
        factors = []  # no finite mass survives the composition
    return factors, min(max(inf_mass, 0.0), 1.0)


def _tilt_for(factors: list[Factor], mean: float) -> float:
    """λ >= 0 with K'(λ) = mean (0 if the untilted mean is already above; large near the max)."""
    if cgf_prime(factors, 0.0) >= mean:
        return 0.0
    _, hi_l = support(factors)
    h = factors[0].h
    mean = min(mean, hi_l - 2.0 * h)
    if cgf_prime(factors, 0.0) >= mean:
        return 0.0
    hi = 1.0
    n = 0
    while cgf_prime(factors, hi) < mean:
        hi *= 4.0
        n += 1
        if n > 30:
            return hi
    return float(optimize.brentq(lambda s: cgf_prime(factors, s) - mean, 0.0, hi,
                                 xtol=1e-10, rtol=1e-10, maxiter=200))


def _chernoff_eps(factors: list[Factor], target: float) -> tuple[float, float]:
    """(guess, bound): the Chernoff ε with P[S >= ε] <= target, from the binned laws (a guess for
    the tilt), and the same bound evaluated on the exact laws at that s — a valid upper bound
    on ε of the discretised (pessimistic) composition, kept as a fallback."""
    k0 = cgf(factors, 0.0)
    c = k0 - math.log(target)
    _lo_l, hi_l = support(factors)
    if c <= 0:
        return cgf_prime(factors, 0.0), math.inf

    def phi(s: float) -> float:
        return s * cgf_prime(factors, s) - (cgf(factors, s) - k0) - c

    hi = 1.0
    n = 0
    while phi(hi) < 0:
        hi *= 4.0
        n += 1
        if n > 30:
            return hi_l, math.inf
    s = optimize.brentq(phi, 0.0, hi, xtol=1e-10, rtol=1e-10, maxiter=200)
    bound = (cgf(factors, s, exact=True) - math.log(target)) / s if s > 0 else math.inf
    return min(cgf_prime(factors, s), hi_l), bound


def _delta_estimate(laws: Sequence[tuple[LossLaw, int]], epsilon: float | None) -> float:
    """Rough δ(ε) (Chernoff on the coarse laws), only to choose how much tail to cut."""
    if epsilon is None:
        return 1.0
    factors = []
    for law, count in laws:
        f = _coarse(law)
        if f is not None:
            factors.append(Factor(f.pmf, count))
    if not factors:
        return 1.0
    try:
        lam = _tilt_for(factors, epsilon)
        return min(1.0, math.exp(min(cgf(factors, lam) - lam * epsilon, 0.0)))
    except (ValueError, OverflowError, ArithmeticError):
        return 1e-60


def _window_bounds(factors: list[Factor], lam: float, center: float) -> tuple[int, int, int]:
    """Grid window (lk, uk) for tilt λ, and the number of points it would need uncapped."""
    h = factors[0].h
    lower, upper = window_for(factors, lam, _LOG_TAU_WINDOW)
    lo_l, hi_l = support(factors)
    lk = math.floor(max(lower, lo_l) / h + 1e-9)
    uk = math.ceil(min(upper, hi_l) / h - 1e-9)
    ck = round(center / h)
    lk, uk = min(lk, ck), max(uk, ck)
    need = uk - lk + 1
    if need > _N_MAX:
        mid = round(cgf_prime(factors, lam) / h)
        lk = max(mid - _N_MAX // 2, round(lo_l / h))
        uk = lk + _N_MAX - 1
    return lk, uk, need


def _solve(laws: Sequence[tuple[LossLaw, int]], h: float, pessimistic: bool, *,
           delta_target: float | None = None, epsilon_target: float | None = None) -> float:
    """ε for ``delta_target`` or δ for ``epsilon_target`` of one direction, one side.

    A valid bound in the promised direction whatever happens; if a window would exceed
    ``_N_MAX`` points the grid is coarsened (at most twice) rather than the window cut.
    """
    best = math.inf if pessimistic else 0.0
    for _ in range(3):
        value, need = _solve_at(laws, h, pessimistic, delta_target, epsilon_target)
        best = min(best, value) if pessimistic else max(best, value)
        if need <= _N_MAX:
            break
        h *= math.ceil(need / (_N_MAX // 2))
    if pessimistic and delta_target is None and not math.isfinite(best):
        best = 1.0
    return best


def _solve_at(laws: Sequence[tuple[LossLaw, int]], h: float, pessimistic: bool,
              delta_target: float | None, epsilon_target: float | None) -> tuple[float, int]:
    n_total = sum(c for _, c in laws)
    if delta_target is not None:
        tau = min(1e-15, 1e-9 * max(delta_target, 1e-290) / max(n_total, 1))
    else:
        # The cut tails are charged at +inf: keep them far below the δ expected at this ε.
        tau = min(1e-20, 1e-9 * _delta_estimate(laws, epsilon_target)) / max(n_total, 1)
    tau = max(10.0 ** math.floor(math.log10(max(tau, 1e-300))), 1e-60)
    factors, inf_mass = _factors(laws, h, tau, pessimistic)
    if delta_target is not None:
        if inf_mass > delta_target:
            return math.inf, 0
        if not factors:
            return 0.0, 0
        guess, fallback = _chernoff_eps(factors, max(delta_target - inf_mass, 1e-300))
    else:
        assert epsilon_target is not None
        if not factors:
            return inf_mass, 0
        _, hi_l = support(factors)
        if epsilon_target >= hi_l:
            return inf_mass, 0
        guess = epsilon_target
        lam = _tilt_for(factors, guess)
        fallback = 1.0
        if lam > 0:  # δ_up(ε) <= inf + P[S > ε] <= inf + e^(K(λ) - λ ε), exact laws
            fallback = min(1.0, inf_mass + math.exp(min(
                cgf(factors, lam, exact=True) - lam * epsilon_target, 0.0)))
    best = fallback if pessimistic else 0.0
    need_max = 0
    work = 0
    for _ in range(6):
        lam = _tilt_for(factors, guess)
        lk, uk, need = _window_bounds(factors, lam, guess)
        need_max = max(need_max, need)
        win = compose_window(factors, lam, lk, uk, inf_mass)
        work += len(factors) * (uk - lk + 1)
        if delta_target is not None:
            res = epsilon_in_window(win, delta_target, pessimistic)
        else:
            assert epsilon_target is not None
            res = delta_in_window(win, epsilon_target, pessimistic)
        if res.status == "inf":
            return math.inf, 0
        if res.valid and math.isfinite(res.value):
            best = min(best, res.value) if pessimistic else max(best, res.value)
        if res.status == "ok" and (res.err < 1e-6 or lam == 0.0):
            need_max = 0
            break
        if work > 6 * _N_MAX:  # enough effort: keep the valid bound found so far
            break
        width = (uk - lk) * h
        if res.status == "below":
            guess = (res.value if math.isfinite(res.value) else lk * h) - 0.25 * width
        elif res.status == "above":
            guess = res.value + 0.25 * width
        elif delta_target is not None:
            guess = res.value
        else:
            need_max = 0
            break
    return best, need_max


def _directions(terms: Sequence[_Term]) -> list[list[tuple[LossLaw, int]]]:
    remove = [(t.remove, t.count) for t in terms]
    if all(t.remove is t.add or t.remove == t.add for t in terms):
        return [remove]
    return [remove, [(t.add, t.count) for t in terms]]


def _sup_total(laws: Sequence[tuple[LossLaw, int]]) -> float:
    total = 0.0
    for law, count in laws:
        if law.p_inf > 0 or law.lo > law.hi:
            return math.inf
        total += count * float(law.hi)
    return max(total, 0.0)


def _resolve_h(terms_up: Sequence[_Term], terms_lo: Sequence[_Term],
               discretization: float | None) -> float:
    if discretization is not None:
        h = float(discretization)
        if not (math.isfinite(h) and h > 0):
            raise ValueError(f"discretization must be a finite number > 0, e.g. 1e-4 "
                             f"(got {discretization!r})")
        return h
    return _auto_h(tuple(terms_up) + tuple(terms_lo))


def _check_delta(delta: float) -> float:
    return check_delta(delta, allow_one=True)  # delta = 1 is allowed here: epsilon 0


def _check_epsilon(epsilon: float) -> float:
    return check_epsilon(epsilon, allow_zero=True, allow_inf=True)  # inf: the delta at infinity


def _plans(event: ev.Event, neighboring: str) -> tuple[tuple[_Term, ...], tuple[_Term, ...]]:
    try:
        return _plan(event, "upper", neighboring), _plan(event, "lower", neighboring)
    except UnsupportedByPLD:
        raise
    except RecursionError:  # pragma: no cover - absurdly deep events
        raise UnsupportedByPLD("event nesting is too deep") from None


def epsilon(event: ev.Event, delta: float, *, discretization: float | None = None,
            neighboring: str = "add_remove") -> tuple[float, float]:
    """(lower, upper) bracket on the optimal ε of ``event`` at ``delta``.

    ``upper`` is a valid (ε, δ)-DP guarantee for the event under ``neighboring`` (pessimistic
    discretisation); ``lower`` is a value no valid accountant can beat for the worst-case pair
    (optimistic discretisation). ``math.inf`` when no finite ε exists at this δ. Never NaN, never
    negative. ``discretization`` is the loss grid width h (default: chosen from the event, about
    1/131072 of the composition's range, finer for
    mechanisms with a narrow loss law; exact lattices for atomic ones).

    >>> import dpkit.events as ev
    >>> lo, up = epsilon(ev.SelfComposed(ev.Gaussian(2.0), 100), 1e-18)
    >>> lo <= 55.7093223 <= up, round(up, 5)   # the Dong-Roth-Su value: 55.70932
    (True, 55.70932)
    """
    delta = _check_delta(delta)
    terms_up, terms_lo = _plans(event, neighboring)
    if delta >= 1.0:
        return 0.0, 0.0
    if delta == 0.0:
        up = max((_sup_total(d) for d in _directions(terms_up)), default=0.0)
        lo = max((_sup_total(d) for d in _directions(terms_lo)), default=0.0)
        return _bracket(lo, up)
    law = _single_law(terms_up, terms_lo) if discretization is None else None
    if law is not None:
        fast = _fast_epsilon(law, delta)
        if fast is not None:
            return _bracket(*fast)
    h = _resolve_h(terms_up, terms_lo, discretization)
    up = max((_solve(d, h, True, delta_target=delta) for d in _directions(terms_up)),
             default=0.0)
    lo = max((_solve(d, h, False, delta_target=delta) for d in _directions(terms_lo)),
             default=0.0)
    return _bracket(lo, up)


# --------------------------------------------------------------------------------------------
# Fast path: one run of one symmetric integer-noise mechanism, exact hockey stick
# --------------------------------------------------------------------------------------------

def _single_law(terms_up: Sequence[_Term], terms_lo: Sequence[_Term]) -> LossLaw | None:
    """The law if the event is one run of one discrete Laplace / Gaussian (same law both sides,
    both directions), else None."""
    if len(terms_up) != 1 or len(terms_lo) != 1:
        return None
    (tu,), (tl,) = terms_up, terms_lo
    law = tu.remove
    if not (tu.count == 1 and tl.count == 1 and law == tu.add == tl.remove == tl.add):
        return None
    return law if isinstance(law, (DiscreteLaplaceLaw, DiscreteGaussianLaw)) else None


def _exact_delta(law: LossLaw, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) on δ(ε) = P[L > ε] - e^ε Q[L > ε] (Balle et al. 2018, Thm 5; for the
    discrete Gaussian Canonne, Kamath, Steinke 2020, Thm 7), from the law's exact tails.

    The tails are exact sums up to floating-point round-off: closed-form geometric tails for
    the discrete Laplace, a log-cumulative table of n terms for the discrete Gaussian (absolute
    error in the log tails <= ~n ulp). The subtraction amplifies it by at most
    1 + 2 ratio/(1 - ratio), ratio = e^ε Q[L > ε]/P[L > ε] < 1; the bracket is widened by that.
    """
    eps = np.asarray(eps, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        lsp = law.log_sf(eps, False)
        lsq = law.log_sf(eps, True)
        lratio = np.minimum(eps + lsq - lsp, 0.0)
        d = np.where(np.isneginf(lsp), 0.0, np.exp(lsp) * -np.expm1(lratio))
        ratio = np.exp(lratio)
        n_terms = 2.0 * math.sqrt(1490.0 * law.sigma2) if isinstance(law, DiscreteGaussianLaw) \
            else 8.0
        log_err = 1e-13 + 4.0 * n_terms * 2.3e-16
        rel = 4.0 * log_err * (1.0 + 2.0 * ratio / np.maximum(-np.expm1(lratio), 1e-300))
        rel = np.where(np.isfinite(rel), rel, np.inf)
        good = rel < 1.0
        lo = np.where(good, d * (1.0 - np.where(good, rel, 0.0)), 0.0)
        up = np.minimum(np.where(good, d * (1.0 + np.where(good, rel, 0.0)), 1.0), 1.0)
    return lo, up


def _fast_delta(law: LossLaw, epsilon: float) -> tuple[float, float] | None:
    lo, up = _exact_delta(law, np.array([epsilon]))
    if not up[0] <= lo[0] * (1.0 + 1e-6) + 1e-300:
        return None  # too much round-off: let the PLD answer
    return float(lo[0]), float(up[0])


def _fast_epsilon(law: LossLaw, delta: float) -> tuple[float, float] | None:
    """Bracket on the ε with δ(ε) = delta, δ continuous and decreasing (multi-section)."""
    def up_ok(x: np.ndarray) -> np.ndarray:  # δ_up(ε) <= delta: ε is a valid guarantee
        return _exact_delta(law, x)[1] <= delta

    def lo_ok(x: np.ndarray) -> np.ndarray:  # δ_lo(ε) >= delta: the truth is >= ε
        return _exact_delta(law, x)[0] >= delta

    if up_ok(np.array([0.0]))[0]:
        return 0.0, 0.0
    hi = max(float(law.hi), 1.0) if math.isfinite(law.hi) else 1.0
    for _ in range(60):
        if up_ok(np.array([hi]))[0]:
            break
        hi *= 2.0
    else:
        return None
    a, b = 0.0, hi  # up_ok(b), not up_ok(a)
    for _ in range(6):
        x = np.linspace(a, b, 65)
        ok = up_ok(x)
        i = int(np.argmax(ok))
        a, b = float(x[i - 1]), float(x[i])
        if b - a <= 1e-13 * max(b, 1e-300):
            break
    upper = b
    a2, b2 = 0.0, upper  # lo_ok(a2) (δ(0) >= delta here, else upper would be 0), largest such
    if not lo_ok(np.array([0.0]))[0]:
        return None
    for _ in range(6):
        x = np.linspace(a2, b2, 65)
        ok = lo_ok(x)
        j = int(np.argmin(ok)) if not ok.all() else x.size
        a2, b2 = float(x[j - 1]), float(x[min(j, x.size - 1)])
        if b2 - a2 <= 1e-13 * max(b2, 1e-300):
            break
    if upper - a2 > 1e-6 * max(upper, 1e-12):
        return None
    return a2, upper


def _bracket(lo: float, up: float, cap: float = math.inf) -> tuple[float, float]:
    """Plain floats, 0 <= lo <= up <= cap, no NaN, no negative zero."""
    up = float(up)
    up = cap if math.isnan(up) else min(max(up, 0.0), cap) + 0.0
    lo = float(lo)
    lo = 0.0 if math.isnan(lo) else min(max(lo, 0.0), up) + 0.0
    return lo, up


def delta(event: ev.Event, epsilon: float, *, discretization: float | None = None,
          neighboring: str = "add_remove") -> tuple[float, float]:
    """(lower, upper) bracket on the smallest δ for which ``event`` is (ε, δ)-DP.

    >>> import dpkit.events as ev
    >>> lo, up = delta(ev.Gaussian(1.0), 1.0)
    >>> lo <= 0.126936737507 <= up
    True
    """
    epsilon = _check_epsilon(epsilon)
    terms_up, terms_lo = _plans(event, neighboring)
    if math.isinf(epsilon):
        up = max((_inf_total(d) for d in _directions(terms_up)), default=0.0)
        lo = max((_inf_total(d) for d in _directions(terms_lo)), default=0.0)
        return _bracket(lo, up, 1.0)
    law = _single_law(terms_up, terms_lo) if discretization is None else None
    if law is not None:
        fast = _fast_delta(law, epsilon)
        if fast is not None:
            return _bracket(fast[0], fast[1], 1.0)
    h = _resolve_h(terms_up, terms_lo, discretization)
    up = max((_delta_side(d, h, True, epsilon) for d in _directions(terms_up)), default=0.0)
    lo = max((_delta_side(d, h, False, epsilon) for d in _directions(terms_lo)), default=0.0)
    return _bracket(lo, up, 1.0)


def _inf_total(laws: Sequence[tuple[LossLaw, int]]) -> float:
    """Exact P[composed L = +inf] = 1 - Π (1 - p_inf)^n."""
    s = 0.0
    for law, count in laws:
        if law.p_inf >= 1.0:
            return 1.0
        s += count * math.log1p(-law.p_inf)
    return -math.expm1(s)


def _delta_side(laws: Sequence[tuple[LossLaw, int]], h: float, pessimistic: bool,
                epsilon: float) -> float:
    if epsilon >= _sup_total(laws):
        return _inf_total(laws)
    return _solve(laws, h, pessimistic, epsilon_target=epsilon)


# --------------------------------------------------------------------------------------------
# The object
# --------------------------------------------------------------------------------------------

class PrivacyLossDistribution:
    """The (pessimistic or optimistic) PLD of a sequence of mechanisms, composed lazily.

    Holds the exact loss laws of its mechanisms with their multiplicities; discretisation and
    FFT composition happen when a question is asked, with the tilt chosen for that question.
    ``pessimistic=True`` answers are valid upper bounds on ε (or δ), ``False`` lower bounds.

    >>> import dpkit.events as ev
    >>> step = from_event(ev.PoissonSampled(0.01, ev.Gaussian(1.0)))
    >>> round(step.self_compose(10_000).get_epsilon_for_delta(1e-5), 2)
    6.19
    """

    def __init__(self, terms: Sequence[_Term], *, pessimistic: bool = True,
                 value_discretization_interval: float | None = None) -> None:
        self._terms = tuple(terms)
        self.pessimistic = bool(pessimistic)
        if value_discretization_interval is not None:
            value_discretization_interval = _resolve_h((), (), value_discretization_interval)
        self._h = value_discretization_interval

    @property
    def value_discretization_interval(self) -> float:
        """The loss grid width h (chosen from the mechanisms when not given)."""
        if self._h is None:
            self._h = _auto_h(self._terms)
        return self._h

    def _check_other(self, other: PrivacyLossDistribution) -> None:
        if not isinstance(other, PrivacyLossDistribution):
            raise TypeError(f"can only compose with a PrivacyLossDistribution (got "
                            f"{type(other).__name__})")
        if other.pessimistic != self.pessimistic:
            raise ValueError("cannot compose a pessimistic PLD with an optimistic one: the result "
                             "would bound nothing; build both with the same pessimistic=")

    def compose(self, other: PrivacyLossDistribution) -> PrivacyLossDistribution:
        """The PLD of running both (adaptive composition of dominating pairs)."""
        self._check_other(other)
        h = self._h if other._h is None else (other._h if self._h is None
                                              else min(self._h, other._h))
        merged: dict[tuple[LossLaw, LossLaw], int] = {}
        for t in self._terms + other._terms:
            merged[(t.remove, t.add)] = merged.get((t.remove, t.add), 0) + t.count
        terms = [_Term(r, a, n) for (r, a), n in merged.items()]
        return PrivacyLossDistribution(terms, pessimistic=self.pessimistic,
                                       value_discretization_interval=h)

    def self_compose(self, count: int) -> PrivacyLossDistribution:
        """The PLD of ``count`` runs."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count must be an int >= 0 (got {count!r})")
        terms = [_Term(t.remove, t.add, t.count * count) for t in self._terms]
        return PrivacyLossDistribution([t for t in terms if t.count > 0],
                                       pessimistic=self.pessimistic,
                                       value_discretization_interval=self._h)

    def get_epsilon_for_delta(self, delta: float) -> float:
        """Smallest ε with δ(ε) <= ``delta`` for this (pessimistic/optimistic) PLD."""
        delta = _check_delta(delta)
        if delta >= 1.0:
            return 0.0
        dirs = _directions(self._terms)
        if delta == 0.0:
            return max((_sup_total(d) for d in dirs), default=0.0)
        h = self.value_discretization_interval
        value = max((_solve(d, h, self.pessimistic, delta_target=delta) for d in dirs),
                    default=0.0)
        return _bracket(value, value)[1]

    def get_delta_for_epsilon(self, epsilon: float) -> float:
        """δ(ε) of this (pessimistic/optimistic) PLD."""
        epsilon = _check_epsilon(epsilon)
        dirs = _directions(self._terms)
        if math.isinf(epsilon):
            return max((_inf_total(d) for d in dirs), default=0.0)
        h = self.value_discretization_interval
        value = max((_delta_side(d, h, self.pessimistic, epsilon) for d in dirs), default=0.0)
        return _bracket(value, value, 1.0)[1]

    def discretized(self, direction: str = "remove") -> list[tuple[DiscretePLD, int]]:
        """The discrete laws (and multiplicities) this PLD composes, for inspection."""
        if direction not in ("remove", "add"):
            raise ValueError(f"direction must be 'remove' or 'add' (got {direction!r})")
        h = self.value_discretization_interval
        return [(_pmf(t.remove if direction == "remove" else t.add, h, 1e-15, self.pessimistic),
                 t.count) for t in self._terms]

    def __repr__(self) -> str:
        kind = "pessimistic" if self.pessimistic else "optimistic"
        n = sum(t.count for t in self._terms)
        return f"<PrivacyLossDistribution {kind}, {len(self._terms)} distinct laws, {n} runs>"


def from_event(event: ev.Event, *, pessimistic: bool = True,
               value_discretization_interval: float | None = None,
               neighboring: str = "add_remove") -> PrivacyLossDistribution:
    """The PLD of ``event`` (upper bounds when ``pessimistic``, lower bounds otherwise)."""
    terms = _plan(event, "upper" if pessimistic else "lower", neighboring)
    return PrivacyLossDistribution(terms, pessimistic=pessimistic,
                                   value_discretization_interval=value_discretization_interval)
