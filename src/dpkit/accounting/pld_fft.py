"""Composing discrete PLDs with one FFT per distinct factor, on an exponentially tilted window.

The composition of factors F_j (each repeated n_j times) has the law of S = Σ_j Σ_{i<=n_j} L_ji.
We compute it on a window [L, U] of the grid only, as

    p_S(k) = p~_S(k) · exp(Σ_j n_j log Z_j(λ) - λ h k),     p~_j(k) = p_j(k) e^(λ h k) / Z_j(λ),

where p~ is the *exponentially tilted* law (Esscher transform; tilting commutes with convolution)
and p~_S = ⊛_j p~_j^{*n_j} is obtained by one real FFT of each factor raised to the n_j-th power
(polar form) and one inverse FFT of length N >= U - L + 1 (circular: mass outside [L, U] aliases
into it). λ >= 0 is chosen so that the tilted law is centred where the answer lies (the
Chernoff / saddle point of the tail at the target), so the hockey stick δ(ε) = Σ_{k h > ε}
p_S(k)(1 - e^(ε - k h)) is computed with *relative* accuracy even at δ = 1e-18 or ε = 1e3,
where an untilted FFT only sees round-off (dp_accounting returns inf there).

Everything lost is bounded and charged in the safe direction:

* tilted mass outside the window, by Chernoff bounds from the exact cumulant generating function
  K(s) = Σ_j n_j log Z_j(s) of the discrete factors: P~[S > U] <= min_t exp(K~(t) - t(U + h)),
  P~[S < L] <= min_t exp(K~(-t) + t(L - h));
  upper bound: the mass above U is added as if it sat at +inf; aliased mass only adds;
  lower bound: all aliased mass, weighted by its largest possible untilted value, is subtracted;
* FFT round-off: estimated from the negative entries of the result (their size is the noise
  floor) and added to / subtracted from the answer per grid point above ε.

No normal approximations: the bounds hold for the discrete laws exactly (up to floating point).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import fft as sfft
from scipy import optimize

from dpkit.accounting.pld_grid import DiscretePLD
from dpkit.accounting.pld_laws import decay_cumsum, safe_exp

__all__ = ["Factor", "Result", "Window", "cgf", "compose_window", "window_for"]


_COARSE_POINTS = 2048


@dataclass(eq=False)
class Factor:
    """A discrete PLD repeated ``count`` times (precomputed nonzero support).

    ``kf``/``logp`` are the exact support (grid units) and log masses; ``kc``/``logpc`` a binned
    copy (at most 2048 points, mass-weighted positions) used only to *choose* tilts and windows.
    Every bound that is charged uses the exact arrays (a Chernoff bound holds for any t).
    """

    pmf: DiscretePLD
    count: int
    k: np.ndarray = field(init=False)
    kf: np.ndarray = field(init=False)
    logp: np.ndarray = field(init=False)
    kc: np.ndarray = field(init=False)
    logpc: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        probs = self.pmf.probs
        nz = np.nonzero(probs)[0]
        self.k = (self.pmf.offset + nz).astype(np.int64)
        self.kf = self.k.astype(np.float64)
        with np.errstate(divide="ignore"):
            self.logp = np.log(probs[nz])
        if nz.size <= _COARSE_POINTS:
            self.kc, self.logpc = self.kf, self.logp
        else:
            width = int(nz[-1] - nz[0]) + 1
            size = -(-width // _COARSE_POINTS)
            b = (nz - nz[0]) // size
            p = probs[nz]
            mass = np.bincount(b, weights=p)
            pos = np.bincount(b, weights=p * self.kf)
            keep = mass > 0
            self.kc = pos[keep] / mass[keep]
            self.logpc = np.log(mass[keep])

    @property
    def h(self) -> float:
        return self.pmf.h

    def log_z(self, s: float, exact: bool = True) -> float:
        """log Σ p e^(s l) (exact, or from the binned copy)."""
        if self.k.size == 0:
            return -math.inf
        kk, lp = (self.kf, self.logp) if exact else (self.kc, self.logpc)
        x = lp + (s * self.h) * kk
        top = float(x.max())
        return top + math.log(float(np.sum(safe_exp(x - top))))

    def z_and_mean(self, s: float, exact: bool = False) -> tuple[float, float]:
        """(log Z(s), mean loss under the law tilted by s)."""
        kk, lp = (self.kf, self.logp) if exact else (self.kc, self.logpc)
        x = lp + (s * self.h) * kk
        top = float(x.max())
        w = safe_exp(x - top)
        tot = float(w.sum())
        return top + math.log(tot), float((w * kk).sum() / tot) * self.h

    def mean(self, s: float, exact: bool = False) -> float:
        return self.z_and_mean(s, exact)[1]


def cgf(factors: list[Factor], s: float, exact: bool = False) -> float:
    """K(s) = Σ n_j log Z_j(s) (log of the untilted total mass at s = 0)."""
    return sum(f.count * f.log_z(s, exact) for f in factors)


def cgf_prime(factors: list[Factor], s: float, exact: bool = False) -> float:
    return sum(f.count * f.mean(s, exact) for f in factors)


def cgf_both(factors: list[Factor], s: float, exact: bool = False) -> tuple[float, float]:
    k = kp = 0.0
    for f in factors:
        z, m = f.z_and_mean(s, exact)
        k += f.count * z
        kp += f.count * m
    return k, kp


def support(factors: list[Factor]) -> tuple[float, float]:
    """Smallest and largest loss of the composition (loss units; factors may differ in h)."""
    lo = sum(f.count * int(f.k[0]) * f.h for f in factors)
    hi = sum(f.count * int(f.k[-1]) * f.h for f in factors)
    return lo, hi


def _legendre_root(factors: list[Factor], lam: float, c: float, sign: int,
                   k0: float) -> float | None:
    """s (sign · s > 0) solving s K'(λ+s) - (K(λ+s) - K(λ)) = c; None if no root (bounded
    support: the endpoint is then the support's end)."""

    def phi(t: float) -> float:
        s = sign * t
        k, kp = cgf_both(factors, lam + s)
        return s * kp - (k - k0) - c

    hi = 1.0
    f_hi = phi(hi)
    n = 0
    while f_hi < 0:
        hi *= 4.0
        n += 1
        if n > 40:
            return None
        f_hi = phi(hi)
    if not math.isfinite(f_hi):
        lo_t = 0.0
        while not math.isfinite(f_hi) and hi - lo_t > 1e-12:
            hi = 0.5 * (lo_t + hi)
            f_hi = phi(hi)
        if f_hi < 0:
            return None
    t = optimize.brentq(phi, 0.0, hi, xtol=1e-8, rtol=1e-6, maxiter=100)
    return sign * t


