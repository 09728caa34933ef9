"""Membership inference: was the target's record used? ROC curves, TPR at low FPR, and the DP bound.

A membership-inference attack is a hypothesis test between "the target is in the data" (member)
and "it is not". Each trial gives the attacker a *score* (higher = more likely a member); the
ROC curve plots the true-positive rate against the false-positive rate over all thresholds.
Carlini et al. 2022 ("Membership inference attacks from first principles") argue for reading
the curve at **low FPR** (1e-3, 1e-2): an attack that confidently identifies a few members is a
real breach even if its accuracy is near 1/2.

**What DP promises** (Wasserman-Zhou 2010; Kairouz-Oh-Viswanath 2015): if the release is
(ε, δ)-DP for neighbours that differ in the target, then *every* test satisfies

    TPR <= min(1, e^ε FPR + δ, 1 - e^-ε (1 - δ - FPR)),

so the whole ROC curve lies under :func:`dp_tpr_bound`. :func:`roc_violation` checks measured
scores against that bound with a simultaneous (DKW) confidence band: a certified violation means
the release is not (ε, δ)-DP (or an event of probability ``1 - confidence`` happened).

Attacks:

* :func:`aggregate_membership` -- the likelihood-ratio test on a released aggregate (a noisy
  count, sum or mean computed with or without the target; the rest of the data known to the
  attacker, the strongest threat model DP covers). For location-family noise (Laplace,
  Gaussian) the likelihood ratio is a non-decreasing function of the output, so the output
  itself (oriented towards the member's mean) is the Neyman-Pearson statistic.
* :func:`lira` -- the likelihood-ratio attack (LiRA, Carlini et al. 2022) on a trained model with
  shadow models: train ``K`` models on random halves of a population; for each (model, example)
  fit Gaussians to the example's logit-scaled confidence under the shadow models that did / did
  not train on it, and score by the log-likelihood ratio. Compared with the global-threshold
  attack on the same confidences (Yeom et al. 2018), which is weak at low FPR.
* :func:`fit_logistic` -- the small model attacked: L2-regularised logistic regression, Newton's
  method in numpy; with ``epsilon``/``delta`` it is made (ε, δ)-DP by output perturbation
  (Chaudhuri-Monteleoni-Sarwate 2011), through :func:`dpkit.mechanisms.gaussian`.

>>> import dpkit as dp
>>> from dpkit.attacks.membership import roc_curve
>>> roc = roc_curve([3.0, 2.0, 0.5], [1.0, 0.0, -1.0])
>>> round(roc.auc, 6)
0.888889
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from dpkit import noise
from dpkit.attacks.audit import AuditResult, empirical_epsilon
from dpkit.noise import Source

__all__ = [
    "DEFAULT_FPRS",
    "ROC",
    "LiraResult",
    "LogisticModel",
    "MembershipResult",
    "RocCheck",
    "aggregate_membership",
    "dp_tpr_bound",
    "fit_logistic",
    "gaussian_features",
    "lira",
    "make_classification",
    "roc_curve",
    "roc_violation",
]

#: False-positive rates at which attacks are read (Carlini et al. 2022).
DEFAULT_FPRS = (1e-3, 1e-2, 1e-1)


# --------------------------------------------------------------------------- ROC
@dataclass(frozen=True)
class ROC:
    """An empirical ROC curve: ``fpr[j], tpr[j]`` for the test "score >= thresholds[j]"
    (``fpr`` and ``tpr`` non-decreasing, from (0, 0) to (1, 1))."""

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    positives: int
    negatives: int

    @property
    def auc(self) -> float:
        """Area under the curve (ties count one half)."""
        return float(np.sum(np.diff(self.fpr) * (self.tpr[1:] + self.tpr[:-1]) / 2.0))

    def tpr_at(self, fpr: float) -> float:
        """The largest TPR among thresholds whose FPR is at most ``fpr`` (no interpolation:
        the attacker must pick a threshold)."""
        if not 0.0 <= fpr <= 1.0:
            raise ValueError(f"fpr must lie in [0, 1] (got {fpr!r})")
        ok = self.fpr <= fpr + 1e-15
        return float(self.tpr[ok].max()) if ok.any() else 0.0

    def summary(self, fprs: Sequence[float] = DEFAULT_FPRS) -> dict[str, float]:
        """``{"auc": …, "tpr@0.001": …, …}``."""
        out = {"auc": self.auc}
        out.update({f"tpr@{f:g}": self.tpr_at(f) for f in fprs})
        return out


def _scores(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty")
    if np.isnan(a).any():
        raise ValueError(f"{name} contains NaN")
    return a


def roc_curve(scores_in: Any, scores_out: Any) -> ROC:
    """ROC of the tests "score >= t" over every distinct ``t``, members = ``scores_in``."""
    s_in = _scores(scores_in, "scores_in")
    s_out = _scores(scores_out, "scores_out")
    thr = np.unique(np.concatenate([s_in, s_out]))[::-1]
    tp = s_in.size - np.searchsorted(np.sort(s_in), thr, side="left")
    fp = s_out.size - np.searchsorted(np.sort(s_out), thr, side="left")
    fpr = np.concatenate([[0.0], fp / s_out.size])
    tpr = np.concatenate([[0.0], tp / s_in.size])
    return ROC(fpr=fpr, tpr=tpr, thresholds=np.concatenate([[np.inf], thr]),
               positives=int(s_in.size), negatives=int(s_out.size))


def dp_tpr_bound(fpr: Any, *, epsilon: float, delta: float = 0.0) -> np.ndarray:
    """The largest TPR any test can reach at ``fpr`` against an (ε, δ)-DP release:
    ``min(1, e^ε FPR + δ, 1 - e^-ε (1 - δ - FPR))`` (Kairouz-Oh-Viswanath 2015, Thm. 2.1)."""
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0 (got {epsilon!r})")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1] (got {delta!r})")
    f = np.clip(np.asarray(fpr, dtype=np.float64), 0.0, 1.0)
    b = np.minimum(math.exp(epsilon) * f + delta, 1.0 - math.exp(-epsilon) * (1.0 - delta - f))
    return np.clip(b, 0.0, 1.0)


@dataclass(frozen=True)
class RocCheck:
    """Outcome of :func:`roc_violation`.

    ``violated``: some threshold's TPR lower band exceeds the DP bound at its FPR upper band.
    ``margin``: the largest ``(TPR - band) - bound(FPR + band)`` over thresholds (negative: no
    evidence against the claim). ``band``: the DKW half-widths (members, non-members).
    """

    violated: bool
    margin: float
    at_fpr: float
    at_tpr: float
    band: tuple[float, float]
    confidence: float


def roc_violation(
    scores_in: Any,
    scores_out: Any,
    *,
    epsilon: float,
    delta: float = 0.0,
    confidence: float = 1 - 1e-6,
) -> RocCheck:
    """Do these scores *prove* that the release is not (ε, δ)-DP?

    Scores are independent trials with the target in (``scores_in``) and out. By the
    Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant, with probability at least
    ``confidence`` the empirical survival functions are within
    ``w = sqrt(ln(4 / (1 - confidence)) / (2 n))`` of the true ones *at every threshold at
    once* (each of the two at level ``(1 - confidence)/2``). So if the release is (ε, δ)-DP,
    with that probability no threshold has ``TPR_hat - w_in > dp_tpr_bound(FPR_hat + w_out)``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1) (got {confidence!r})")
    roc = roc_curve(scores_in, scores_out)
    alpha = 1.0 - confidence
    w_in = math.sqrt(math.log(4.0 / alpha) / (2.0 * roc.positives))
    w_out = math.sqrt(math.log(4.0 / alpha) / (2.0 * roc.negatives))
    gap = (roc.tpr - w_in) - dp_tpr_bound(roc.fpr + w_out, epsilon=epsilon, delta=delta)
    j = int(np.argmax(gap))
    return RocCheck(
        violated=bool(gap[j] > 0),
        margin=float(gap[j]),
        at_fpr=float(roc.fpr[j]),
        at_tpr=float(roc.tpr[j]),
        band=(w_in, w_out),
        confidence=float(confidence),
    )


