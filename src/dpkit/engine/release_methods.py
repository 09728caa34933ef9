"""The release families and model training as curator methods (each a few lines over
:mod:`dpkit.engine.families`), kept apart so that :mod:`dpkit.engine.curator` stays the thin
front: lifecycle, tables, analysts, queries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpkit.engine import families
from dpkit.engine.families.fit import FitPreview, TableModel, preview_fit
from dpkit.engine.families.fit import fit as fit_model
from dpkit.engine.results import Preview, Result

__all__ = ["ReleaseMethods"]


class ReleaseMethods:
    """Methods of :class:`dpkit.engine.Curator` that delegate to the release families."""

    def _families(self, analyst: None = None) -> families.Context:
        raise NotImplementedError  # the curator gives its project's context

    def ranges(self, table: str, column: str, ranges: Sequence[tuple[float, float]], *,
               where: str | None = None, epsilon: float | None = None,
               rho: float | None = None, delta: float | None = None, strategy: Any = None,
               bins: int | None = None, bounds: Mapping[str, Any] | None = None,
               level: float = 0.95, accuracy: float | None = None,
               diagnostics: bool = True, analyst: None = None) -> Result:
        """Counts of rows with ``low <= column <= high`` for every ``(low, high)`` in
        ``ranges``, answered together with correlated noise and charged once.

        ε-DP (``epsilon=``), ρ-zCDP (``rho=``) or the Gaussian mechanism at (ε, δ)
        (``epsilon=, delta=``) for add/remove one privacy unit with at most
        ``max_rows_per_unit`` rows. ``accuracy=`` (instead of ``epsilon=``; also for
        :meth:`cdf`, :meth:`quantiles`, :meth:`marginals`): the largest CI half-width wanted.
        Grid, strategy and columns: :func:`dpkit.engine.families.answer.ranges`.

        >>> res = cur.ranges("visits", "age", [(0, 17), (18, 64), (65, 100)], epsilon=0.5)
        ... # doctest: +SKIP
        """
        ask = families.RangesAsk(table=table, column=column, ranges=ranges, where=where,
                                 strategy=strategy, bins=bins, bounds=bounds, level=level,
                                 diagnostics=diagnostics)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.ranges(self._families(analyst), ask, target, accuracy=accuracy)

    def cdf(self, table: str, column: str, *, where: str | None = None,
            epsilon: float | None = None, rho: float | None = None,
            delta: float | None = None, strategy: Any = None, bins: int | None = None,
            bounds: Mapping[str, Any] | None = None, level: float = 0.95,
            accuracy: float | None = None, diagnostics: bool = True, grid: str = "linear",
            analyst: None = None) -> Result:
        """The cumulative distribution of ``column`` over its declared bounds, with a
        **simultaneous** confidence band (all rows at once at ``level``). Same guarantee as
        :meth:`ranges`; details: :func:`dpkit.engine.families.answer.cdf`. ``grid``:
        ``"linear"`` (equal cells), ``"log"`` (log-scale cells, for long tails) or
        ``"auto"`` (log-scale when the bounds span four orders of magnitude): public."""
        ask = families.CdfAsk(table=table, column=column, where=where, strategy=strategy,
                              bins=bins, bounds=bounds, level=level, diagnostics=diagnostics,
                              grid=grid)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.cdf(self._families(analyst), ask, target, accuracy=accuracy)

    def quantiles(self, table: str, column: str, probabilities: Sequence[float], *,
                  where: str | None = None, epsilon: float | None = None,
                  rho: float | None = None, delta: float | None = None, strategy: Any = None,
                  bins: int | None = None, bounds: Mapping[str, Any] | None = None,
                  level: float = 0.95, accuracy: float | None = None,
                  diagnostics: bool = True, grid: str = "linear",
                  analyst: None = None) -> Result:
        """Any number of quantiles of ``column`` from one private CDF (one charge), with
        intervals holding jointly at ``level``. Same guarantee and ``grid`` as :meth:`cdf`;
        details: :func:`dpkit.engine.families.answer.quantiles`."""
        ask = families.CdfAsk(table=table, column=column, probabilities=probabilities,
                              where=where, strategy=strategy, bins=bins, bounds=bounds,
                              level=level, diagnostics=diagnostics, grid=grid)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.quantiles(self._families(analyst), ask, target, accuracy=accuracy)

    def marginals(self, table: str, columns: Sequence[str | Sequence[str]], *,
                  k: int | None = None, where: str | None = None,
                  epsilon: float | None = None, rho: float | None = None,
                  delta: float | None = None, strategy: Any = None, bins: int | None = None,
                  bounds: Mapping[str, Any] | None = None, level: float = 0.95,
                  accuracy: float | None = None, diagnostics: bool = True,
                  analyst: None = None) -> Result:
        """Marginal tables (contingency tables) over declared domains, answered together
        (mutually consistent). Same guarantee as :meth:`ranges`; ``columns`` and ``k``:
        :func:`dpkit.engine.families.answer.marginals`."""
        ask = families.MarginalsAsk(table=table, columns=columns, k=k, where=where,
                                    strategy=strategy, bins=bins, bounds=bounds, level=level,
                                    diagnostics=diagnostics)
        target = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.marginals(self._families(analyst), ask, target, accuracy=accuracy)

    def synthetic(self, table: str, columns: Sequence[str], *, where: str | None = None,
                  epsilon: float | None = None, rho: float | None = None,
                  delta: float | None = None, rows: int | None = None,
                  method: str = "auto", k: int | None = None, rounds: int = 20,
                  bins: int | None = None, bounds: Mapping[str, Any] | None = None,
                  level: float = 0.95, target: str | None = None,
                  diagnostics: bool = True, analyst: None = None) -> families.SyntheticData:
        """Synthetic records over the declared domains of ``columns``, charged to the ledger.

        Post-processing of one ε-DP (``epsilon=``) or ρ-zCDP (``rho=``; ``epsilon=, delta=``
        converts to the largest ρ meeting (ε, δ)) release for add/remove one privacy unit: no
        record is a real row, and only the measured marginals are preserved, approximately.
        ``method``: ``"auto"`` (default: ``"factorization"`` up to 4096 grid cells, ``"mst"``
        beyond), ``"factorization"``, ``"mwem"`` or ``"mst"`` (any number of columns: 1-way and
        tree-selected 2-way marginals; ``target=`` a column measured with every selected
        pair): see :func:`dpkit.engine.families.answer.synthetic`. Returns
        :class:`~dpkit.engine.families.SyntheticData`.
        """
        ask = families.SyntheticAsk(table=table, columns=columns, where=where, rows=rows,
                                    method=method, k=k, rounds=rounds, bins=bins,
                                    bounds=bounds, level=level, target=target,
                                    diagnostics=diagnostics)
        privacy = families.Target(epsilon=epsilon, rho=rho, delta=delta)
        return families.synthetic(self._families(analyst), ask, privacy)

    def preview_release(self, kind: str, table: str, *args: Any, analyst: None = None,
                        **kwargs: Any) -> Preview:
        """Cost and expected accuracy of :meth:`ranges` / :meth:`cdf` / :meth:`quantiles` /
        :meth:`marginals` (``kind``) with the same arguments, without reading data or spending
        anything. ``outputs`` lists the expected RMSE and the largest CI half-width."""
        return families.preview(self._families(analyst), kind, table, *args, **kwargs)

    def fit(self, model: Any, query: str, *, label: str, epsilon: float | None = None,
            delta: float | None = None, analyst: None = None) -> TableModel:
        """Train a ``dpkit.learn`` estimator on the rows ``query`` selects
        (``SELECT a, b, label FROM t [WHERE ...]``), charged to the ledger once before any row is
        read, at the table's privacy unit (user level: a unit's rows are bounded and clipped
        together). Features are encoded from the declarations only (bounds: clamped to
        [-1, 1]; domains: indicators); ``label`` has declared classes or bounds, which become the
        model's ``classes`` / ``label_bounds`` when it leaves them unset. ``epsilon=`` /
        ``delta=`` set the model's own (``delta`` defaults to a tenth of the caller's δ: the
        project's, or an analyst's own cap, as for a query). The fit draws from the
        project's noise source (a model's own ``random_state`` is refused: leave it unset);
        what it released besides the model (``batch_size="auto"``'s N̂) is appended to the
        ledger as a note on its charge. Returns a
        :class:`~dpkit.engine.families.fit.TableModel` (``.model``, ``.predict(rows)``,
        ``.score(rows, labels)``, ``.epsilon``). See :mod:`dpkit.engine.families.fit` for the
        guarantee.
        """
        return fit_model(self._families(analyst), model, query, label=label, epsilon=epsilon,
                         delta=delta)

    def preview_fit(self, model: Any, query: str, *, label: str, epsilon: float | None = None,
                    delta: float | None = None, analyst: None = None) -> FitPreview:
        """What :meth:`fit` with the same arguments would charge now: the model's event priced
        by the ledger (``.cost``, ``.delta``, ``.remaining``, ``.affordable``), after the same
        checks (the query, the encoding, the model's options); no row read, nothing spent. The
        model is configured as :meth:`fit` would (its ``epsilon``, ``delta``, classes)."""
        return preview_fit(self._families(analyst), model, query, label=label,
                           epsilon=epsilon, delta=delta)
