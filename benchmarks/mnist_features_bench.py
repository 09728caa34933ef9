"""MNIST-5k with DP-SGD: fixed Gabor features + MLPClassifier vs the same MLP on raw pixels.

    python benchmarks/mnist_features_bench.py [--seeds 5] [--validation] [--epsilons 1 3]

Record-level (add/remove one example) (ε, δ = 1e-5)-DP, PLD accounting. `GaborFeatures` is fixed
before any data is seen and works example by example, so it costs no privacy (Tramèr & Boneh
2021). `--validation` scores on 800 rows carved from the 4,000 training rows (train on 3,200):
the split the recipe was chosen on; without it, train on 4,000 and score on the 1,000 test rows.
The recipe (one for both ε) was chosen on that validation split by a sweep of ~300 configs
(features, widths, activations, batch, epochs, clip, step size, schedule, momentum).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from dpkit.learn import GaborFeatures, MLPClassifier
from mnist_data import mnist_5k

RECIPE = dict(hidden_layer_sizes=(256,), activation="tanh", batch_size=1000, epochs=30,
              max_grad_norm=1.0, learning_rate=1.0, momentum=0.0, averaging=0.5)
RAW = dict(hidden_layer_sizes=(256,), activation="tanh", batch_size=1000, epochs=30,
           max_grad_norm=1.0, learning_rate=1.0, momentum=0.0, averaging=0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--validation", action="store_true")
    ap.add_argument("--raw", action="store_true", help="also the same MLP on raw pixels")
    ap.add_argument("--set", nargs="*", default=[], help="recipe overrides, key=value")
    a = ap.parse_args()
    Xtr, ytr, Xte, yte = mnist_5k()
    if a.validation:
        Xtr, ytr, Xte, yte = Xtr[:3200], ytr[:3200], Xtr[3200:], ytr[3200:]
    recipe = dict(RECIPE)
    for kv in a.set:
        k, v = kv.split("=", 1)
        recipe[k] = eval(v)  # a benchmark's own command line
    t = time.perf_counter()
    feats = GaborFeatures().fit(Xtr)
    Ftr, Fte = feats.transform(Xtr), feats.transform(Xte)
    print(f"features: {Ftr.shape[1]} per image, {time.perf_counter() - t:.1f} s for "
          f"{len(Xtr) + len(Xte)} images; recipe {recipe}")
    runs = [("gabor+mlp", Ftr, Fte, recipe)] + ([("raw mlp", Xtr, Xte, RAW)] if a.raw else [])
    for eps in a.epsilons:
        for name, A, B, params in runs:
            accs, secs = [], []
            for seed in range(a.seeds):
                t = time.perf_counter()
                clf = MLPClassifier(epsilon=eps, delta=1e-5, random_state=seed, **params)
                clf.fit(A, ytr)
                secs.append(time.perf_counter() - t)
                accs.append(clf.score(B, yte))
            spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
            print(f"eps={eps:g} {name:10s} acc {statistics.mean(accs):.4f} ± {spread:.4f} "
                  f"(min {min(accs):.4f}, max {max(accs):.4f}, {len(accs)} seeds; "
                  f"{'validation' if a.validation else 'test'}) fit {np.median(secs):.1f} s, "
                  f"ε_ = {clf.epsilon_:.3f}", flush=True)


if __name__ == "__main__":
    main()