def window_for(factors: list[Factor], lam: float, log_tau: float) -> tuple[float, float]:
    """[L, U] (losses) holding all but ~e^log_tau of the λ-tilted composition at each end."""
    k0 = cgf(factors, lam)
    lo_l, hi_l = support(factors)
    c = -log_tau
    s_hi = _legendre_root(factors, lam, c, +1, k0)
    s_lo = _legendre_root(factors, lam, c, -1, k0)
    upper = hi_l if s_hi is None else min(cgf_prime(factors, lam + s_hi), hi_l)
    lower = lo_l if s_lo is None else max(cgf_prime(factors, lam + s_lo), lo_l)
    return lower, upper


def _log_tail(factors: list[Factor], lam: float, edge: float, sign: int) -> float:
    """log of a Chernoff bound on the λ-tilted P[sign·S >= sign·edge] (edge in loss units):
    exp(K(λ + s) - K(λ) - s·edge) for s = sign·t, t > 0 chosen on the binned copy and the
    bound evaluated on the exact laws (valid for any t)."""
    lo_l, hi_l = support(factors)
    h = factors[0].h
    if sign > 0 and edge > hi_l + 1e-9 * h:
        return -math.inf
    if sign < 0 and edge < lo_l - 1e-9 * h:
        return -math.inf

    def fprime(t: float) -> float:
        return sign * (cgf_prime(factors, lam + sign * t) - edge)

    if fprime(0.0) >= 0:
        return 0.0
    hi = 1.0
    n = 0
    while fprime(hi) < 0:
        hi *= 4.0
        n += 1
        if n > 40:
            break
    t = hi if fprime(hi) < 0 else optimize.brentq(fprime, 0.0, hi, xtol=1e-8, rtol=1e-6,
                                                  maxiter=100)
    k0 = cgf(factors, lam, exact=True)
    s = sign * t
    return min(0.0, cgf(factors, lam + s, exact=True) - k0 - s * edge)


