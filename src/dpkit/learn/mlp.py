"""``MLPClassifier``: a differentially private multi-layer perceptron with scikit-learn's API.

Trained with DP-SGD (:func:`dpkit.learn.torch.make_private`: Poisson batches, per-example
clipping, Gaussian noise from the OS CSPRNG, PLD accounting); needs the ``[torch]`` extra.
Guarantee: the fitted weights are (ε, δ)-DP for add/remove-one-example neighbours, ε the
``epsilon`` asked for (the noise multiplier is calibrated so the PLD ε after ``epochs`` epochs is
at most it). The set of class labels is treated as public (pass ``classes=`` to fix it rather
than read it from ``y``), and so is the feature scaling: features should already lie in a known
range (e.g. pixels / 255); nothing is computed from the data except the private gradients.

User level: ``fit(X, y, units=ids)`` trains with user-level DP-SGD (one privacy-unit id per row;
units Poisson-sampled whole, each unit's summed gradient clipped): the same ε for add/remove-
one-**unit** neighbours. Through the curator (``cur.fit``), :meth:`MLPClassifier.privacy_event`
fixes the event from public parameters before any row is read; ``sample_rate=`` then sets the
sampling rate (the row count is private, so the batch size cannot), and the units are the
table's privacy units, bounded to ``max_rows_per_unit`` rows by the curator.

``batch_size="auto"`` (the default through the curator): the divisor of the noisy gradient sum,
the expected batch ``q × rows``, comes from a noisy count of the bounded rows released with
``count_fraction`` of ε (geometric mechanism, sensitivity the rows a unit may keep), composed
into the fit's one event; σ is calibrated to what is left (:mod:`dpkit.learn.batch_count`).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from typing import Any

import numpy as np

from dpkit import accounting, events, noise
from dpkit.noise.grid import grid_exponent

from ._base import (
    check_count,
    check_delta_alone,
    check_epsilon,
    check_non_negative,
    check_positive,
)
from .batch_count import (
    BatchCount,
    calibrate_with_count,
    check_batch_size,
    check_count_fraction,
    count_plan,
    noisy_divisor,
)

__all__ = ["MLPClassifier", "mlp_network"]


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("MLPClassifier needs PyTorch: pip install 'dpkit[torch]'") from exc
    return torch


def _torch_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        raise ImportError("MLPClassifier needs PyTorch: pip install 'dpkit[torch]'")


def mlp_network(d: int, k: int, hidden_layer_sizes: Any, activation: str,
                source: noise.Source | None) -> Any:
    """A torch MLP ``d -> hidden... -> k`` with ``activation`` between layers, its weights
    drawn in torch's default range by :mod:`dpkit.noise` (so a seeded source reproduces it) and
    zero biases. Shared by :class:`MLPClassifier` and the attacks' non-private baseline."""
    torch = _torch()
    act = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}.get(activation)
    if act is None:
        raise ValueError(f"activation must be 'tanh' or 'relu' (got {activation!r})")
    sizes = [d, *[int(h) for h in hidden_layer_sizes], k]
    layers: list[Any] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        lin = torch.nn.Linear(a, b)
        bound = 1.0 / math.sqrt(a)  # torch's default range, drawn by dpkit.noise
        u = noise.uniform_float01((b, a), source=source)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy((2 * u - 1) * bound))
            lin.bias.zero_()
        layers += [lin] if i == len(sizes) - 2 else [lin, act()]
    return torch.nn.Sequential(*layers)


def _null_as_one_unit(units: Any) -> np.ndarray:
    """The curator's unit ids as codes, NULL (None / NaN) being one more unit: its bounding
    groups NULL ids together (at most its row cap survive), so refusing them here, after the
    charge, would only say whether the read held any."""
    index: dict[Any, int] = {}
    out = np.empty(len(units), dtype=np.int64)
    for i, v in enumerate(np.asarray(units, dtype=object).tolist()):
        missing = v is None or (isinstance(v, float) and math.isnan(v))
        out[i] = index.setdefault(("null",) if missing else ("id", v), len(index))
    return out


