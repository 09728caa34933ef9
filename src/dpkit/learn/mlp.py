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
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from dpkit import accounting, events, noise

from ._base import check_count, check_delta_alone, check_epsilon

__all__ = ["MLPClassifier", "mlp_network"]


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("MLPClassifier needs PyTorch: pip install 'dpkit[torch]'") from exc
    return torch


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
    ``epochs``, ``batch_size`` (expected Poisson batch), ``max_grad_norm`` (clip C),
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
    ``1/k`` with ``k`` steps an epoch; required through the curator, where ``n`` is private
    and the noisy gradient sum is divided by ``batch_size``, so set it to about the expected
    rows per step, ``sample_rate`` x rows),
    ``max_examples_per_unit`` (with ``fit(..., units=)``: the public cap on a unit's rows).

    >>> import numpy as np
    >>> X = np.r_[np.zeros((200, 2)), np.ones((200, 2))]; y = np.r_[[0] * 200, [1] * 200]
    >>> clf = MLPClassifier((8,), epsilon=2.0, delta=1e-4, epochs=5, batch_size=100,
    ...                     random_state=0).fit(X, y)   # doctest: +SKIP
    >>> clf.score(X, y) > 0.9                            # doctest: +SKIP
    True
    """

    def __init__(self, hidden_layer_sizes: tuple[int, ...] = (64,), *, epsilon: float = 3.0,
                 delta: float = 1e-5, epochs: int = 30, batch_size: int = 1000,
                 max_grad_norm: float = 1.0, learning_rate: float = 0.1, momentum: float = 0.9,
                 activation: str = "tanh", averaging: float = 0.5, schedule: str = "constant",
                 features: Any = None, classes: Any = None,
                 random_state: int | None = None, sample_rate: float | None = None,
                 max_examples_per_unit: int | None = None) -> None:
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

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "hidden_layer_sizes", "epsilon", "delta", "epochs", "batch_size", "max_grad_norm",
            "learning_rate", "momentum", "activation", "averaging", "schedule", "features",
            "classes", "random_state", "sample_rate", "max_examples_per_unit")}

    def set_params(self, **params: Any) -> MLPClassifier:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"unknown parameter {k!r} for MLPClassifier")
            setattr(self, k, v)
        return self

    def _network(self, d: int, k: int, source: noise.Source | None) -> Any:
        return mlp_network(d, k, self.hidden_layer_sizes, self.activation, source)

    def privacy_event(self, n_features: int, contributions: int = 1) -> events.Event:
        """The curator's hook (``cur.fit``): the event the next ``fit`` realises, from public
        parameters only (no data), for add/remove of one privacy unit holding up to
        ``contributions`` rows: ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` with
        ``q = 1/k`` (``k = round(1/sample_rate)`` steps an epoch), ``T = epochs·k`` and ``σ``
        the smallest noise multiplier whose PLD ε at ``delta`` is at most ``epsilon``. The same
        event at record and user level: ``fit`` clips each unit's summed gradient.

        Calling it also *declares* the curator's domain (``domain_``): the next fits take their
        rows as a private read (``sample_rate`` sets q; an empty read trains on noise alone).
        """
        n = check_count(n_features, "n_features")
        c = check_count(contributions, "contributions")
        if self.sample_rate is None:
            raise ValueError("MLPClassifier through the curator needs sample_rate= (the "
                             "expected fraction of the table's units in each step, e.g. "
                             "sample_rate=0.01): the row count is private, so batch_size "
                             "cannot set it")
        sigma, k, total = self._planned()
        self.domain_ = (n, c)
        return events.SelfComposed(events.PoissonSampled(1.0 / k, events.Gaussian(sigma)),
                                   total)

    def _steps_per_epoch(self, n: int) -> int:
        if self.sample_rate is None:  # as len(DataLoader(batch_size)): today's rate b/n
            return max(1, math.ceil(n / int(self.batch_size)))
        rate = float(self.sample_rate)
        if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
            raise ValueError(f"sample_rate must lie in (0, 1] (got {self.sample_rate!r})")
        return max(1, round(1.0 / rate))

    def _planned(self) -> tuple[float, int, int]:
        """(σ, steps an epoch, steps) from the public parameters; calibrated once per value."""
        eps, delta = check_epsilon(self.epsilon), check_delta_alone(self.delta)
        epochs = check_count(self.epochs, "epochs")
        k = self._steps_per_epoch(0)
        key = (eps, delta, epochs, k)
        plan = getattr(self, "_plan", None)
        if plan is None or plan[0] != key:
            sigma = accounting.calibrate.dpsgd_noise_multiplier(
                sampling_probability=1.0 / k, steps=epochs * k, target_epsilon=eps,
                delta=delta, method="pld")
            self._plan = plan = (key, float(sigma))
        return plan[1], k, epochs * k

    def fit(self, X: Any, y: Any, units: Any = None) -> MLPClassifier:
        """Train with DP-SGD; ``X`` (n, d) numeric with no NaN, ``y`` labels in ``classes``.

        ``units``: None (record level), or one privacy-unit id per row (user level: a unit's
        rows are sampled together and their summed gradient clipped; ids ``None`` / NaN / -1
        are refused, except through the curator, whose NULL unit is one unit)."""
        torch = _torch()
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine' (got {self.schedule!r})")
        X = self._inputs(X)
        y = np.asarray(y)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError(f"X must be 2-D with one row per label (got {X.shape}, {y.shape})")
        self.classes_ = np.unique(y) if self.classes is None else np.asarray(self.classes)
        codes = np.searchsorted(self.classes_, y)
        if np.any(codes >= len(self.classes_)) or np.any(self.classes_[
                np.minimum(codes, len(self.classes_) - 1)] != y):
            raise ValueError("y holds a label that is not in classes")
        source = None if self.random_state is None else noise.seeded(self.random_state)
        net = self._network(X.shape[1], len(self.classes_), source)
        data = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(codes))
        tr = self._private(net, data, units, source)
        self._train(tr, net)
        tr.detach()
        self.training_ = tr
        self.network_ = net
        # scikit-learn's layout (coefs_[i]: (inputs, outputs)), so the weights can be saved
        lins = [m for m in net if isinstance(m, torch.nn.Linear)]
        self.coefs_ = [m.weight.detach().numpy().T.copy() for m in lins]
        self.intercepts_ = [m.bias.detach().numpy().copy() for m in lins]
        self.event_ = tr.event()
        self.epsilon_ = tr.epsilon(self.delta)
        return self

    def _private(self, net: Any, data: Any, units: Any, source: noise.Source | None) -> Any:
        """``make_private`` on ``net``: calibrated here, or with the curator's planned event."""
        torch = _torch()
        from dpkit.learn.torch import PoissonLoader, make_private

        opt = torch.optim.SGD(net.parameters(), lr=self.learning_rate, momentum=self.momentum)
        common: dict[str, Any] = {"max_grad_norm": self.max_grad_norm, "loss_reduction": "sum",
                                  "source": source}
        domain = getattr(self, "domain_", None)
        if domain is None:
            if units is not None:
                common.update(units=units, max_examples_per_unit=self.max_examples_per_unit)
            loader: Any = torch.utils.data.DataLoader(data, batch_size=int(self.batch_size))
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
        sigma, k, _ = self._planned()
        # the row count is private: divide the noisy sum by the public batch_size, not q n
        return make_private(net, opt, PoissonLoader(data, sample_rate=1.0 / k, steps=k),
                            noise_multiplier=sigma, allow_empty=True,
                            expected_batch_size=float(self.batch_size), **common)

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
