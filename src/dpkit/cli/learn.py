"""``dpkit fit``: train a dpkit.learn model on a private table through the curator.

``fit`` is a plain function taking a rich Console (tests call it directly); ``fit_command`` is
its click wrapper. The model is built by name (``--model logistic``) from :mod:`dpkit.learn`
with ``--param name=value`` for its other parameters; the curator encodes the features from the
declarations, bounds each privacy unit's rows, charges the ledger once and trains.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import click

from dpkit.cli.options import make_console

__all__ = ["MODELS", "commands", "fit", "fit_guarantee", "model_from_name"]

#: ``--model`` names -> the dpkit.learn estimator they build: the short ones, and the names
#: the service's ``POST /v1/fit`` takes (``dpkit.learn.catalog``), so one name works in both
MODELS: dict[str, str] = {
    "logistic": "LogisticRegression",
    "linear": "LinearRegression",
    "naive-bayes": "GaussianNB",
    "mlp": "MLPClassifier",
    "logistic_regression": "LogisticRegression",
    "linear_regression": "LinearRegression",
    "gaussian_nb": "GaussianNB",
    "kmeans": "KMeans",
    "mlp_classifier": "MLPClassifier",
}


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare word: a string parameter


def model_from_name(name: str, params: tuple[str, ...] | list[str] = ()) -> Any:
    """A dpkit.learn estimator by its ``--model`` name, with ``name=value`` parameters (values
    read as JSON: ``epochs=5``, ``hidden_layer_sizes=[256]``)."""
    if name not in MODELS:
        raise ValueError(f"--model must be one of {', '.join(MODELS)} (got {name!r})")
    kwargs: dict[str, Any] = {}
    for item in params:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--param takes name=value, e.g. epochs=5 (got {item!r})")
        kwargs[key.strip()] = _value(raw.strip())
    learn = importlib.import_module("dpkit.learn")
    cls = getattr(learn, MODELS[name])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{MODELS[name]}: {exc}") from None


def fit_guarantee(meta: Any) -> str:
    """Whom the trained model protects, in the table's words: the first walk's researcher had
    to read the docs to learn that a fit on a table with a privacy unit is at user level."""
    if meta.privacy_unit is None:
        return ("the model is differentially private for adding or removing one row "
                "(record level: the table has no privacy unit)")
    return (f"the model is differentially private for adding or removing one "
            f"{meta.privacy_unit!r} with all their rows (user level; "
            f"max_rows_per_unit={meta.max_rows_per_unit})")


def _fitted_attributes(model: Any) -> dict[str, Any]:
    """The learned arrays (scikit-learn's trailing-underscore convention), JSON-ready."""
    import numpy as np

    out: dict[str, Any] = {}
    for key, value in vars(model).items():
        if key.endswith("_") and not key.startswith("_"):
            if isinstance(value, np.ndarray):
                out[key] = value.tolist()
            elif isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
                out[key] = [v.tolist() for v in value]  # a network's layers (coefs_)
            elif isinstance(value, (int, float, str, bool)):
                out[key] = value
    return out


def fit(project: str | Path, sql: str, *, label: str, model: str = "logistic",
        epsilon: float | None = None, delta: float | None = None,
        params: tuple[str, ...] | list[str] = (), token: str | None = None,
        output: str | Path | None = None, console: Any = None) -> Any:
    """Train ``model`` on the rows ``sql`` selects, charged once; print what it cost and,
    with ``output`` (a .json file), write the encoding and the learned parameters."""
    from dpkit.engine.curator import Curator

    con = make_console(console)
    if epsilon is None:
        raise ValueError("give --epsilon: the budget training spends")
    if output is not None and Path(output).suffix.lower() != ".json":
        raise ValueError(f"--output writes the model as JSON: name it *.json (got {output})")
    estimator = model_from_name(model, params)
    with Curator.open(project, token=token) as cur:
        trained = cur.fit(estimator, sql, label=label, epsilon=epsilon, delta=delta)
        enc = trained.encoding
        con.print(f"trained {type(estimator).__name__} on {enc.table!r}: "
                  f"{len(enc.features)} features, label {enc.label!r}"
                  + (f" ({len(enc.classes)} classes)" if enc.classes is not None else ""))
        status = cur.budget()
        delta = next((h.delta for h in status.history if h.seq == trained.ledger_seq), 0.0)
        con.print(f"charged epsilon {trained.epsilon:.4g}"
                  + (f", delta {delta:.3g}" if delta else "")
                  + f" (ledger entry #{trained.ledger_seq}); remaining {status.remaining:.4g}")
        con.print(fit_guarantee(cur.tables()[enc.table]))
        for note in trained.notes:  # what the fit released besides the model (its event)
            con.print(note, markup=False)
        if output is not None:
            meta = cur.tables()[enc.table]
            doc = {"model": type(estimator).__name__, "table": enc.table, "label": enc.label,
                   "classes": list(enc.classes) if enc.classes is not None else None,
                   "features": [{"name": f.name, "column": f.column, "key": f.key,
                                 "low": f.low, "high": f.high} for f in enc.features],
                   "epsilon": trained.epsilon, "delta": delta,
                   "guarantee": fit_guarantee(meta),
                   "privacy_unit": meta.privacy_unit,
                   "max_rows_per_unit": None if meta.privacy_unit is None
                   else meta.max_rows_per_unit,
                   # the model's own event, for any accountant to re-check its epsilon
                   "event": json.loads(trained.event.to_json()),
                   "ledger_seq": trained.ledger_seq,
                   "learned": _fitted_attributes(estimator)}
            Path(output).write_text(json.dumps(doc, indent=1, default=str))
            con.print(f"wrote {output}; its epsilon by every accountant: dpkit account "
                      f"@{output}" + (f" --delta {delta:.3g}" if delta else ""), markup=False)
        return trained


@click.command("fit")
@click.argument("project", type=click.Path(path_type=Path))
@click.argument("sql")
@click.option("--label", required=True, help="The column to predict (declared classes or bounds).")
@click.option("--model", "model_name", default="logistic", show_default=True,
              type=click.Choice(list(MODELS)), help="The dpkit.learn estimator to train.")
@click.option("--epsilon", type=float, default=None, help="Budget training spends.")
@click.option("--delta", type=float, default=None, help="The model's delta, where it uses one.")
@click.option("--param", "params", multiple=True,
              help="Another model parameter, name=value (repeatable), e.g. --param epochs=5.")
@click.option("--token", default=None,
              help="Act as the analyst this token names (default: $DPKIT_TOKEN).")
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Write the encoding and learned parameters to this .json file.")
def fit_command(project: Path, sql: str, label: str, model_name: str, epsilon: float | None,
                delta: float | None, params: tuple[str, ...], token: str | None,
                output: Path | None) -> None:
    """Train a private model on a table's rows (spends budget once)."""
    fit(project, sql, label=label, model=model_name, epsilon=epsilon, delta=delta,
        params=params, token=token, output=output)


commands: tuple[click.Command, ...] = (fit_command,)
