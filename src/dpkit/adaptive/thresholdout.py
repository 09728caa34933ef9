"""Thresholdout: a holdout set that can be reused for adaptively chosen questions.

Dwork, Feldman, Hardt, Pitassi, Reingold and Roth, "The reusable holdout" (Science 2015;
"Generalization in adaptive data analysis and holdout reuse", NeurIPS 2015). An analyst who
picks the next question after seeing the previous answers overfits a holdout that answers
exactly. Thresholdout answers a statistical query ``f`` (a function from a row to ``[0, 1]``)
with the **training** mean while it agrees with the holdout mean within a noisy threshold, and
with a **noisy holdout** mean otherwise; only the disagreements spend the budget.

**Privacy** (of the holdout; the training set is the analyst's own). Neighbouring relation:
replace one holdout row (``n`` fixed), so a mean has sensitivity ``Δ = 1/n``. The comparison is
the sparse vector technique (Lyu-Su-Li 2017, Alg. 1) with threshold noise ``Lap(2σ)`` and query
noise ``Lap(4σ)`` (ε1 = ε2 = Δ/(2σ)); each disagreement releases the holdout mean with
``Lap(σ)`` (ε = Δ/σ). A round (from one disagreement to the next) costs ``Δ/σ`` for the
comparison however many queries it holds, plus ``Δ/σ`` for its answer: at most
``2·budget/(σ·n)`` in all, pure DP. Noise is exact discrete Laplace on a grid of width
``w = 2^-k <= Δ/1024``, so each ``Δ`` above reads ``Δ + w`` (the grid's rounding), stated in
:attr:`Thresholdout.epsilon`. Every round and answer is recorded as a ``PureDP`` event
(:attr:`Thresholdout.events`).

**Generalisation** (the point of it). A DP answer transfers to the population: by the transfer
theorem of the papers above, with ``m`` queries, if the holdout is large compared with
``sqrt(budget)·log(m)/τ²`` the answers are within about ``τ + threshold`` of the true
population means with high probability, however the queries were chosen. What it does not
promise: the training-set answers are as biased as the training set; the guarantee is about the
holdout's answers and lapses once the budget is spent (further queries are refused).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from dpkit import events as ev
from dpkit import noise as _noise

__all__ = ["BudgetSpent", "Thresholdout"]


class BudgetSpent(RuntimeError):  # noqa: N818 - reads as a sentence: "budget spent"
    """The holdout's budget of over-threshold answers is used up: it can answer no more."""


def _rows(data: Any, what: str) -> Any:
    if data is None or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError(f"{what} must hold at least one row (got {type(data).__name__})")
    return data


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number (got {value!r})")
    return float(value)


def _clamped_mean(values: np.ndarray) -> float:
    """Values clamped to ``[0, 1]`` (NaN as 0), so that one row moves the mean by ``1/n``."""
    return float(np.clip(np.nan_to_num(values, nan=0.0), 0.0, 1.0).mean())


def _one(f: Callable[..., Any], row: Any, vectorized: bool) -> float:
    """``f`` on one holdout row (a one-row batch when ``vectorized``); 0 when it fails."""
    try:
        if vectorized:
            out = np.asarray(f(row), dtype=np.float64).reshape(-1)
            return float(out[0]) if out.shape[0] == 1 else 0.0
        return float(f(row))
    except Exception:
        return 0.0