@dataclass
class Window:
    """The tilted composition on grid points lk..uk and what is needed to untilt and bound it."""

    h: float
    lk: int
    uk: int
    r: np.ndarray  # tilted probabilities on lk..uk
    lam: float
    log_c: float  # Σ n_j log Z_j(λ)
    inf_mass: float
    log_tau_lo: float  # tilted mass below lk (Chernoff)
    log_tau_hi: float  # tilted mass above uk (Chernoff)
    noise: float  # FFT noise floor per entry (tilted units)


def compose_window(factors: list[Factor], lam: float, lk: int, uk: int,
                   inf_mass: float) -> Window:
    """Tilted composition of ``factors`` on grid points lk..uk (one FFT per factor)."""
    h = factors[0].h
    width = uk - lk + 1
    n_fft = sfft.next_fast_len(width, real=True)
    spec = None
    shift = 0
    log_c = 0.0
    for f in factors:
        lz = f.log_z(lam, exact=True)
        w = safe_exp(f.logp + (lam * h) * f.kf - lz)
        rel = f.k - f.k[0]
        shift += f.count * int(f.k[0])
        log_c += f.count * lz
        if rel[-1] < n_fft:
            arr = np.zeros(n_fft)
            arr[rel] = w
        else:
            arr = np.bincount(rel % n_fft, weights=w, minlength=n_fft)
        c = sfft.rfft(arr)
        if f.count != 1:
            with np.errstate(divide="ignore", under="ignore"):
                mag = np.exp(f.count * np.log(np.abs(c)))
            c = mag * np.exp(1j * (f.count * np.angle(c)))
        spec = c if spec is None else spec * c
    assert spec is not None
    out = sfft.irfft(spec, n_fft)
    idx = (np.arange(lk, uk + 1, dtype=np.int64) - shift) % n_fft
    r = out[idx]
    log_tau_hi = _log_tail(factors, lam, (uk + 1) * h, +1)
    log_tau_lo = _log_tail(factors, lam, (lk - 1) * h, -1)
    neg = -float(np.min(out)) if out.size else 0.0
    noise = 4.0 * max(neg, 0.0) + 4.0 * np.finfo(float).eps * float(np.max(np.abs(out))) * 1e-3
    return Window(h, lk, uk, r, lam, log_c, inf_mass, log_tau_lo, log_tau_hi, noise)


@dataclass
class Result:
    """An answer from one window. ``valid``: ``value`` is a bound in the promised direction.
    ``status`` tells where the answer sits ("ok", or "below"/"above" the well-resolved part of
    the window: re-tilt there), or "inf"; ``err`` = the window's error terms / target."""

    value: float
    status: str
    valid: bool
    err: float = 0.0


