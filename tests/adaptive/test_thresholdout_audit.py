"""Black-box audit of Thresholdout's holdout privacy (replace one holdout row).

One query whose training mean is 0 and whose holdout mean moves by 1/n between the neighbours;
the output is the answer (post-processing of the whole mechanism, so a bound on it bounds
Thresholdout). At confidence 1 - 1e-6 an audited ε above the stated one is a bug; the same
audit at an 8x smaller sigma (8x the ε) must certify more than the stated ε.
"""

from __future__ import annotations

import numpy as np

import dpkit as dp
from dpkit.adaptive import Thresholdout
from dpkit.attacks.audit_vector import audit_black_box

CONF = 1 - 1e-6
SRC = dp.noise.seeded(91)
N = 4
TRAIN = np.zeros((N, 1))
D0 = np.zeros((N, 1))
D1 = np.r_[np.zeros((N - 1, 1)), np.ones((1, 1))]


def _answer(sigma: float):  # type: ignore[no-untyped-def]
    def run(holdout: np.ndarray) -> float:
        th = Thresholdout(TRAIN, holdout, threshold=0.1, sigma=sigma, budget=1,
                          max_epsilon=100.0, source=SRC)
        return float(th.query(lambda x: x[:, 0]) > 0.15)  # which side of a cut: a label
    return run


def test_thresholdout_audit_stays_under_its_epsilon() -> None:
    sigma = 0.25
    stated = Thresholdout(TRAIN, D0, threshold=0.1, sigma=sigma, budget=1, max_epsilon=100.0,
                          source=dp.noise.seeded(1)).events
    eps = 2 * (1 / N + 2.0 ** -12) / sigma  # the worst case the class states: 2 budget/(sigma n)
    assert sum(e.epsilon for e in stated) <= eps  # type: ignore[attr-defined]
    res = audit_black_box(_answer(sigma), D0, D1, trials=4000, confidence=CONF)
    assert res.epsilon_lower <= eps
    strong = audit_black_box(_answer(sigma / 8), D0, D1, trials=4000, confidence=CONF)
    assert strong.epsilon_lower > eps
