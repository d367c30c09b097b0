"""Mechanisms whose true epsilon is known, as membership scores of m canaries (each inserted by a fair coin): what
the threshold strategies are tested on (tests/audit/test_auditor.py), compared on (experiments/score_auditor_power.py)
and chosen from (:mod:`dpaudit.audit.strategy_plan`).

A mechanism is written ``KIND:PARAMETERS``:

* ``null`` — scores that ignore membership (true epsilon 0);
* ``gaussian:MU`` — an inserted canary scores N(MU, 1), a held-out one N(0, 1): the optimal scores of MU-GDP, and
  of an attack whose scores separate like that (true epsilon: MU-GDP's at delta);
* ``auc:A`` — ``gaussian`` at the MU whose AUC is A (MU = sqrt(2) Phi^-1(A)): what a black-box attack's expected
  AUC says;
* ``rr:EPS`` — randomised response: the score is the canary's sign, flipped with probability 1 / (1 + e^EPS) (ties
  broken by a tiny Gaussian), the true epsilon at delta is log(e^EPS - delta (1 + e^EPS));
* ``subsampled:Q,SIGMA,T`` — a white-box Dirac canary of a subsampled Gaussian card, scored as the evaluation scores
  it: T steps, each adding 1 with probability Q (inserted canaries only) plus N(0, SIGMA^2) noise, read by the
  per-step likelihood ratio (dpaudit/audit/whitebox_lr.py) (true epsilon: dp_accounting's PLD of the subsampled
  Gaussian, an upper value, which the caller's accountant gives: the audit layer imports no accountant).

Pure NumPy/SciPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from dpaudit.audit.many_run import gdp_epsilon
from dpaudit.audit.whitebox_lr import subsampled_gaussian_llr


@dataclass(frozen=True)
class Simulated:
    """One mechanism: ``spec`` as written, ``kind`` and ``params``; :meth:`draw` gives (scores, signs)."""

    spec: str
    kind: str
    params: tuple

    def check_size(self, m: int) -> None:
        """A ValueError before any allocation when one simulated audit of m canaries would be too large."""
        if self.kind == "subsampled" and m * int(self.params[2]) > MAX_DRAWS:
            raise ValueError(f"subsampled with T = {int(self.params[2]):,} and m = {m:,} draws m x T = "
                             f"{m * int(self.params[2]):,} normals per simulated audit (at most {MAX_DRAWS:,}): "
                             "use fewer canaries or fewer steps")

    def draw(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        s = rng.choice([-1, 1], size=m)
        if self.kind == "null":
            return rng.normal(size=m), s
        if self.kind in ("gaussian", "auc"):
            return rng.normal(size=m) + self.mu * (s > 0), s
        if self.kind == "rr":
            keep = rng.random(m) < math.exp(self.params[0]) / (1 + math.exp(self.params[0]))
            return np.where(keep, s, -s) + 1e-9 * rng.normal(size=m), s
        q, sigma, steps = self.params
        used = (rng.random((int(steps), m)) < q) & (s[None, :] > 0)
        return subsampled_gaussian_llr(used + sigma * rng.normal(size=(int(steps), m)), q, sigma), s

    @property
    def mu(self) -> float:
        if self.kind == "auc":
            return float(math.sqrt(2.0) * ndtri(self.params[0]))
        return float(self.params[0])

    def true_epsilon(self, delta: float, subsampled_epsilon=None) -> float:
        """The mechanism's epsilon at ``delta``. ``subsampled`` needs an accountant (this layer imports none):
        ``subsampled_epsilon(q, sigma, steps, delta)``, e.g. :func:`pld_epsilon` of dpaudit.cli.audit."""
        if self.kind == "null":
            return 0.0
        if self.kind in ("gaussian", "auc"):
            return gdp_epsilon(self.mu, delta) if self.mu > 0 else 0.0
        if self.kind == "rr":
            e = math.exp(self.params[0])
            return math.log(e - delta * (1 + e))
        if subsampled_epsilon is None:
            raise ValueError(f"{self.spec}: the subsampled Gaussian's epsilon needs an accountant; pass "
                             "subsampled_epsilon=(q, sigma, steps, delta) -> epsilon (dp_accounting's PLD)")
        q, sigma, steps = self.params
        return float(subsampled_epsilon(q, sigma, int(steps), delta))


ARITY = {"null": 0, "gaussian": 1, "auc": 1, "rr": 1, "subsampled": 3}
MAX_STEPS = 10_000  # subsampled: T x m normal draws per simulated audit
MAX_DRAWS = 2 * 10 ** 7  # subsampled: m x T per simulated audit (160 MB of float64)


def parse(spec: str) -> Simulated:
    """``KIND:PARAMETERS`` as in the module's docstring; a ValueError naming the fix for anything else."""
    kind, _, rest = str(spec).strip().partition(":")
    if kind not in ARITY:
        raise ValueError(f"unknown mechanism {spec!r}: write null, gaussian:MU, auc:A, rr:EPS or subsampled:Q,SIGMA,T")
    try:
        params = tuple(float(x) for x in rest.split(",")) if rest.strip() else ()
    except ValueError:
        raise ValueError(f"mechanism {spec!r}: its parameters must be numbers separated by commas") from None
    if len(params) != ARITY[kind] or not all(math.isfinite(p) for p in params):
        raise ValueError(f"mechanism {spec!r}: {kind} takes {ARITY[kind]} finite number(s) after the colon")
    bad = {"gaussian": lambda p: not 0 <= p[0] <= 20, "auc": lambda p: not 0.5 <= p[0] < 1,
           "rr": lambda p: not 0 <= p[0] <= 20,
           "subsampled": lambda p: not (0 < p[0] <= 1 and p[1] > 0 and 1 <= p[2] <= MAX_STEPS and p[2] == int(p[2]))}
    if kind in bad and bad[kind](params):
        raise ValueError(f"mechanism {spec!r} out of range: gaussian MU in [0, 20], auc A in [0.5, 1), rr EPS in "
                         f"[0, 20], subsampled 0 < Q <= 1, SIGMA > 0 and T a whole number in [1, {MAX_STEPS:,}]")
    return Simulated(spec.strip(), kind, params)