class MLPClassifier:
    """Differentially private MLP classifier (scikit-learn estimator API).

    Parameters: ``hidden_layer_sizes`` (units per hidden layer), ``epsilon``, ``delta``,
    ``epochs``, ``batch_size`` (below), ``max_grad_norm`` (clip C),
    ``learning_rate`` and ``momentum`` (SGD), ``activation`` ("tanh" or "relu"),
    ``averaging`` (the fitted weights are the mean of the iterates over this last fraction of
    the steps, Polyak averaging: post-processing, free in privacy, and it averages the noise
    out; 0 keeps the last iterate), ``schedule`` ("constant" or "cosine": the learning rate
    times ``(1 + cos(π t/T))/2`` at step t of T, a function of the step count only),
    ``features`` (None, or a *fixed public row-wise* transform with a ``transform(X)`` method,
    such as :class:`dpkit.learn.features.ScatterFeatures`, applied to ``X`` in ``fit`` and
    ``predict``; it is never fitted on the data, which is what keeps it free in privacy: a
    transform that learns from the rows would break the guarantee),
    ``classes`` (the public label set), ``random_state`` (an int makes the weights'
    initialisation *and the noise* reproducible and insecure: tests only),
    ``sample_rate`` (None: ``batch_size / n``; else the Poisson rate of each step, rounded to
    ``1/k`` with ``k`` steps an epoch; required through the curator, where ``n`` is private),
    ``batch_size``: the expected Poisson batch, which divides the noisy gradient sum.
    An int fixes it (without ``sample_rate`` it also sets the rate, ``batch_size / n``).
    ``"auto"`` (needs ``sample_rate``) spends ``count_fraction`` of ε on a noisy count N̂ of
    the examples trained on (the bounded rows; user level: rows, not units, since whole units
    are sampled and the expected batch is ``q × rows``; sensitivity the rows a unit may keep)
    and divides by ``max(1, q N̂)``; the fit's event composes the count with DP-SGD, whose σ is
    calibrated so that the composition meets ``epsilon`` (:mod:`dpkit.learn.batch_count`);
    ``rows_estimate_`` and ``batch_divisor_`` report N̂ and the divisor. None (the default):
    ``"auto"`` through the curator; outside it, 1000 without ``sample_rate`` and ``q n`` with
    it (``n`` read off ``X``, public to its holder, as in every DP-SGD library),
    ``count_fraction`` (the share of ε for that count, in (0, 1); default 0.02),
    ``max_examples_per_unit`` (with ``fit(..., units=)``: the public cap on a unit's rows).

    After ``fit``, through the curator or not, ``training_`` is a
    :class:`~dpkit.learn.torch.TrainingSummary` (noise multiplier, clip, rate, steps,
    neighbouring relation, ``insecure``, the divisor; ``event()``, ``epsilon(δ)``), never the
    training object: that one holds the loader with every row and the unit codes, and a fitted
    model is what gets pickled and shared (:func:`dpkit.learn.torch.make_private` gives it to
    whoever trains their own module).

    >>> import numpy as np
    >>> X = np.r_[np.zeros((200, 2)), np.ones((200, 2))]; y = np.r_[[0] * 200, [1] * 200]
    >>> clf = MLPClassifier((8,), epsilon=2.0, delta=1e-4, epochs=5, batch_size=100,
    ...                     random_state=0).fit(X, y)   # doctest: +SKIP
    >>> clf.score(X, y) > 0.9                            # doctest: +SKIP
    True
    """

    def __init__(self, hidden_layer_sizes: tuple[int, ...] = (64,), *, epsilon: float = 3.0,
                 delta: float = 1e-5, epochs: int = 30, batch_size: int | str | None = None,
                 max_grad_norm: float = 1.0, learning_rate: float = 0.1, momentum: float = 0.9,
                 activation: str = "tanh", averaging: float = 0.5, schedule: str = "constant",
                 features: Any = None, classes: Any = None,
                 random_state: int | None = None, sample_rate: float | None = None,
                 max_examples_per_unit: int | None = None, count_fraction: float = 0.02) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.epsilon = epsilon
        self.delta = delta
        self.epochs = epochs
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.activation = activation
        self.averaging = averaging
        self.schedule = schedule
        self.features = features
        self.classes = classes
        self.random_state = random_state
        self.sample_rate = sample_rate
        self.max_examples_per_unit = max_examples_per_unit
        self.count_fraction = count_fraction

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "hidden_layer_sizes", "epsilon", "delta", "epochs", "batch_size", "max_grad_norm",
            "learning_rate", "momentum", "activation", "averaging", "schedule", "features",
            "classes", "random_state", "sample_rate", "max_examples_per_unit", "count_fraction")}

    def set_params(self, **params: Any) -> MLPClassifier:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r} for MLPClassifier")
            setattr(self, k, v)
        return self

    def _check_options(self) -> None:
        """The training options, checked before any draw: in ``fit`` and, through the curator,
        in :meth:`privacy_event`, before the charge (FINDINGS.md G5: they were checked by torch
        inside the training, after the charge, which was then lost)."""
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine' (got {self.schedule!r})")
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu' (got {self.activation!r})")
        try:
            sizes = list(self.hidden_layer_sizes)
        except TypeError:
            raise ValueError("hidden_layer_sizes must be a sequence of ints >= 1, e.g. (64,) "
                             f"(got {self.hidden_layer_sizes!r})") from None
        for h in sizes:
            check_count(h, "each of hidden_layer_sizes")
        check_positive(self.max_grad_norm, "max_grad_norm", "1.0")
        if check_non_negative(self.learning_rate, "learning_rate") > _FLOAT32_MAX:
            raise ValueError(f"learning_rate must be <= {_FLOAT32_MAX:.4g}, the largest float32 "
                             f"torch's optimizer holds (got {self.learning_rate!r})")
        check_non_negative(self.momentum, "momentum")
        if not 0.0 <= check_non_negative(self.averaging, "averaging") <= 1.0:
            raise ValueError(f"averaging must lie in [0, 1] (got {self.averaging!r})")
        if self.features is not None and not callable(getattr(self.features, "transform", None)):
            raise TypeError("features must be None or an object with a transform(X) method "
                            f"(got {type(self.features).__name__})")

    def _network(self, d: int, k: int, source: noise.Source | None) -> Any:
        return mlp_network(d, k, self.hidden_layer_sizes, self.activation, source)

    def privacy_event(self, n_features: int, contributions: int = 1) -> events.Event:
        """The curator's hook (``cur.fit``): the event the next ``fit`` realises, from public
        parameters only (no data), for add/remove of one privacy unit holding up to
        ``contributions`` rows: ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` with
        ``q = 1/k`` (``k = round(1/sample_rate)`` steps an epoch), ``T = epochs·k`` and ``σ``
        the smallest noise multiplier whose PLD ε at ``delta`` is at most ``epsilon``. The same
        event at record and user level: ``fit`` clips each unit's summed gradient.

        With ``batch_size`` "auto" or None (the default here): ``Composed([DiscreteLaplace(s,
        contributions), <that DP-SGD event>])``, the noisy count of the rows (sensitivity
        ``contributions``, pure ``count_fraction × epsilon``) first, and σ calibrated so that
        the *composition*'s PLD ε at ``delta`` is at most ``epsilon``. An int ``batch_size`` is
        the fixed divisor and the event is DP-SGD's alone.

        Calling it also *declares* the curator's domain (``domain_``): the next fits take their
        rows as a private read (``sample_rate`` sets q; an empty read trains on noise alone).
        """
        n = check_count(n_features, "n_features")
        c = check_count(contributions, "contributions")
        _torch_installed()  # no PyTorch: refused here, before the curator's charge, not in
        # fit after it; found, not imported (the import alone took 3 s of a 6 s preview_fit)
        self._check_options()
        if self.sample_rate is None:
            raise ValueError("MLPClassifier through the curator needs sample_rate= (the "
                             "expected fraction of the table's units in each step, e.g. "
                             "sample_rate=0.01): the row count is private, so batch_size "
                             "cannot set it (batch_size='auto', the default here, estimates "
                             "the expected batch privately)")
        auto = check_batch_size(self.batch_size) in (None, "auto")
        sigma, k, total, count = self._planned(c if auto else None)
        self._check_grid(sigma, n)
        self.domain_ = (n, c)
        return self._event_of(sigma, k, total, count)

    def _check_grid(self, sigma: float, n_features: int) -> None:
        """What the optimizer's exact release needs of the public σ and C, checked before a
        curator's charge: a grid ``2^-k`` the float exponent can hold (a tiny C) and noise
        ``13 σ C 2^k`` below ``2^51`` grid steps (a huge C), as
        :mod:`dpkit.learn.torch.optimizer` checks at the first step, after the charge."""
        sizes = [n_features, *(int(h) for h in self.hidden_layer_sizes),
                 len(self.classes) if self.classes is not None else 2]
        dim = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
        clip = float(self.max_grad_norm)
        k = grid_exponent(dim, clip) if clip * 1e-6 > 0 else 10**9
        if k > 1000 or 13.0 * sigma * clip * 2.0**k >= 2.0**51:
            raise ValueError(f"max_grad_norm {self.max_grad_norm!r} is outside what the exact "
                             f"noise grid holds for {dim} parameters at noise multiplier "
                             f"{sigma:.3g}; use a clip nearer 1 (e.g. max_grad_norm=1.0)")

    @staticmethod
    def _event_of(sigma: float, k: int, total: int,
                  count: tuple[int, float] | None) -> events.Event:
        sgd = events.SelfComposed(events.PoissonSampled(1.0 / k, events.Gaussian(sigma)), total)
        if count is None:
            return sgd
        return events.Composed((count_plan(sensitivity=count[0], epsilon=count[1]).event, sgd))

    def _steps_per_epoch(self, n: int) -> int:
        if self.sample_rate is None:  # as len(DataLoader(batch_size)): today's rate b/n
            return max(1, math.ceil(n / int(self.batch_size or 1000)))
        rate = float(self.sample_rate)
        if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
            raise ValueError(f"sample_rate must lie in (0, 1] (got {self.sample_rate!r})")
        return max(1, round(1.0 / rate))

    def _planned(self, count_sensitivity: int | None = None) -> tuple[
            float, int, int, tuple[int, float] | None]:
        """(σ, steps an epoch, steps, the count's (sensitivity, ε) or None) from the public
        parameters; σ calibrated once per value, to the composition when there is a count."""
        eps, delta = check_epsilon(self.epsilon), check_delta_alone(self.delta)
        epochs = check_count(self.epochs, "epochs")
        k = self._steps_per_epoch(0)
        count = None if count_sensitivity is None else (
            count_sensitivity, check_count_fraction(self.count_fraction) * eps)
        key = (eps, delta, epochs, k, count)
        plan = getattr(self, "_plan", None)
        if plan is None or plan[0] != key:
            if count is None:
                sigma = accounting.calibrate.dpsgd_noise_multiplier(
                    sampling_probability=1.0 / k, steps=epochs * k, target_epsilon=eps,
                    delta=delta, method="pld")
            else:
                sigma = calibrate_with_count(
                    count_plan(sensitivity=count[0], epsilon=count[1]).event,
                    sampling_probability=1.0 / k, steps=epochs * k, target_epsilon=eps,
                    delta=delta)
            self._plan = plan = (key, float(sigma))
        return plan[1], k, epochs * k, count

    def _check_batching(self, units: Any) -> int | str | None:
        """``batch_size`` (and, for "auto", ``count_fraction``) checked before any draw."""
        bs = check_batch_size(self.batch_size)
        auto = bs == "auto" or (bs is None and getattr(self, "domain_", None) is not None)
        if auto:
            check_count_fraction(self.count_fraction)
        if bs == "auto" and getattr(self, "domain_", None) is None:
            if self.sample_rate is None:
                raise ValueError("batch_size='auto' needs sample_rate= (the Poisson rate of a "
                                 "step, e.g. 0.01): the expected batch is sample_rate x the "
                                 "noisy row count; or give batch_size an int")
            if units is not None and self.max_examples_per_unit is None:
                raise ValueError("batch_size='auto' with units= needs max_examples_per_unit= "
                                 "(a unit's rows move the count by up to that many)")
            if units is not None:
                check_count(self.max_examples_per_unit, "max_examples_per_unit")
        return bs

    def fit(self, X: Any, y: Any, units: Any = None, *,
            source: noise.Source | None = None) -> MLPClassifier:
        """Train with DP-SGD; ``X`` (n, d) numeric with no NaN, ``y`` labels in ``classes``.

        ``units``: None (record level), or one privacy-unit id per row (user level: a unit's
        rows are sampled together and their summed gradient clipped; ids ``None`` / NaN / -1
        are refused, except through the curator, whose NULL unit is one unit). ``source``: the
        :mod:`dpkit.noise` source of every draw of this fit (the weights' initialisation, the
        Poisson sampling, a unit's kept rows, the gradient noise, the count of
        ``batch_size="auto"``), over ``random_state``; the curator passes its project's."""
        torch = _torch()
        self._check_options()
        self._check_batching(units)
        X = self._inputs(X)
        y = np.asarray(y)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError(f"X must be 2-D with one row per label (got {X.shape}, {y.shape})")
        if not np.all(np.isfinite(X)):  # never through the curator: its encoding is in [-1, 1]
            raise ValueError("X contains NaN or infinite values (as float32): impute, drop or "
                             "rescale them before fit")
        self.classes_ = np.unique(y) if self.classes is None else np.asarray(self.classes)
        codes = np.searchsorted(self.classes_, y)
        if np.any(codes >= len(self.classes_)) or np.any(self.classes_[
                np.minimum(codes, len(self.classes_) - 1)] != y):
            raise ValueError("y holds a label that is not in classes")
        if source is None and self.random_state is not None:
            source = noise.seeded(self.random_state)
        elif source is not None and not isinstance(source, noise.Source):
            raise TypeError(f"source must be a dpkit.noise source (got {source!r})")
        net = self._network(X.shape[1], len(self.classes_), source)
        data = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(codes))
        self.batch_count_: BatchCount | None = None
        self.notes_: list[str] = []
        tr = self._private(net, data, units, source)
        self._train(tr, net)
        tr.detach()
        # keep no row, unit code or exact count on the model, through the curator or not: the
        # training object holds the loader (every row, the unit codes) and the network's
        # hooks, and a fitted model is what gets pickled, published or handed to someone else
        # (FINDINGS.md G1; make_private is there for who wants the training object itself)
        self.training_ = tr.summary()
        self.network_ = net
        # scikit-learn's layout (coefs_[i]: (inputs, outputs)), so the weights can be saved
        lins = [m for m in net if isinstance(m, torch.nn.Linear)]
        self.coefs_ = [m.weight.detach().numpy().T.copy() for m in lins]
        self.intercepts_ = [m.bias.detach().numpy().copy() for m in lins]
        self._bill(tr)
        return self

    def _bill(self, tr: Any) -> None:
        """``event_`` / ``epsilon_`` of the whole fit (the count composed in, if any) and the
        divisor used (``batch_divisor_``; ``rows_estimate_``: N̂ or None)."""
        bc = self.batch_count_
        opt = tr.optimizer
        self.batch_divisor_ = float(tr.sample_rate * tr.data_loader.n
                                    if opt.expected_batch_size is None else
                                    opt.expected_batch_size)
        self.rows_estimate_ = None if bc is None else int(bc.rows.value)
        if bc is None:
            self.event_ = tr.event()
            self.epsilon_ = tr.epsilon(self.delta)
            return
        self.event_ = events.Composed((bc.rows.event, tr.event()))
        self.epsilon_ = accounting.epsilon(self.event_, delta=self.delta, method="pld")

    def _count_into(self, tr: Any, count: tuple[int, float],
                    source: noise.Source | None) -> Any:
        """Release the count of the examples ``tr``'s loader samples from (after every check
        of ``make_private``: a refused fit draws nothing) and make it the divisor."""
        bc = noisy_divisor(tr.data_loader.n, sample_rate=tr.sample_rate, sensitivity=count[0],
                           epsilon=count[1], source=source)
        tr.optimizer.expected_batch_size = bc.divisor
        self.batch_count_ = bc
        self.notes_.append(bc.note())
        return tr

    def _private(self, net: Any, data: Any, units: Any, source: noise.Source | None) -> Any:
        """``make_private`` on ``net``: calibrated here, or with the curator's planned event."""
        torch = _torch()
        from dpkit.learn.torch import PoissonLoader, make_private

        opt = torch.optim.SGD(net.parameters(), lr=self.learning_rate, momentum=self.momentum)
        common: dict[str, Any] = {"max_grad_norm": self.max_grad_norm, "loss_reduction": "sum",
                                  "source": source}
        domain = getattr(self, "domain_", None)
        bs = check_batch_size(self.batch_size)
        if domain is None:
            if units is not None:
                common.update(units=units, max_examples_per_unit=self.max_examples_per_unit)
            if bs == "auto":
                sens = 1 if units is None else int(self.max_examples_per_unit)  # type: ignore[arg-type]
                sigma, k, _, count = self._planned(sens)
                assert count is not None
                tr = make_private(net, opt, PoissonLoader(data, sample_rate=1.0 / k, steps=k),
                                  noise_multiplier=sigma, target_delta=self.delta,
                                  epochs=int(self.epochs), expected_batch_size=1.0, **common)
                return self._count_into(tr, count, source)
            loader: Any = torch.utils.data.DataLoader(data, batch_size=int(bs or 1000))
            if self.sample_rate is not None:
                k = self._steps_per_epoch(len(data))
                loader = PoissonLoader(data, sample_rate=1.0 / k, steps=k)
            return make_private(net, opt, loader, target_epsilon=self.epsilon,
                                target_delta=self.delta, epochs=int(self.epochs), **common)
        if units is None and domain[1] > 1:
            raise ValueError(f"the curator declared units of up to {domain[1]} rows: pass their "
                             "ids, fit(X, y, units=...)")
        if units is not None:
            common.update(units=_null_as_one_unit(units), max_examples_per_unit=domain[1])
        sigma, k, _, count = self._planned(domain[1] if bs in (None, "auto") else None)
        # the row count is private: divide the noisy sum by a public number (the fixed
        # batch_size), or by q N̂ (auto: set by _count_into, once make_private checked all)
        tr = make_private(net, opt, PoissonLoader(data, sample_rate=1.0 / k, steps=k),
                          noise_multiplier=sigma, allow_empty=True,
                          expected_batch_size=float(bs) if isinstance(bs, int) else 1.0,
                          **common)
        return tr if count is None else self._count_into(tr, count, source)

    def _train(self, tr: Any, net: Any) -> None:
        torch = _torch()
        total = int(self.epochs) * len(tr.data_loader)
        start = int(total * (1.0 - float(self.averaging)))
        base = [g["lr"] for g in tr.optimizer.param_groups]
        avg = [torch.zeros_like(p) for p in net.parameters()]
        step = 0
        for _ in range(int(self.epochs)):
            for xb, yb in tr.data_loader:
                if self.schedule == "cosine":  # public: depends on the step count only
                    f = 0.5 * (1.0 + math.cos(math.pi * step / total))
                    for g, lr in zip(tr.optimizer.param_groups, base, strict=True):
                        g["lr"] = lr * f
                tr.optimizer.zero_grad()
                torch.nn.functional.cross_entropy(net(xb), yb, reduction="sum").backward()
                tr.optimizer.step()
                step += 1
                if step > start:
                    with torch.no_grad():
                        for a, p in zip(avg, net.parameters(), strict=True):
                            a.add_(p.detach() - a, alpha=1.0 / (step - start))
        if step > start:
            with torch.no_grad():
                for a, p in zip(avg, net.parameters(), strict=True):
                    p.copy_(a)

    def _inputs(self, X: Any) -> np.ndarray:
        """``X`` as float32, through ``features`` when one is set (a fixed public map)."""
        if self.features is None:
            return np.asarray(X, dtype=np.float32)
        if not callable(getattr(self.features, "transform", None)):
            raise TypeError("features must be None or an object with a transform(X) method "
                            f"(got {type(self.features).__name__})")
        return np.asarray(self.features.transform(X), dtype=np.float32)

    def predict_proba(self, X: Any) -> np.ndarray:
        torch = _torch()
        with torch.no_grad():
            logits = self.network_(torch.from_numpy(self._inputs(X)))
            return torch.softmax(logits, 1).numpy()

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(1)]

    def score(self, X: Any, y: Any) -> float:
        """Accuracy on ``(X, y)``."""
        return float(np.mean(self.predict(X) == np.asarray(y)))