# --------------------------------------------------------------------------- aggregates
@dataclass(frozen=True)
class MembershipResult:
    """Scores of an attack on member and non-member trials, their ROC, and the ε they certify."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    roc: ROC
    audit: AuditResult | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    def summary(self, fprs: Sequence[float] = DEFAULT_FPRS) -> dict[str, float]:
        out = self.roc.summary(fprs)
        if self.audit is not None:
            out["epsilon_lower"] = self.audit.epsilon_lower
        return out


def aggregate_membership(
    release: Callable[[bool, int], Any],
    *,
    trials: int,
    member_mean: float | None = None,
    nonmember_mean: float | None = None,
    confidence: float = 0.95,
    audit: bool = True,
) -> MembershipResult:
    """The likelihood-ratio attack on a released number, computed with or without the target.

    ``release(member, size)`` returns ``size`` independent releases (1-d array) on the data
    with the target (``member=True``) or without it. The attacker knows the rest of the data,
    hence the two exact answers ``member_mean`` / ``nonmember_mean`` (for orientation only: when
    omitted, the orientation is taken from the sample means of the first 10% of trials, which
    are then left out of the ROC). For location-family noise the likelihood ratio is monotone
    in the output, so score = output (or its negative) is the optimal test at every FPR.

    ``audit``: also run :func:`dpkit.attacks.audit.empirical_epsilon` on the two samples (the
    certified lower bound on ε that the same outputs imply, at ``confidence``).
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 20:
        raise ValueError(f"trials must be an int >= 20 (got {trials!r})")
    out_in = np.asarray(release(True, trials), dtype=np.float64).ravel()
    out_out = np.asarray(release(False, trials), dtype=np.float64).ravel()
    if out_in.size != trials or out_out.size != trials:
        raise ValueError(f"release(member, {trials}) must return {trials} numbers")
    if member_mean is not None and nonmember_mean is not None:
        sign = 1.0 if member_mean >= nonmember_mean else -1.0
    else:
        k = max(2, trials // 10)
        sign = 1.0 if out_in[:k].mean() >= out_out[:k].mean() else -1.0
        out_in, out_out = out_in[k:], out_out[k:]
    s_in, s_out = sign * out_in, sign * out_out
    res = empirical_epsilon(s_in, s_out, confidence=confidence) if audit else None
    return MembershipResult(scores_in=s_in, scores_out=s_out, roc=roc_curve(s_in, s_out),
                            audit=res, details={"orientation": sign})


# --------------------------------------------------------------------------- a small model
def gaussian_features(shape: int | tuple[int, ...], *, source: Source | None = None) -> np.ndarray:
    """Approximately standard normal floats for synthetic data: exact discrete Gaussian draws
    with variance 2^20, divided by 2^10 (the normal law restricted to a lattice of step 1/1024;
    mean 0, variance 1 up to ~1e-6). Not privacy noise: mechanisms use :mod:`dpkit.noise`."""
    return noise.discrete_gaussian(2**20, shape, source=source).astype(np.float64) / 2**10


def make_classification(
    n: int, d: int, *, label_noise: float = 0.2, source: Source | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` examples in ``d`` dimensions with rows of norm about 1 (and at most 1), labels
    from a random hyperplane, a fraction ``label_noise`` flipped (outliers a model memorises)."""
    if not 0.0 <= label_noise < 0.5:
        raise ValueError(f"label_noise must lie in [0, 0.5) (got {label_noise!r})")
    X = gaussian_features((n, d), source=source) / math.sqrt(d)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X = X / np.maximum(norms, 1.0)
    w = gaussian_features(d, source=source)
    y = (X @ w > 0).astype(np.int64)
    if label_noise > 0:
        flip = noise.bernoulli(label_noise, n, source=source)
        y[flip] = 1 - y[flip]
    return X, y


@dataclass(frozen=True)
class LogisticModel:
    """``P(y = 1 | x) = sigmoid(x · w + b)``."""

    w: np.ndarray
    b: float
    private: bool = False

    def decision(self, X: Any) -> np.ndarray:
        return np.asarray(X, dtype=np.float64) @ self.w + self.b

    def predict_proba(self, X: Any) -> np.ndarray:
        return special.expit(self.decision(X))

    def logit_confidence(self, X: Any, y: Any) -> np.ndarray:
        """``log(p_y / (1 - p_y))`` of the true label: the statistic LiRA models as Gaussian
        (Carlini et al. 2022, Sec. 4.3); exactly the signed margin for logistic regression."""
        s = 2.0 * np.asarray(y, dtype=np.float64) - 1.0
        return s * self.decision(X)


def fit_logistic(
    X: Any,
    y: Any,
    *,
    l2: float = 1e-2,
    intercept: bool = True,
    epsilon: float | None = None,
    delta: float | None = None,
    max_iter: int = 50,
    source: Source | None = None,
) -> LogisticModel:
    """L2-regularised logistic regression, minimising
    ``(1/n) sum_i log(1 + exp(-s_i (x_i · w + b))) + (l2/2) |w|^2`` by Newton's method with
    backtracking (``s_i = ±1``).

    With ``epsilon`` and ``delta``: (ε, δ)-DP by **output perturbation** (Chaudhuri, Monteleoni,
    Sarwate 2011, Thm. 6 with Gaussian noise): no intercept, rows must have ``|x_i| <= 1``; the
    loss is 1-Lipschitz and the objective ``l2``-strongly convex, so the minimiser moves by at
    most ``2 / (n l2)`` in L2 norm when one example is *replaced* (neighbouring relation:
    replace-one, fixed ``n``); :func:`dpkit.mechanisms.gaussian` adds noise for that sensitivity.
    """
    X = np.asarray(X, dtype=np.float64)
    yv = np.asarray(y, dtype=np.float64).ravel()
    if X.ndim != 2 or yv.shape != (X.shape[0],) or X.shape[0] == 0:
        raise ValueError(f"X must be (n, d) and y (n,) with n >= 1 (got {X.shape}, {yv.shape})")
    if not np.isin(yv, (0.0, 1.0)).all():
        raise ValueError("labels y must be 0 or 1")
    if not (math.isfinite(l2) and l2 > 0):
        raise ValueError(f"l2 must be > 0 (got {l2!r})")
    private = epsilon is not None or delta is not None
    if private:
        if epsilon is None or delta is None:
            raise ValueError("give both epsilon and delta for the private fit")
        if intercept:
            raise ValueError("the private fit has no intercept: pass intercept=False")
        if (np.linalg.norm(X, axis=1) > 1.0 + 1e-12).any():
            raise ValueError("the private fit needs rows with |x| <= 1: rescale or clip X")
    n, d = X.shape
    Z = np.hstack([X, np.ones((n, 1))]) if intercept else X
    s = 2.0 * yv - 1.0
    reg = np.full(Z.shape[1], l2)
    if intercept:
        reg[-1] = 0.0
    theta = np.zeros(Z.shape[1])

    def objective(t: np.ndarray) -> float:
        return float(-special.log_expit(s * (Z @ t)).mean() + 0.5 * np.sum(reg * t * t))

    f = objective(theta)
    for _ in range(max_iter):
        m = s * (Z @ theta)
        p = special.expit(-m)  # = 1 - sigmoid(margin)
        grad = -(Z.T @ (p * s)) / n + reg * theta
        h = p * (1.0 - p)
        H = (Z.T * h) @ Z / n + np.diag(reg + 1e-10)
        step = np.linalg.solve(H, grad)
        t = 1.0
        while True:
            cand = theta - t * step
            fc = objective(cand)
            if fc <= f - 1e-4 * t * float(grad @ step) or t < 1e-8:
                break
            t /= 2.0
        theta, f_old, f = cand, f, fc
        if f_old - f < 1e-12 * max(1.0, abs(f)):
            break
    w = theta[:d] if intercept else theta
    b = float(theta[d]) if intercept else 0.0
    if private:
        from dpkit.mechanisms import gaussian

        assert epsilon is not None and delta is not None  # checked above
        w = np.asarray(
            gaussian(w, sensitivity=2.0 / (n * l2), epsilon=float(epsilon),
                     delta=float(delta), source=source).value,
            dtype=np.float64,
        )
    return LogisticModel(w=w, b=b, private=private)


# --------------------------------------------------------------------------- LiRA
@dataclass(frozen=True)
class LiraResult:
    """Per (model, example) statistics of a shadow-model experiment and the two attacks' ROCs.

    ``membership[k, i]``: example ``i`` was in model ``k``'s training set; ``confidence[k, i]``:
    its logit-scaled confidence under model ``k``; ``lira_scores`` (leave-one-model-out online
    LiRA) and ``threshold_scores`` (the confidence itself) in the same shape.
    """

    membership: np.ndarray
    confidence: np.ndarray
    lira_scores: np.ndarray
    threshold_scores: np.ndarray
    lira: ROC
    threshold: ROC

    def summary(self, fprs: Sequence[float] = DEFAULT_FPRS) -> dict[str, dict[str, float]]:
        return {"lira": self.lira.summary(fprs), "threshold": self.threshold.summary(fprs)}


def lira(
    X: Any,
    y: Any,
    *,
    shadow_models: int = 64,
    fit: Callable[[np.ndarray, np.ndarray], LogisticModel] | None = None,
    min_variance: float = 1e-4,
    source: Source | None = None,
) -> LiraResult:
    """Online LiRA (Carlini et al. 2022) with ``shadow_models`` models, evaluated
    leave-one-model-out: every model in turn is the target and the other ``K - 1`` its shadows.

    Each example joins each model's training set independently with probability 1/2. For a
    target model ``k`` and example ``i``, the shadows that did (did not) train on ``i`` give a
    mean and variance of its confidence; the score is
    ``log N(c_ki; mu_in, var_in) - log N(c_ki; mu_out, var_out)``. ``fit(X, y)`` trains a model
    (default: :func:`fit_logistic` with ``l2=1e-2``); ``source`` draws the training sets.
    """
    X = np.asarray(X, dtype=np.float64)
    yv = np.asarray(y).ravel()
    K = int(shadow_models)
    if K < 4:
        raise ValueError(f"shadow_models must be >= 4 (got {shadow_models!r})")
    fitter = fit if fit is not None else (lambda a, b: fit_logistic(a, b, l2=1e-2))
    N = X.shape[0]
    member = noise.bernoulli(0.5, (K, N), source=source)
    conf = np.empty((K, N))
    for k in range(K):
        model = fitter(X[member[k]], yv[member[k]])
        conf[k] = model.logit_confidence(X, yv)
    M = member.astype(np.float64)
    totals = [(M * conf).sum(0), ((1 - M) * conf).sum(0), (M * conf**2).sum(0),
              ((1 - M) * conf**2).sum(0), M.sum(0), (1 - M).sum(0)]
    scores = np.empty((K, N))
    for k in range(K):
        mk, ck = M[k], conf[k]
        s_in, s_out = totals[0] - mk * ck, totals[1] - (1 - mk) * ck
        q_in, q_out = totals[2] - mk * ck**2, totals[3] - (1 - mk) * ck**2
        n_in, n_out = np.maximum(totals[4] - mk, 1), np.maximum(totals[5] - (1 - mk), 1)
        mu_in, mu_out = s_in / n_in, s_out / n_out
        var_in = np.maximum(q_in / n_in - mu_in**2, min_variance)
        var_out = np.maximum(q_out / n_out - mu_out**2, min_variance)
        scores[k] = (-0.5 * (ck - mu_in) ** 2 / var_in - 0.5 * np.log(var_in)
                     + 0.5 * (ck - mu_out) ** 2 / var_out + 0.5 * np.log(var_out))
    inside = member.astype(bool)
    return LiraResult(
        membership=inside,
        confidence=conf,
        lira_scores=scores,
        threshold_scores=conf,
        lira=roc_curve(scores[inside], scores[~inside]),
        threshold=roc_curve(conf[inside], conf[~inside]),
    )
