"""Confidence-interval math against brute-force sums of the exact noise laws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit.mechanisms.accuracy import (
    dgauss_halfwidth,
    dgauss_tail,
    dlap_halfwidth,
    dlap_tail,
    grid_interval,
)


def _dlap_pmf(scale: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-r, r + 1)
    w = np.exp(-np.abs(x) / scale)
    return x, w / w.sum()


def _dgauss_pmf(sigma2: float, r: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-(x * x) / (2 * sigma2))
    return x, w / w.sum()


def test_reference_vectors() -> None:
    # REFERENCES.md: DLap scale 3: P(0) = tanh(1/6) = 0.165140; DGauss sigma2 = 10: P(0) = 0.126157
    assert 1 - dlap_tail(0, 3.0) == pytest.approx(math.tanh(1 / 6), abs=1e-12)
    assert 1 - dgauss_tail(0, 10.0) == pytest.approx(0.126157, abs=1e-6)


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0, 17.5, 400.0])
def test_dlap_tail_matches_brute_force(scale: float) -> None:
    x, p = _dlap_pmf(scale, int(80 * scale) + 50)
    for m in [0, 1, 2, 5, int(3 * scale)]:
        assert dlap_tail(m, scale) == pytest.approx(p[np.abs(x) > m].sum(), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("sigma2", [0.04, 0.5, 1.0, 10.0, 1234.5, 5000.0**2])
def test_dgauss_tail_matches_brute_force(sigma2: float) -> None:
    sigma = math.sqrt(sigma2)
    x, p = _dgauss_pmf(sigma2, int(45 * sigma) + 20)
    # beyond sigma = 4096 the tail is an Euler-Maclaurin upper bound: never below the truth,
    # above it by at most twice the remainder bound 2e^{-1/2}/(12 sigma) over the normaliser
    slack = 0.0 if sigma <= 4096 else 2 * 2 * math.exp(-0.5) / (12 * sigma) / (
        sigma * math.sqrt(2 * math.pi))
    for m in [0, 1, 3, int(sigma), int(2.5 * sigma)]:
        brute = p[np.abs(x) > m].sum()
        if slack == 0.0:
            assert dgauss_tail(m, sigma2) == pytest.approx(brute, rel=1e-9, abs=1e-15)
        else:
            assert brute - 1e-12 <= dgauss_tail(m, sigma2) <= brute + slack + 1e-12


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
@pytest.mark.parametrize("scale", [0.2, 1.0, 3.0, 2050.0])
def test_dlap_halfwidth_is_the_smallest(scale: float, level: float) -> None:
    m, cov = dlap_halfwidth(scale, level)
    assert cov >= level
    assert cov == pytest.approx(1 - dlap_tail(m, scale))
    if m > 0:
        assert 1 - dlap_tail(m - 1, scale) < level


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.999])
@pytest.mark.parametrize("sigma2", [0.1, 1.0, 14.0, 4202500.0, 1e12])
def test_dgauss_halfwidth_is_the_smallest(sigma2: float, level: float) -> None:
    m, cov = dgauss_halfwidth(sigma2, level)
    assert cov >= level
    if m > 0:
        assert 1 - dgauss_tail(m - 1, sigma2) < level


def test_grid_interval_contains_the_unrounded_value() -> None:
    k = -3
    x = 0.3  # on the grid of 1/8 it rounds to 2/8 = 0.25
    n = 2
    for z in range(-5, 6):
        y = np.array(n + z)
        low, high = grid_interval(y, abs(z), k)
        assert low <= x <= high
