"""``dpkit fit``: a dpkit.learn model trained on a private table from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner

import dpkit as dp
from dpkit.cli import main
from dpkit.engine import Curator


def _project(tmp_path: Path) -> Path:
    path = tmp_path / "p.dpkit"
    src = dp.noise.seeded(3)
    age = dp.noise.uniform_int(100, 400, source=src)
    frame = pd.DataFrame({"pid": np.arange(400) // 2, "age": age,
                          "sick": np.where(age > 50, "yes", "no")})
    with Curator.create(path, epsilon=5.0, delta=1e-6, source=dp.noise.seeded(1)) as cur:
        cur.add_table("v", frame, privacy_unit="pid", max_rows_per_unit=2,
                      bounds={"age": (0, 100)}, domains={"sick": ["no", "yes"]})
    return path


def test_fit_trains_charges_once_and_writes_the_model(tmp_path: Path) -> None:
    path = _project(tmp_path)
    out = tmp_path / "model.json"
    res = CliRunner().invoke(main, ["fit", str(path), "SELECT age FROM v", "--label", "sick",
                                    "--model", "logistic", "--epsilon", "1",
                                    "--output", str(out)])
    assert res.exit_code == 0, res.output
    assert "charged epsilon 1" in res.output
    doc = json.loads(out.read_text())
    assert doc["classes"] == ["no", "yes"] and doc["features"][0]["name"] == "age"
    assert len(doc["learned"]["coef_"]) == 1
    with Curator.open(path) as cur:
        assert len([e for e in cur.entries() if e.kind == "charge"]) == 1


def test_fit_refuses_bad_input_before_spending(tmp_path: Path) -> None:
    path = _project(tmp_path)
    runner = CliRunner()
    for args, words in ((["--model", "forest"], "forest"), (["--param", "oops"], "name=value"),
                        (["--output", str(tmp_path / "m.csv")], ".json"),
                        (["--param", "random_state=0"], "random_state")):
        res = runner.invoke(main, ["fit", str(path), "SELECT age FROM v", "--label", "sick",
                                   "--epsilon", "1", *args])
        assert res.exit_code != 0 and words in res.output, res.output
    with Curator.open(path) as cur:
        assert not [e for e in cur.entries() if e.kind == "charge"]


def test_the_services_model_names_work_here_too(tmp_path: Path) -> None:
    from dpkit.cli.learn import MODELS
    from dpkit.learn import catalog

    assert {n: MODELS[n] for n in catalog.CATALOG} == {
        n: spec.estimator for n, spec in catalog.CATALOG.items()}
    path = _project(tmp_path)
    res = CliRunner().invoke(main, ["fit", str(path), "SELECT age FROM v", "--label", "sick",
                                    "--model", "kmeans", "--param", "n_clusters=2",
                                    "--epsilon", "0.5"])
    assert res.exit_code == 0, res.output
    assert "trained KMeans" in res.output
