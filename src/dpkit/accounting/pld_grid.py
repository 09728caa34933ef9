"""Discretising a privacy-loss law onto the grid {k h : k integer}, upwards and downwards.

Write y = e^-L. The hockey stick of a pair is δ(ε) = E_P[(1 - e^ε y)_+] (+ P[L = +inf]), an
expectation of a *convex, decreasing* function of y, and for a product pair (composition) the
same function of the product of the y's, which stays convex and decreasing in each factor. So a
discrete law G gives valid bounds for every ε **and every composition** as soon as

* upper (pessimistic): E_G f(y) >= E_F f(y) for all convex decreasing f >= 0. This holds when G is
  obtained from the true law F by lowering y (rounding losses up, moving mass to L = +inf) and by
  mean-preserving spreads of y. We split the mass a of each cell (l_j, l_j+1] between its two end
  points so that E[y] is kept: the connect-the-dots rule of Doroshenko et al. 2022 (Alg. 1),
  written per cell. The error is second order in h (a cell's chord over δ).
* lower (optimistic): E_G f(y) <= E_F f(y), equivalently δ_G(x) <= δ_F(x) for all x = e^ε and
  mass(G) <= mass(F) (f ranges over mixtures of (c - y)_+ and constants). We contract each cell to
  one atom at its conditional y-mean (Jensen), then take a convex, piecewise-linear minorant of
  δ with kinks only at grid points (kinks are atoms): subtract from the chord interpolation a
  piecewise-linear cover E of the per-cell chord excess, keep it >= the P[L = +inf] level, and
  remove concave vertices (negative masses) by replacing them with the chord of their neighbours,
  which only lowers the curve. Isolated atoms are thereby rounded down (first order, unavoidable);
  continuous parts keep a second-order error, so lower and upper bracket the truth tightly.

Tails: the pessimistic law moves the mass above the range to +inf and the mass below it up to the
lowest grid point; the optimistic law drops the mass below and rounds the mass above down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpkit.accounting.pld_laws import LossLaw, decay_cumsum, log1mexp, safe_exp

__all__ = ["DiscretePLD", "discretize", "truncation_bounds"]

_LOG_HALF = math.log(0.5)


@dataclass(frozen=True, eq=False)
class DiscretePLD:
    """Masses ``probs[i]`` at losses ``(offset + i) * h`` plus ``inf_mass`` at L = +inf."""

    h: float
    offset: int
    probs: np.ndarray
    inf_mass: float

    @property
    def finite_mass(self) -> float:
        return float(np.sum(self.probs))

    @property
    def losses(self) -> np.ndarray:
        return (self.offset + np.arange(self.probs.size)) * self.h

    def delta(self, epsilon: float) -> float:
        """Hockey stick of this (single) discrete pair at ``epsilon``."""
        losses = self.losses
        sel = losses > epsilon
        return float(self.inf_mass + np.sum(self.probs[sel] * -np.expm1(epsilon - losses[sel])))


def _section(fn, good: float, bad: float, rounds: int = 4, points: int = 64) -> float:  # type: ignore[no-untyped-def]
    """Vectorised multi-section: the boundary between ``good`` (fn <= 0) and ``bad`` (fn > 0),
    resolved to |bad - good| / points^rounds; returns a point on the good side."""
    for _ in range(rounds):
        grid = np.linspace(good, bad, points + 1)
        ok = fn(grid) <= 0
        # first failing point (bad side); the one before it is good
        fail = np.nonzero(~ok)[0]
        if fail.size == 0:
            return float(grid[-1])
        i = int(fail[0])
        if i == 0:
            return float(good)
        good, bad = float(grid[i - 1]), float(grid[i])
    return good


def _walk(fn, want_positive: bool, direction: float, start: float = 0.0) -> float:  # type: ignore[no-untyped-def]
    """From ``start``, step by doubling in ``direction`` until fn > 0 (or <= 0)."""
    t, step = start, 1.0
    for _ in range(2100):
        val = float(fn(np.array([t]))[0])
        if (val > 0) == want_positive:
            return t
        t = start + direction * step
        step *= 2.0
        if step > 1e300:
            break
    return t


def truncation_bounds(law: LossLaw, tau: float) -> tuple[float, float]:
    """(t_lo, t_hi) with P[L <= t_lo] <= tau and P[t_hi < L < inf] <= tau, inside [lo, hi]."""
    lo, hi = float(law.lo), float(law.hi)
    if lo > hi:  # no finite mass at all
        return 0.0, 0.0
    log_tau = math.log(tau)

    def cdf_excess(t: np.ndarray) -> np.ndarray:  # increasing in t
        return law.log_cdf(np.asarray(t, dtype=np.float64), False) - log_tau

    def sf_excess(t: np.ndarray) -> np.ndarray:  # decreasing in t
        return law.log_sf(np.asarray(t, dtype=np.float64), False) - log_tau

    def one(fn, t: float) -> float:  # type: ignore[no-untyped-def]
        return float(fn(np.array([t]))[0])

    # Lower end: largest t with cdf(t) <= tau.
    if math.isfinite(lo) and one(cdf_excess, lo) > 0:
        t_lo = lo
    elif math.isfinite(hi) and one(cdf_excess, hi) <= 0:
        t_lo = hi
    else:
        good = lo if math.isfinite(lo) else _walk(cdf_excess, False, -1.0)
        bad = hi if math.isfinite(hi) else _walk(cdf_excess, True, +1.0, max(good, 0.0))
        t_lo = _section(cdf_excess, good, bad)
    # Upper end: smallest t with sf(t) <= tau.
    if math.isfinite(hi) and one(sf_excess, hi) > 0:
        t_hi = hi
    elif one(sf_excess, max(t_lo, lo)) <= 0:
        t_hi = max(t_lo, lo)
    else:
        good = hi if math.isfinite(hi) else _walk(sf_excess, False, +1.0, max(t_lo, 0.0))
        t_hi = _section(sf_excess, good, max(t_lo, lo))
    if math.isfinite(lo):
        t_lo = max(t_lo, lo)
    if math.isfinite(hi):
        t_hi = min(t_hi, hi)
    return t_lo, max(t_hi, t_lo)


def _log_cell(lc: np.ndarray, ls: np.ndarray) -> np.ndarray:
    """log of the mass of each cell (t_j, t_j+1] from log-cdf and log-sf at the boundaries,
    differencing on the side where the values are small (no cancellation)."""
    with np.errstate(invalid="ignore"):
        via_cdf = lc[1:] + log1mexp(np.where(np.isneginf(lc[1:]), 0.0, lc[:-1] - lc[1:]))
        via_sf = ls[:-1] + log1mexp(np.where(np.isneginf(ls[:-1]), 0.0, ls[1:] - ls[:-1]))
    out = np.where(lc[1:] < _LOG_HALF, via_cdf, via_sf)
    return np.where(np.isnan(out), -np.inf, out)


def discretize(law: LossLaw, h: float, tau: float, pessimistic: bool,
               max_points: int = 20_000_000) -> DiscretePLD:
    """The pessimistic (upper) or optimistic (lower) discrete law of ``law`` on the grid h Z.

    ``tau`` bounds the mass cut from each tail before rounding (moved to +inf / up when
    pessimistic, dropped / rounded down when optimistic).
    """
    if not h > 0 or not math.isfinite(h):
        raise ValueError(f"value discretization interval must be a finite number > 0 (got {h!r})")
    if law.lo > law.hi:  # all mass at +inf
        return DiscretePLD(h, 0, np.zeros(0), float(law.p_inf))
    t_lo, t_hi = truncation_bounds(law, tau)
    i0 = math.floor(t_lo / h) - 1
    i1 = math.ceil(t_hi / h) + 1
    n = i1 - i0
    if n + 3 > max_points:
        raise ValueError(
            f"the loss range [{t_lo:.4g}, {t_hi:.4g}] needs {n} grid points at "
            f"value_discretization_interval={h:.3g}; pass a larger interval")
    t = (i0 + np.arange(n + 1)) * h
    # Pessimistic cells are (t_j, t_j+1]: an atom on a grid point stays there (rounded up).
    # Optimistic cells are [t_j, t_j+1) (evaluated just below the boundaries): an atom on a grid
    # point is the left end of its cell, so contracting and rounding down keeps it in place.
    te = t if pessimistic else t - 1e-7 * h
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        lcp, lsp = law.log_cdf(te, False), law.log_sf(te, False)
        lcq, lsq = law.log_cdf(te, True), law.log_sf(te, True)
        la = _log_cell(lcp, lsp)
        lb = _log_cell(lcq, lsq)
        a = safe_exp(la)
        lr = np.where(np.isfinite(la), lb + t[:-1] - la, 0.0)
        lr = np.clip(np.nan_to_num(lr, nan=0.0, posinf=0.0, neginf=-h), -h, 0.0)
    below = float(np.exp(lcp[0]))
    above = float(np.exp(lsp[-1]))
    em1 = -math.expm1(-h)  # 1 - e^-h
    if pessimistic:
        wl = a * _r_minus_emh(lr, h) / em1  # = a (r - e^-h)/(1 - e^-h)
        wr = a * -np.expm1(lr) / em1
        m = np.zeros(n + 1)
        m[:-1] += wl
        m[1:] += wr
        m[0] += below
        return _trimmed(h, i0, m, float(law.p_inf) + above, True)
    m = _optimistic_masses(a, lr, above, h)
    return _trimmed(h, i0 - 1, m, float(law.p_inf), False)


def _r_minus_emh(lr: np.ndarray, h: float) -> np.ndarray:
    """r - e^-h for r = e^lr in [e^-h, 1], without cancellation (and without overflow)."""
    if h < 700.0:
        return math.exp(-h) * np.expm1(lr + h)
    return np.exp(lr) - math.exp(-h)


def _optimistic_masses(a: np.ndarray, lr: np.ndarray, above: float, h: float) -> np.ndarray:
    """Masses on grid points -1 .. n+1 (relative) of a convex minorant of the contracted law."""
    n = a.size
    a_ext = np.append(a, above)  # pseudo-cell n: the upper tail as an atom at grid point n
    lr_ext = np.append(lr, 0.0)
    r = np.exp(lr_ext)
    one_m_r = -np.expm1(lr_ext)
    em1 = -math.expm1(-h)  # 1 - e^-h
    # β = (e^h - 1/r)/(e^h - 1), the weight of the left end at the contracted atom.
    beta = np.clip(-np.expm1(-h - lr_ext) / em1, 0.0, 1.0)
    c = a_ext * one_m_r * beta  # chord excess of each cell at its contracted atom
    wl = a_ext * _r_minus_emh(lr_ext, h) / em1
    wr = a_ext * one_m_r / em1
    mp = np.zeros(n + 2)  # connect-the-dots masses on points 0 .. n+1
    mp[:-1] += wl
    mp[1:] += wr
    # D_i = δ(x_i) - P[L = inf] at grid point i (stable recurrence, nonnegative terms).
    big_r = decay_cumsum((a_ext * r)[::-1], math.exp(-h))[::-1]
    r_next = np.append(big_r[1:], 0.0)
    d = np.cumsum((a_ext * one_m_r + em1 * r_next)[::-1])[::-1]
    c_prev = np.concatenate([[0.0], c[:-1]])
    e = np.minimum(np.maximum(c_prev, c), d)  # e_i on points 0..n; e_n = 0 since D_n = 0
    # Cells whose chord excess is no longer covered (cap bound at one end): raise the other end.
    cover = beta[:-1] * e[:-1] + (1.0 - beta[:-1]) * e[1:]
    bad = np.nonzero(cover < c[:-1] * (1.0 - 1e-12))[0]
    for j in bad[::-1].tolist():
        bj = beta[j]
        if bj <= 0.0:
            continue
        need = (c[j] - (1.0 - bj) * e[j + 1]) / bj
        if need > e[j]:
            e[j] = min(need, d[j])
    # Masses of (chord interpolation - PL(e)) on points -1..n+1.
    big_e = np.concatenate([[0.0, 0.0], e, [0.0, 0.0]])  # points -2 .. n+2
    # x_i × (slope change of the PL interpolation of e at x_i), with x_{i±1} = x_i e^{±h}.
    kink = (math.exp(-h) * (big_e[2:] - big_e[1:-1]) - (big_e[1:-1] - big_e[:-2])) / em1
    m = np.concatenate([[0.0], mp]) - kink
    fixed = _remove_concave(m, h)
    if fixed is not None:
        return fixed
    # Fallback (grid far too coarse for the law): round every cell down to its left end point.
    down = np.zeros(n + 3)
    down[1:n + 2] = a_ext
    return down


def _remove_concave(m: np.ndarray, h: float) -> np.ndarray | None:
    """Remove vertices with negative mass (concave kinks of δ(x)) by chords of their neighbours.

    A run of consecutive concave vertices between active neighbours a and b is concave on
    [x_a, x_b], so the chord from a to b lies below it: replacing the run by the chord only
    lowers δ. The run's kinks move to a and b in proportion to where the chord's slope falls:
    with C = the running sum of the run's kinks (in units of x_a), the chord's slope minus the
    slope right of a is Σ_segments Δx C / (x_b - x_a). Left of the first vertex the curve meets
    x = 0 (its share is mass dropped, at y = inf); right of the last it is flat (all goes left).
    Everything is local (no cancellation against δ's O(1) values), so tiny masses stay exact.
    Returns None if the repair would cost too much (the caller then rounds down instead).
    """
    m = m.copy()
    active = np.nonzero(m)[0]
    for _ in range(32):  # vectorised passes; cascades are then finished by _hull_region
        vals = m[active]
        neg = vals < 0
        if not neg.any():
            break
        n_act = active.size
        pos = np.nonzero(neg)[0]
        # runs of consecutive negatives in the active list
        breaks = np.nonzero(np.diff(pos) > 1)[0]
        st = np.concatenate([[pos[0]], pos[breaks + 1]])
        en = np.concatenate([pos[breaks], [pos[-1]]])
        has_a = st > 0
        has_b = en + 1 < n_act
        a_idx = active[np.maximum(st - 1, 0)]
        b_idx = active[np.minimum(en + 1, n_act - 1)]
        ref = np.where(has_a, a_idx, active[st])  # x_ref = x_a, or the first vertex
        run_of = np.repeat(np.arange(st.size), en - st + 1)
        q = active[pos]
        xi = np.exp(np.minimum((q - ref[run_of]) * h, 700.0))  # x_q / x_ref
        kq = m[q] / xi  # kinks × x_ref
        cum = np.cumsum(kq)
        starts = np.concatenate([[0], np.cumsum(en - st + 1)[:-1]])
        base = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0.0)
        cum_run = cum - base[run_of]  # C after each vertex of its run
        total = np.add.reduceat(kq, starts)
        xi_b = np.exp(np.minimum((b_idx - ref) * h, 700.0))
        nxt = np.empty_like(xi)  # x of the next point (the next vertex, or b at the run's end)
        nxt[:-1] = xi[1:]
        ends = np.cumsum(en - st + 1) - 1
        nxt[ends] = xi_b
        weighted = np.add.reduceat((nxt - xi) * cum_run, starts)
        x_a_rel = np.where(has_a, 1.0, 0.0)
        length = xi_b - x_a_rel
        frac = np.where(has_b, weighted / np.where(has_b, length, 1.0), total)
        m[q] = 0.0
        add_a = frac  # × x_a / x_ref = 1 when a exists
        add_b = (total - frac) * xi_b
        np.add.at(m, a_idx[has_a], add_a[has_a])
        np.add.at(m, b_idx[has_b], add_b[has_b])
        active = active[m[active] != 0.0]
    active = np.nonzero(m)[0]
    budget = 20 * active.size + 5_000
    spent = 0
    start = 0
    while True:
        neg_at = np.nonzero(m[active[start:]] < 0)[0]
        if neg_at.size == 0:
            break
        p = start + int(neg_at[0])
        used, end = _hull_region(m, active, p, h)
        spent += used + 200  # (a region costs Python overhead too)
        if spent > budget:
            return None
        start = end
    return np.maximum(m, 0.0)


def _hull_region(m: np.ndarray, active: np.ndarray, p: int, h: float) -> tuple[int, int]:
    """Replace the curve around active vertex ``p`` (negative mass) by its convex minorant on a
    window of active vertices [A, B] that is widened (doubling) until the new masses at A and B
    are >= 0. Slopes are kept relative to the slope right of A (running sums of the window's own
    kinks), so nothing cancels against δ's O(1) values; x is relative to the first real vertex.
    A = -1 stands for the point x = 0 where the curve starts (its share is dropped mass)."""
    n_act = active.size
    half = 1
    used = 0
    while True:
        lo = max(p - half, -1)
        hi = min(p + half, n_act - 1)
        idx = active[max(lo, 0):hi + 1]
        used += idx.size
        ref = int(idx[0])
        xi = np.exp(np.minimum((idx - ref) * h, 700.0))
        if lo == -1:
            xi = np.concatenate([[0.0], xi])
            mm = np.concatenate([[0.0], m[idx]])
        else:
            mm = m[idx].copy()
        kk = np.zeros_like(mm)
        kk[1:-1] = mm[1:-1] / xi[1:-1]  # interior kinks (× x_ref)
        c = np.cumsum(kk)  # relative slope of the segment right of each vertex
        pp = np.concatenate([[0.0], np.cumsum(np.diff(xi) * c[:-1])])  # ∫ relative slope
        xs, ps = xi.tolist(), pp.tolist()
        stack: list[int] = [0]
        for k in range(1, len(xs)):
            while len(stack) >= 2:
                a, b = stack[-2], stack[-1]
                s_ab = (ps[b] - ps[a]) / (xs[b] - xs[a])
                s_bk = (ps[k] - ps[b]) / (xs[k] - xs[b])
                if s_bk < s_ab:
                    stack.pop()
                else:
                    break
            stack.append(k)
        new = np.zeros_like(mm)
        slopes = [(ps[stack[j + 1]] - ps[stack[j]]) / (xs[stack[j + 1]] - xs[stack[j]])
                  for j in range(len(stack) - 1)]
        for j in range(1, len(stack) - 1):
            new[stack[j]] = (slopes[j] - slopes[j - 1]) * xs[stack[j]]
        first, last = 0, len(xs) - 1
        new_first = mm[first] + (slopes[0] if slopes else 0.0) * xs[first]
        new_last = mm[last] + (float(c[last - 1]) - (slopes[-1] if slopes else 0.0)) * xs[last]
        ok_first = lo == -1 or new_first >= 0
        ok_last = new_last >= 0 or hi == n_act - 1
        if (ok_first and ok_last) or (lo == -1 and hi == n_act - 1):
            new[first] = 0.0 if lo == -1 else new_first
            new[last] = new_last
            if lo == -1:
                new = new[1:]
            m[idx] = new
            return used, hi
        half *= 2


def _trimmed(h: float, offset: int, m: np.ndarray, inf_mass: float,
             pessimistic: bool) -> DiscretePLD:
    m = np.where(m > 0, m, 0.0)
    tiny = m < 1e-300  # flushed (subnormals are slow): to +inf when pessimistic, else dropped
    if tiny.any():
        if pessimistic:
            inf_mass += float(np.sum(m[tiny]))
        m = np.where(tiny, 0.0, m)
    nz = np.nonzero(m)[0]
    if nz.size == 0:
        return DiscretePLD(h, 0, np.zeros(0), min(1.0, inf_mass))
    lo, hi = int(nz[0]), int(nz[-1])
    probs = np.ascontiguousarray(m[lo:hi + 1])
    probs.setflags(write=False)
    return DiscretePLD(h, offset + lo, probs, min(1.0, inf_mass))