def _terms(win: Window, k1: np.ndarray, pessimistic: bool) -> np.ndarray:
    """Error terms (bounds) at thresholds just below grid points k1 (answer counts k >= k1)."""
    h, lam = win.h, win.lam
    with np.errstate(over="ignore", under="ignore"):
        base = np.exp(np.minimum(win.log_c - lam * h * k1, 700.0))
        count = np.maximum(win.uk - k1 + 1, 0)
        if lam * h > 0:
            geo = np.where(count > 0, -np.expm1(-lam * h * count) / -math.expm1(-lam * h), 0.0)
        else:
            geo = count.astype(float)
        slack = win.noise * base * geo
        if pessimistic:
            tail = math.exp(min(win.log_c - lam * h * (win.uk + 1) + win.log_tau_hi, 700.0))
            return slack + tail
        alias = (math.exp(win.log_tau_lo) + math.exp(win.log_tau_hi)) * base
        return slack + alias


def _untilted(win: Window, j0: int, pessimistic: bool) -> np.ndarray:
    """Untilted masses on grid points j0..uk."""
    ks = np.arange(j0, win.uk + 1)
    # (positions j0 .. lk-1 lie below the window: no mass is represented there)
    rr = win.r[j0 - win.lk:] if j0 >= win.lk else np.concatenate([np.zeros(win.lk - j0), win.r])
    with np.errstate(divide="ignore", over="ignore", under="ignore", invalid="ignore"):
        lw = np.log(np.abs(rr)) + win.log_c - win.lam * win.h * ks
        w = np.sign(rr) * safe_exp(np.minimum(lw, 700.0))
    w = np.nan_to_num(w, nan=0.0)
    return np.maximum(w, 0.0) if pessimistic else w


def _below_constants(win: Window, pessimistic: bool) -> tuple[float, float, float]:
    """For thresholds ε < (lk - 1) h every window point counts: δ(ε) = c + A - e^ε B with
    A = Σ w_k, B = Σ w_k e^(-k h) over the window. Returns (c, A, B); c holds inf_mass and
    the bounds: upper adds the untilted mass below the window (<= τ_lo e^(log C), its largest
    value over ε >= 0) and above it; lower subtracts all aliased mass at its largest weight."""
    h = win.h
    w = _untilted(win, win.lk, pessimistic)
    ks = np.arange(win.lk, win.uk + 1)
    with np.errstate(over="ignore", under="ignore"):
        a = float(np.sum(w))
        b = float(np.sum(w * safe_exp(-h * ks.astype(np.float64))))
    term = float(_terms(win, np.array([win.lk]), pessimistic)[0])
    if pessimistic:
        below = math.exp(min(win.log_tau_lo + win.log_c, 700.0))
        return win.inf_mass + term + below, a, b
    return win.inf_mass - term, a, b


