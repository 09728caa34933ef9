"""The dispatcher: method choice, errors, report, neighbouring relations, robustness, PLD hook."""

from __future__ import annotations

import math
import subprocess
import sys
import types
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpkit.accounting as acc
from dpkit import events as ev
from dpkit.accounting import UnsupportedEvent, api, approx, gdp, rdp

EVENTS = [
    ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062),
    ev.SelfComposed(ev.Laplace(10.0), 100),
    ev.Composed((ev.Gaussian(3.0), ev.Laplace(2.0), ev.ZCDP(0.1))),
    ev.SelfComposed(ev.Exponential(0.1), 100),
    ev.Composed((ev.ApproxDP(1.0, 1e-7), ev.SelfComposed(ev.PureDP(0.2), 5))),
    ev.SelfComposed(ev.DiscreteLaplace(10.0, 1), 100),
    ev.SelfComposed(ev.DiscreteGaussian(4.0, 1), 30),
    ev.SampledWithoutReplacement(1000, 100, ev.Gaussian(2.0)),
    ev.RandomizedResponse(1.0, 3),
]


@pytest.fixture
def no_pld(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide dpkit.accounting.pld so a test measures only the accountants in this part (PLD has
    its own tests, and is slow on some extreme events)."""
    fake = types.ModuleType("dpkit.accounting.pld")
    fake.supports = lambda event: False  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dpkit.accounting.pld", fake)
    monkeypatch.setattr(acc, "pld", fake, raising=False)


def test_published_vectors_through_the_dispatcher() -> None:
    assert acc.epsilon(ev.SelfComposed(ev.Laplace(2.0), 30), 0.0, "pure") == 15.0
    assert acc.epsilon(ev.SelfComposed(ev.Laplace(2.0), 30), 0.0) == 15.0
    assert acc.epsilon(ev.SelfComposed(ev.PureDP(0.1), 100), 1e-5) == pytest.approx(4.306791,
                                                                                   abs=5e-7)
    g = ev.SelfComposed(ev.Gaussian(2.0), 100)
    assert acc.epsilon(g, 1e-18) == pytest.approx(55.70932, abs=5e-6)
    assert acc.epsilon(g, 1e-12) == pytest.approx(47.04923, abs=5e-6)
    d = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062)
    assert acc.epsilon(d, 1e-5, "rdp") <= 2.5966 + 5e-5
    assert acc.epsilon(ev.Gaussian(1.0), 1e-5) == pytest.approx(4.3771780957, abs=5e-11)


def test_default_picks_exact_forms_first() -> None:
    assert api.best(ev.SelfComposed(ev.Gaussian(2.0), 100), 1e-5)[0] == "gdp"
    assert api.best(ev.SelfComposed(ev.PureDP(0.1), 100), 1e-5)[0] == "kov"
    assert api.best(ev.SelfComposed(ev.Laplace(2.0), 3), 0.0)[0] == "pure"
    assert acc.epsilon(ev.Gaussian(1.0), 0.0) == math.inf


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("delta", [1e-5, 1e-10])
def test_default_is_the_minimum_of_supported_methods(event: ev.Event, delta: float) -> None:
    default = acc.epsilon(event, delta)
    assert default >= 0.0 and not math.isnan(default)
    for row in acc.report(event, delta):
        if row.epsilon is not None:
            assert default <= row.epsilon * (1 + 1e-12), row


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_delta_dispatch_is_consistent_with_epsilon(event: ev.Event) -> None:
    for method in ("rdp", "zcdp", "gdp", "kov", "advanced", "basic", "pure"):
        try:
            eps = acc.epsilon(event, 1e-6, method)
        except UnsupportedEvent:
            continue
        if not 0 < eps < math.inf:
            continue
        # at the ε a method reports for δ = 1e-6, its own δ is at most 1e-6 (up to the
        # optimisers' tolerance)
        assert acc.delta(event, eps, method) <= 1e-6 * (1 + 1e-5), method
    eps = acc.epsilon(event, 1e-6)
    if 0 < eps < math.inf:
        assert acc.delta(event, eps) <= 1e-6 * (1 + 1e-5)


def test_report_rows() -> None:
    rows = acc.report(EVENTS[0], 1e-5)
    assert [r.method for r in rows] == list(api.METHODS)
    by = {r.method: r for r in rows}
    assert by["pure"].epsilon is None and "never pure" in by["pure"].note
    assert by["gdp"].epsilon is None and "subsampled" in by["gdp"].note
    assert by["rdp"].epsilon == pytest.approx(rdp.epsilon(EVENTS[0], 1e-5))
    assert all(r.seconds >= 0 for r in rows)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: acc.epsilon(ev.Gaussian(1.0), -1e-5), ValueError, "delta"),
        (lambda: acc.epsilon(ev.Gaussian(1.0), 1.0), ValueError, "delta"),
        (lambda: acc.epsilon(ev.Gaussian(1.0), float("nan")), ValueError, "delta"),
        (lambda: acc.epsilon(ev.Gaussian(1.0), 1e-5, "magic"), ValueError, "method"),
        (lambda: acc.delta(ev.Gaussian(1.0), 0.0), ValueError, "epsilon"),
        (lambda: acc.delta(ev.Gaussian(1.0), -2.0), ValueError, "epsilon"),
        (lambda: acc.delta(ev.Gaussian(1.0), float("nan")), ValueError, "epsilon"),
        (lambda: acc.epsilon(ev.Gaussian(1.0), 1e-5, neighboring="swap"), ValueError,
         "neighboring"),
        (lambda: acc.epsilon({"Gaussian": {"noise_multiplier": 1.0}}, 1e-5), TypeError,
         "from_json"),
        (lambda: acc.epsilon(ev.ApproxDP(1.0, 1e-6), 1e-5, "rdp"), UnsupportedEvent,
         r"ApproxDP.*method="),
        (lambda: acc.epsilon(ev.Gaussian(1.0), 1e-5, "pure"), UnsupportedEvent, "delta > 0"),
    ],
)
def test_errors_name_the_fix(call, exc, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=match):
        call()


def test_replace_one_relation() -> None:
    # google/differential-privacy#378: our events are per add/remove unit, so under
    # replacement the sensitivity doubles, i.e. the noise multiplier halves.
    assert acc.epsilon(ev.Gaussian(2.0), 1e-5, neighboring="replace") == pytest.approx(
        acc.epsilon(ev.Gaussian(1.0), 1e-5))
    assert acc.epsilon(ev.Laplace(2.0), 0.0, neighboring="replace") == pytest.approx(1.0)
    # dp_accounting states Gaussian(m) relative to the replace-one sensitivity: our
    # Gaussian(2m) under replace equals its Gaussian(m) under REPLACE_ONE
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

    a = dpa_rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    a.compose(dpa.GaussianDpEvent(1.5))
    ours = rdp.epsilon(ev.Gaussian(3.0), 1e-6, orders=rdp.DEFAULT_ORDERS, neighboring="replace")
    assert ours == pytest.approx(a.get_epsilon(1e-6), rel=1e-9)
    # sampling amplification is not credited under replacement (conservative, stated)
    s = ev.PoissonSampled(0.01, ev.Gaussian(2.0))
    assert acc.epsilon(s, 1e-5, neighboring="replace") == pytest.approx(
        acc.epsilon(ev.Gaussian(1.0), 1e-5))
    # randomized response is per changed value: unchanged
    assert acc.epsilon(ev.RandomizedResponse(1.0), 0.0, neighboring="replace") == 1.0


def test_sampled_without_replacement_is_never_looser_than_dropping_it() -> None:
    e = ev.SampledWithoutReplacement(1000, 100, ev.Gaussian(2.0))
    assert acc.epsilon(e, 1e-5) == pytest.approx(acc.epsilon(ev.Gaussian(1.0), 1e-5))
    assert acc.epsilon(ev.SampledWithoutReplacement(10, 0, ev.Gaussian(2.0)), 1e-5) == 0.0


ROBUST_EVENTS = [
    ev.PureDP(1000.0),
    ev.Laplace(1e-3),
    ev.SelfComposed(ev.Laplace(1e-3), 10**6),
    ev.SelfComposed(ev.PureDP(1e-3), 10**6),
    ev.SelfComposed(ev.Gaussian(0.01), 10**6),
    ev.SelfComposed(ev.Gaussian(1e3), 10**6),
    ev.SelfComposed(ev.PoissonSampled(1e-4, ev.Gaussian(0.8)), 10**6),
    ev.SelfComposed(ev.PoissonSampled(0.5, ev.Laplace(0.01)), 10**6),
    ev.SelfComposed(ev.Exponential(1000.0), 10**6),
    ev.SelfComposed(ev.ZCDP(1e-9), 10**6),
    ev.SelfComposed(ev.ApproxDP(1e3, 1e-30), 10**6),
    ev.SelfComposed(ev.RandomizedResponse(1000.0, 50), 1000),
    ev.SelfComposed(ev.DiscreteGaussian(1e-3, 10), 10**6),
]


@pytest.mark.parametrize("event", ROBUST_EVENTS, ids=repr)
@pytest.mark.usefixtures("no_pld")
def test_robust_no_nan_negative_or_exception(event: ev.Event) -> None:
    for delta in (0.0, 1e-18, 1e-10, 1e-5, 0.5):
        for row in acc.report(event, delta):
            assert not row.note.startswith("failed"), row
            if row.epsilon is not None:
                assert row.epsilon >= 0.0 and not math.isnan(row.epsilon), row
        eps = acc.epsilon(event, delta)
        assert eps >= 0.0 and not math.isnan(eps)
    for eps in (1e-3, 1.0, 1e3):
        d = acc.delta(event, eps)
        assert 0.0 <= d <= 1.0


@pytest.mark.usefixtures("no_pld")
@settings(max_examples=30, deadline=None)
@given(m1=st.floats(0.3, 30.0), m2=st.floats(0.3, 30.0), count=st.integers(1, 2000),
       q=st.floats(1e-3, 1.0), delta=st.floats(1e-12, 1e-2))
def test_epsilon_decreases_with_noise(m1: float, m2: float, count: int, q: float,
                                      delta: float) -> None:
    lo, hi = sorted((m1, m2))
    for make in (lambda m: ev.SelfComposed(ev.PoissonSampled(q, ev.Gaussian(m)), count),
                 lambda m: ev.SelfComposed(ev.Laplace(m), count)):
        for method in ("rdp", "zcdp"):
            assert acc.epsilon(make(hi), delta, method) <= acc.epsilon(make(lo), delta, method) * (
                1 + 1e-9) + 1e-12


@pytest.mark.usefixtures("no_pld")
@settings(max_examples=30, deadline=None)
@given(m=st.floats(0.3, 30.0), c1=st.integers(1, 5000), c2=st.integers(1, 5000),
       delta=st.floats(1e-12, 1e-2))
def test_epsilon_increases_with_count(m: float, c1: int, c2: int, delta: float) -> None:
    lo, hi = sorted((c1, c2))
    for leaf in (ev.Gaussian(m), ev.Laplace(m), ev.PureDP(1 / m)):
        a = acc.epsilon(ev.SelfComposed(leaf, lo), delta)
        b = acc.epsilon(ev.SelfComposed(leaf, hi), delta)
        assert a <= b * (1 + 1e-9) + 1e-12


def test_default_with_the_real_pld_is_a_valid_tight_bound() -> None:
    pytest.importorskip("dpkit.accounting.pld")
    e = ev.SelfComposed(ev.PoissonSampled(256 / 60000, ev.Gaussian(1.1)), 14062)
    eps = acc.epsilon(e, 1e-5)
    # the true ε is 2.3816 (REFERENCES.md): an upper bound is never below it, and the default is
    # never looser than RDP's 2.5966
    assert 2.3816 - 1e-4 <= eps <= rdp.epsilon(e, 1e-5)


def test_pld_is_imported_lazily() -> None:
    code = ("import sys, dpkit.accounting as a, dpkit.events as ev; "
            "a.epsilon(ev.Laplace(1.0), 0.0); "
            "print('dpkit.accounting.pld' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _fake_pld(monkeypatch: pytest.MonkeyPatch, epsilon_fn) -> None:  # type: ignore[no-untyped-def]
    fake = types.ModuleType("dpkit.accounting.pld")
    fake.supports = lambda event: True  # type: ignore[attr-defined]
    fake.epsilon = epsilon_fn  # type: ignore[attr-defined]
    fake.delta = lambda event, epsilon: (0.0, 1.0)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dpkit.accounting.pld", fake)
    monkeypatch.setattr(acc, "pld", fake, raising=False)


def test_dispatcher_uses_pld_upper_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    e = ev.SelfComposed(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 100)
    _fake_pld(monkeypatch, lambda event, delta: (0.01, 0.02))
    assert api.best(e, 1e-5) == ("pld", 0.02)
    assert acc.epsilon(e, 1e-5, "pld") == 0.02


def test_dispatcher_survives_a_failing_pld(monkeypatch: pytest.MonkeyPatch) -> None:
    e = ev.SelfComposed(ev.PoissonSampled(0.01, ev.Gaussian(1.0)), 100)

    def boom(event, delta):  # type: ignore[no-untyped-def]
        raise RuntimeError("boom")

    _fake_pld(monkeypatch, boom)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eps = acc.epsilon(e, 1e-5)
    assert eps == pytest.approx(rdp.epsilon(e, 1e-5))
    assert any("pld" in str(w.message) for w in caught)
    rows = {r.method: r for r in acc.report(e, 1e-5)}
    assert rows["pld"].epsilon is None and "boom" in rows["pld"].note


def test_gdp_and_kov_modules_agree_with_dispatcher() -> None:
    g = ev.Composed((ev.Gaussian(1.0), ev.Gaussian(2.0)))
    assert acc.epsilon(g, 1e-6) == gdp.epsilon(g, 1e-6)
    k = ev.SelfComposed(ev.ApproxDP(0.2, 1e-9), 50)
    assert acc.epsilon(k, 1e-6) == approx.epsilon(k, 1e-6, method="kov")