class Thresholdout:
    """A reusable holdout (see the module docstring for the guarantee).

    ``train`` and ``holdout``: the rows (a numpy array, a DataFrame, any sequence);
    ``threshold``: how far the two means may differ before the holdout answers (e.g. 0.04);
    ``sigma``: the noise scale (e.g. 0.01); ``budget``: how many over-threshold answers the
    holdout gives before it refuses (:class:`BudgetSpent`). ``vectorized=True`` (default): a
    query takes all rows at once and returns one value per row (``lambda X: X[:, 3] > 0``);
    ``False``: it takes one row. Values are clamped to ``[0, 1]`` (NaN counts as 0), and on
    the holdout a query that fails, warns or returns another shape is run row by row, a
    failing row counting 0, so no holdout row can make a query raise or warn. A vectorized
    query must be row-wise (each value a function of its own row): a function of the whole
    batch (``np.full(len(X), X.min())``) has no sensitivity ``1/n`` and the guarantee does not
    hold for it; pass ``vectorized=False`` when the queries are not known to be row-wise.
    ``max_epsilon``: refuse parameters whose worst-case ε
    exceeds it (default 1: beyond, the transfer theorem promises little).
    """

    def __init__(self, train: Any, holdout: Any, *, threshold: float, sigma: float, budget: int,
                 vectorized: bool = True, max_epsilon: float = 1.0,
                 source: _noise.Source | None = None) -> None:
        self._train = _rows(train, "train")
        self._holdout = _rows(holdout, "holdout")
        self.threshold = _positive(threshold, "threshold")
        self.sigma = _positive(sigma, "sigma")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(f"budget must be a positive integer count of answers (got {budget!r})")
        self.budget = budget
        self.vectorized = bool(vectorized)
        self._source = source
        n = len(self._holdout)
        self.n = n
        # the grid: the largest power of two at most Δ/1024 (so Δ + w <= 1.001 Δ)
        self._k = math.ceil(math.log2(n * 1024))
        self._w = 2.0 ** -self._k
        per_mean = (1.0 / n + self._w) / self.sigma  # Δ/σ with the grid's rounding
        self._eps_round, self._eps_answer = per_mean, per_mean
        worst = budget * (self._eps_round + self._eps_answer)
        if not max_epsilon > 0:  # math.inf allowed: the analyst knowingly waives the cap
            raise ValueError(f"max_epsilon must be positive (got {max_epsilon!r})")
        if worst > max_epsilon:
            raise ValueError(
                f"with a holdout of {n} rows, sigma={self.sigma:g} and budget={budget} the "
                f"holdout's epsilon may reach {worst:.3g} > max_epsilon={max_epsilon:g}: use a "
                f"larger sigma, a smaller budget or a larger holdout (epsilon = 2 budget / "
                f"(sigma n)), or raise max_epsilon knowingly")
        self.events: list[ev.Event] = []
        self.answered = 0  # over-threshold answers given
        self.queries = 0
        self._noisy_threshold = self._new_round()

    # ------------------------------------------------------------------ noise on the grid

    def _dlap(self, scale: float) -> int:
        """One discrete Laplace draw, in grid units, of real scale ``scale``."""
        return int(_noise.discrete_laplace(scale / self._w, 1, source=self._source)[0])

    def _new_round(self) -> int:
        self.events.append(ev.PureDP(self._eps_round))
        return math.floor(self.threshold / self._w) + self._dlap(2.0 * self.sigma)

    # ------------------------------------------------------------------ queries

    def _mean(self, f: Callable[..., Any], data: Any) -> float:
        """The mean of ``f`` over the analyst's own rows (errors and warnings are theirs)."""
        if self.vectorized:
            values = np.asarray(f(data), dtype=np.float64).reshape(-1)
            if values.shape[0] != len(data):
                raise ValueError(f"a vectorized query must return one value per row "
                                 f"({len(data)}), got {values.shape[0]}")
        else:
            values = np.fromiter((float(f(row)) for row in data), dtype=np.float64,
                                 count=len(data))
        return _clamped_mean(values)

    def _holdout_mean(self, f: Callable[..., Any]) -> float:
        """The mean of ``f`` over the holdout, total and silent: nothing the caller sees but
        the noisy answer may depend on a holdout row (FINDINGS.md H2: a query that raised,
        warned or returned another shape on one holdout row told it apart, outside the
        budget, and a shape error quoted an exact count of holdout rows). Warnings are
        dropped; if ``f`` fails on the whole holdout or returns another number of values, it
        is run row by row, and a row on which it fails (or gives not one value) counts 0:
        the mean of a row-wise function either way, so the sensitivity stays ``1/n``."""
        data = self._holdout
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if self.vectorized:
                try:
                    values = np.asarray(f(data), dtype=np.float64).reshape(-1)
                    if values.shape[0] == len(data):
                        return _clamped_mean(values)
                except Exception:  # run row by row below
                    pass
                rows = (data[i:i + 1] for i in range(len(data)))
            else:
                rows = iter(data)
            return _clamped_mean(np.fromiter((_one(f, r, self.vectorized) for r in rows),
                                             dtype=np.float64, count=len(data)))

    def query(self, f: Callable[..., Any]) -> float:
        """The answer to statistical query ``f``: the training mean, or a noisy holdout mean
        when the two disagree by more than the noisy threshold (one unit of the budget)."""
        if self.answered >= self.budget:
            raise BudgetSpent(f"the holdout gave its {self.budget} over-threshold answers; it "
                              f"answers no more (epsilon spent {self.epsilon:.3g})")
        train_mean = self._mean(f, self._train)  # the shape check runs on the analyst's rows
        holdout_mean = self._holdout_mean(f)
        self.queries += 1
        w = self._w
        gap = math.floor(abs(holdout_mean - train_mean) / w)
        if gap + self._dlap(4.0 * self.sigma) < self._noisy_threshold:
            return train_mean
        self.answered += 1
        self.events.append(ev.PureDP(self._eps_answer))
        answer = (math.floor(holdout_mean / w) + self._dlap(self.sigma)) * w
        if self.answered < self.budget:
            self._noisy_threshold = self._new_round()
        return float(answer)

    @property
    def epsilon(self) -> float:
        """The holdout's ε so far (pure DP, basic composition of :attr:`events`)."""
        return float(math.fsum(e.epsilon for e in self.events if isinstance(e, ev.PureDP)))

    @property
    def remaining(self) -> int:
        """Over-threshold answers left."""
        return self.budget - self.answered

    def __repr__(self) -> str:
        return (f"Thresholdout(n={self.n}, threshold={self.threshold:g}, sigma={self.sigma:g}, "
                f"answered {self.answered}/{self.budget} over threshold in {self.queries} "
                f"queries, epsilon {self.epsilon:.3g})")