def epsilon_in_window(win: Window, target: float, pessimistic: bool) -> Result:
    """Smallest ε >= 0 with δ(ε) <= target, as far as this window can tell."""
    h = win.h
    j0 = max(win.lk - 1, 0)  # thresholds below lk - 1 would need mass below the window
    if j0 > win.uk:
        j0 = win.uk
    w = _untilted(win, j0, pessimistic)  # masses on j0..uk
    m = w.size
    # S_j = Σ_{k>j} w_k (1 - e^{-(k-j)h}),  R_j = Σ_{k>j} w_k e^{-(k-j)h}, for j = j0..uk.
    eh = math.exp(-h)
    nxt = np.append(w[1:], 0.0)  # w_{j+1}
    big_y = decay_cumsum(nxt[::-1], eh)[::-1]  # w_{j+1} + R_{j+1}
    big_r = eh * big_y
    s = np.cumsum(((1.0 - eh) * big_y)[::-1])[::-1]
    ks = np.arange(j0, j0 + m)
    terms = _terms(win, ks + 1, pessimistic)
    sign = 1.0 if pessimistic else -1.0
    deltas = win.inf_mass + s + sign * terms
    if not pessimistic:
        deltas = np.maximum(deltas, 0.0)
    edge = max(2, m // 50)
    if pessimistic:
        # Upper: δ_true <= δ_up and δ_true decreases, so any ε with δ_up(ε) <= target bounds ε*.
        ok = np.nonzero(deltas <= target)[0]
        if ok.size == 0:
            if win.inf_mass > target:
                return Result(math.inf, "inf", True)
            return Result(ks[-1] * h, "above", False, 1.0)  # mass above the window counts as inf
        i = int(ok[0])
        if i == 0:
            if ks[0] <= 0:
                return Result(0.0, "ok", True, float(terms[0] / target))
            return _solve_below(win, target, pessimistic, ks[0] * h)
        j = i - 1
    else:
        # Lower: δ_true >= δ_low, so every ε with δ_low(ε) > target lies below ε*; take the last.
        # (δ_low need not decrease: the aliasing bound subtracted grows towards the left edge.)
        over = np.nonzero(deltas > target)[0]
        if over.size == 0:
            if ks[0] <= 0:
                return Result(0.0, "ok", True, float(terms[0] / target))
            return _solve_below(win, target, pessimistic, ks[0] * h)
        j = int(over[-1])
        if j == m - 1:
            if win.inf_mass > target:
                return Result(math.inf, "inf", True)
            return Result(ks[-1] * h, "above", True, 1.0)
        i = j + 1
    d_prev = deltas[j]
    r_prev = big_r[j]
    with np.errstate(all="ignore"):
        ratio = max(float(d_prev) - target, 0.0) / float(r_prev) if r_prev > 0 else math.inf
    theta = math.log1p(ratio) if math.isfinite(ratio) else h
    eps = ks[j] * h + min(max(theta, 0.0), h)
    err = float(terms[j] / target)
    status = "ok"
    if i < edge and ks[0] > 0:
        status = "below"
    elif i > m - edge:
        status = "above"
    return Result(max(eps, 0.0), status, True, err)


def _solve_below(win: Window, target: float, pessimistic: bool, top: float) -> Result:
    """The crossing lies left of the window: solve c + A - e^ε B = target on [0, top]."""
    c, a, b = _below_constants(win, pessimistic)
    status = "ok" if win.lam == 0.0 else "below"
    if b <= 0:
        return Result(top if pessimistic else 0.0, status, True, 1.0)
    with np.errstate(all="ignore"):
        num = c + a - target
    if num <= 0:
        return Result(0.0, status, True, 0.0)
    eps = math.log(num / b)
    eps = min(max(eps, 0.0), top)
    err = abs(c - win.inf_mass) / target if target > 0 else 0.0
    return Result(eps, status, True, err)


def delta_in_window(win: Window, epsilon: float, pessimistic: bool) -> Result:
    """δ(ε) from this window (``status`` "below" if ε lies left of its valid part)."""
    h = win.h
    if epsilon < (win.lk - 1) * h:
        c, a, b = _below_constants(win, pessimistic)
        with np.errstate(over="ignore"):
            val = c + a - math.exp(min(epsilon, 700.0)) * b
        val = min(max(val, 0.0), 1.0)
        status = "ok" if win.lam == 0.0 else "below"
        return Result(val, status, True, abs(c - win.inf_mass) / max(val, 1e-300))
    j1 = max(math.floor(epsilon / h) + 1, win.lk)  # first grid point with k h > ε
    while (j1 - 1) * h > epsilon:
        j1 -= 1
    while j1 * h <= epsilon:
        j1 += 1
    term = float(_terms(win, np.array([j1]), pessimistic)[0])
    if j1 > win.uk:
        val = win.inf_mass + (term if pessimistic else 0.0)
        return Result(min(val, 1.0), "ok", True, 0.0)
    w = _untilted(win, j1, pessimistic)
    ks = np.arange(j1, win.uk + 1)
    s = float(np.sum(w * -np.expm1(epsilon - ks * h)))
    val = win.inf_mass + s + (term if pessimistic else -term)
    val = min(max(val, 0.0), 1.0)
    err = term / max(val, 1e-300)
    edge = (win.uk - win.lk + 1) // 50
    status = "ok"
    if j1 < win.lk + edge and win.lk > 0:
        status = "below"
    elif j1 > win.uk - edge:
        status = "above"
    return Result(val, status, True, err)
