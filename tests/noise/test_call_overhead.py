"""The per-call fast paths of the samplers and the integer mechanisms change no output.

The small-call work (cached exact calibration, the lane-by-lane Python path of
``_bern_exp_lanes`` for small batches, validation fast paths) must leave every seeded stream
bit-identical: same words drawn in the same order, same samples, intervals, events, details.
Three kinds of checks pin that:

* the scalar and the screened paths of ``_bern_exp_lanes`` against its plain numpy path, on the
  same lanes and words (including forced, big-gamma, near-threshold and ambiguous lanes), and
  the words left in the source after;
* the tabulated acceptance brackets against the ones computed per lane;
* each cached calibration function against the uncached function it wraps;
* whole releases of the current code against the code of :data:`BASE` (the commit before these
  fast paths), run from ``git archive`` in a subprocess, for many (parameter, size, seed)
  combinations; skipped where the repository history is not available.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tarfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpkit as dp
from dpkit.mechanisms import _calibrate
from dpkit.mechanisms import validate as v
from dpkit.noise import samplers

#: The commit before the per-call fast paths: the reference for bit-identical outputs.
BASE = "4e86c9fc0d11cfa91e21a10fe68fc5b9a8f7f120"
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ scalar vs numpy lane path
def _lanes_all_ways(g, seed, force=None, below_one=False):
    """(out, next words) from the scalar, screened and plain numpy paths, on the same inputs."""
    results = []
    for small, screen in ((True, True), (False, True), (False, False)):
        src = dp.noise.seeded(seed)
        limit, flag = samplers._SMALL_LANES, samplers._FILTER
        samplers._SMALL_LANES = 10**9 if small else -1
        samplers._FILTER = screen
        try:
            out = samplers._bern_exp_lanes(
                np.array(g, dtype=np.float64), src,
                lambda i: Fraction(g[i]), None if force is None else np.array(force), below_one,
            )
        finally:
            samplers._SMALL_LANES, samplers._FILTER = limit, flag
        results.append((out.tolist(), src.uint64(4).tolist()))
    return results


@pytest.mark.parametrize("seed", range(6))
def test_scalar_lanes_match_numpy_lanes(seed):
    gen = dp.noise.seeded(1000 + seed)
    n = 1 + int(dp.noise.uniform_int(200, 1, source=gen)[0])
    raw = dp.noise.uniform_float01(n, source=gen)
    # gammas across the table (0..63), big ones (>= 64), exact integers and tiny values
    g = (raw * 70.0).tolist()
    g[: min(n, 4)] = [0.0, 1.0, 63.999, 64.0][: min(n, 4)]
    force = (raw < 0.1).tolist()
    small, screened, plain = _lanes_all_ways(g, seed, force)
    assert small == screened == plain
    small, screened, plain = _lanes_all_ways((raw * 0.999).tolist(), seed, None, below_one=True)
    assert small == screened == plain


def test_scalar_lanes_resolve_ambiguous_lanes_alike():
    # u/2**32 just below exp(-gamma): choose gamma so that exp(-gamma) * 2**32 lies inside the
    # first word of seed 7, which forces the exact (LazyUniform) resolution on both paths
    u0 = int(dp.noise.seeded(7).uint32(1)[0])
    gamma = -math.log((u0 + 0.5) / 2**32)
    g = [gamma] * 5
    small, screened, plain = _lanes_all_ways(g, 7)
    assert small == screened == plain
    # lanes near the threshold (inside the screen's margin) on every path, with forced lanes
    words = dp.noise.seeded(8).uint32(300).tolist()
    g = [-math.log((w + 0.5) / 2**32) - 1e-4 * (i % 7) for i, w in enumerate(words)]
    force = [i % 11 == 0 for i in range(300)]
    small, screened, plain = _lanes_all_ways(g, 8, force)
    assert small == screened == plain


@pytest.mark.parametrize("t", [2, 3, 1001, 40000])
def test_tabulated_brackets_match_computed_ones(t):
    # discrete Laplace acceptance: g = fl(U / t), looked up by U
    for seed in range(4):
        keys = dp.noise.uniform_int(t, 300, source=dp.noise.seeded(seed))
        keys = keys[keys > 0]
        g = keys.astype(np.float64)
        g /= float(t)
        runs = []

        def exact_u(i, keys=keys):
            return Fraction(int(keys[i]), t)

        for tabulated in (True, False):
            src = dp.noise.seeded(50 + seed)
            if tabulated:
                out = samplers._bern_exp_table(keys, samplers._dlap_accept_table(t), src, exact_u)
            else:
                out = samplers._bern_exp_lanes(g, src, exact_u, below_one=True)
            runs.append((out.tolist(), src.uint64(3).tolist()))
        assert runs[0] == runs[1]
    # discrete Gaussian acceptance: g = fl(fl(|Y| - c)**2 k), looked up by |Y|
    sigma2 = Fraction(min(t, 3000) ** 2, 7) + Fraction(1, 3)  # table size about 12 sigma
    a, _, c_f, k_f, bt, den, _rate = samplers._dgauss_setup(sigma2)
    table = samplers._dgauss_accept_table(c_f, k_f)
    assert table is not None
    ay = dp.noise.uniform_int(table[0].size, 400, source=dp.noise.seeded(t))
    d = ay.astype(np.float64)
    d -= c_f
    g = d * d
    g *= k_f
    runs = []
    for tabulated in (True, False):
        src = dp.noise.seeded(t + 1)

        def exact(i):
            return Fraction((bt * int(ay[i]) - a) ** 2, den)

        out = (samplers._bern_exp_table(ay, table, src, exact) if tabulated
               else samplers._bern_exp_lanes(g, src, exact))
        runs.append((out.tolist(), src.uint64(3).tolist()))
    assert runs[0] == runs[1]


# ------------------------------------------------------------------ cached = uncached
def _scales():
    gen = dp.noise.seeded(99)
    out = [1, 2, 3.0, 0.5, 1 / 3, 1e-3, 2.0**-20 * 3.1, 2.0**40, Fraction(7, 3), 1e6, 242424.24]
    out += (dp.noise.uniform_float01(20, source=gen) * 1e4).tolist()
    out += (2.0 ** (dp.noise.uniform_float01(20, source=gen) * 60 - 30)).tolist()
    return out


def test_cached_sampler_setups_match_uncached():
    for x in _scales():
        assert samplers._dlap_setup(x) == samplers._dlap_setup_uncached(x)
        assert samplers._dgauss_setup(x) == samplers._dgauss_setup_uncached(x)
        y = np.float64(x)
        assert samplers._dgauss_setup(y) == samplers._dgauss_setup_uncached(y)


def test_cached_scale_for_matches_uncached():
    for sens in (1, 2, 800, Fraction(5, 2), 1025):
        for eps in (0.0033, 0.1, 0.5, 1.0, 1 / 3, 2.7, 1e-5):
            assert _calibrate.dlap_scale_for(sens, eps) == _calibrate._dlap_scale_for(sens, eps)


def test_caches_keep_the_checks():
    samplers._dlap_setup(1)  # a cached entry for the value 1 must not let True through
    with pytest.raises(TypeError):
        dp.noise.discrete_laplace(True, 3, source=dp.noise.seeded(1))
    for bad in (0.0, -1.0, float("nan"), float("inf"), 2.0**41):
        with pytest.raises(ValueError):
            dp.noise.discrete_laplace(bad, 3, source=dp.noise.seeded(1))
        with pytest.raises(ValueError):
            dp.noise.discrete_gaussian(bad if bad != 2.0**41 else 2.0**81, 3)
    with pytest.raises(ValueError):
        dp.mechanisms.geometric(np.arange(3), sensitivity=1, epsilon=float("nan"))
    with pytest.raises(TypeError):
        dp.mechanisms.geometric(np.arange(3), sensitivity=True, epsilon=1.0)


def test_int64_fast_path_matches_general_path():
    x = np.array([0, -5, 2**62, -(2**62), 2**63 - 1, -(2**63), 7], dtype=np.int64)
    fast = v.check_integers(x, saturate=True)
    general = v.check_integers(x.astype(object), saturate=True)
    assert fast.dtype == np.int64 and fast.tolist() == general.tolist()
    assert fast is not x
    ok = np.array([3, -4], dtype=np.int64)
    assert v.check_integers(ok).tolist() == [3, -4] and v.check_integers(ok) is not ok
    with pytest.raises(ValueError, match="2\\*\\*62"):
        v.check_integers(x)


# ------------------------------------------------------------------ against the base commit
_CASES_SCRIPT = r'''
import json, sys
import numpy as np
import dpkit as dp

def enc(a):
    return np.asarray(a).tolist()

out = []
for case in json.loads(sys.stdin.read()):
    kind, params, n, seed = case
    src = dp.noise.seeded(seed)
    if kind == "dlap":
        row = enc(dp.noise.discrete_laplace(params, n, source=src))
    elif kind == "dgauss":
        row = enc(dp.noise.discrete_gaussian(params, n, source=src))
    else:
        x = np.arange(n, dtype=np.int64) * 37 - 100
        f = dp.mechanisms.geometric if kind == "geometric" else dp.mechanisms.discrete_gaussian
        r = f(x, source=src, **params)
        r2 = f(x[:1].reshape(()), source=src, **params)  # a scalar after, same stream
        row = [enc(r.value), enc(r.ci[0]), enc(r.ci[1]), repr(r.event), repr(r.details),
               r.level, r.insecure, enc(r2.value), enc(r2.ci), repr(r2.event)]
    out.append([row, src.uint64(2).tolist()])  # the words left: same consumption
print(json.dumps(out))
'''


def _cases():
    cases = []
    seeds = range(3)
    for scale in (0.3, 1, 2.5, 7.0, 1e-3, 303.03, 242424.24242424243, 2.0**40):
        for n in (0, 1, 10, 47, 130):
            cases += [["dlap", scale, n, s] for s in seeds]
    for sigma2 in (0.5, 1, 10.0, 1e6, 123456.789, 4.1e9, 2.0**70):
        for n in (0, 1, 10, 60):
            cases += [["dgauss", sigma2, n, s] for s in seeds]
    for sens, eps in ((1, 0.0033), (800, 0.0033), (1, 1.0), (3, 0.25), (2, 7.0)):
        for n in (1, 10, 256):
            cases += [["geometric", {"sensitivity": sens, "epsilon": eps}, n, s] for s in seeds]
    for params in ({"sensitivity": 1, "sigma2": 1e6}, {"sensitivity": 3, "rho": 0.01},
                   {"sensitivity": 1, "rho": 0.5}, {"sensitivity": 2, "sigma2": 17.5}):
        for n in (1, 10, 256):
            cases += [["discrete_gaussian", params, n, s] for s in seeds]
    return cases


def _run_cases(cases, pythonpath=None):
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    done = subprocess.run(
        [sys.executable, "-c", _CASES_SCRIPT], input=json.dumps(cases), env=env,
        capture_output=True, text=True, check=True, cwd=pythonpath or None,
    )
    return json.loads(done.stdout)


def test_outputs_identical_to_base_commit(tmp_path):
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", BASE, "src/dpkit"],
            capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"git history with {BASE[:10]} not available")
    tar = tmp_path / "base.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as tf:
        tf.extractall(tmp_path, filter="data")
    base_src = str(tmp_path / "src")
    cases = _cases()
    old = _run_cases(cases, base_src)
    new = _run_cases(cases, str(REPO / "src"))
    assert len(old) == len(new) == len(cases)
    for case, a, b in zip(cases, old, new, strict=True):
        assert a == b, f"output differs from {BASE[:10]} for {case}"
