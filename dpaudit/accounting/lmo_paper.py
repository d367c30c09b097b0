"""LMO-DP's own accounting (Yang et al., Thm 4.2, Lemma 3.3, Alg. 3), reconstructed faithfully: the *claim*.

Per step, the paper treats the noise as a scalar Laplace query with sensitivity C whose inverse scale Y is
random, and substitutes e^{tC/b} -> M_Y(tC) in the Laplace RDP (Mironov 2017):

    eps_alpha = 1/(alpha-1) log[ alpha/(2alpha-1) M_Y((alpha-1)C) + (alpha-1)/(2alpha-1) M_Y(-alpha C) ]   (general C)

The printed Eq. 4 (:func:`printed_eq4_rdp`) equals this only at C = 1. By Jensen (joint convexity of
p^a q^(1-a)) the formula is an *upper* bound of the exact RDP of the 1-D mixture
(:func:`exact_scalar_rdp`, by quadrature) — when the noise really is one scalar. The paper leaves the
subsampling unspecified; this reconstruction uses the binomial (Steinke) form of Poisson subsampling
(:mod:`.rdp_general`; exact for the removal direction, the kindest reading of the paper), composes T identical steps (Lemma 3.3) and converts with the Balle et al. rule at
orders 2..128, which is what the paper's smallest totals (just above that grid's floor) imply its code did.
Its printed Eq. 1 and Alg. 3's max over orders are available to show what they would give.

What this analysis leaves out — the noise lands on a d-dimensional L2-clipped gradient — is
:mod:`.lmo_vector`'s job, dpaudit's independent accounting.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from dpaudit.accounting import rdp_general
from dpaudit.accounting.lmo_noise import LmoNoise
from dpaudit.errors import DpauditError

ORDERS = rdp_general.INTEGER_ORDERS


def scalar_rdp(noise: LmoNoise, C: float, alpha: float) -> float:
    """The paper's per-step RDP at order ``alpha`` (general-C form); inf where M_Y((alpha-1)C) diverges."""
    a = float(alpha)
    up = noise.log_mgf((a - 1) * C)
    if not math.isfinite(up):
        return math.inf
    down = noise.log_mgf(-a * C)
    val = np.logaddexp(math.log(a / (2 * a - 1)) + up, math.log((a - 1) / (2 * a - 1)) + down)
    return float(max(0.0, val / (a - 1)))


def printed_eq4_rdp(noise: LmoNoise, C: float, alpha: float) -> float:
    """Eq. 4 exactly as printed: 1/(a-1) log{a/(2a-1) M(a-1) + M(1-C-a)/2 + M((1-2C)a + C-1) / (2(1-2a))}.
    Right at C = 1 only; NaN where its (signed) sum is not positive."""
    a = float(alpha)
    m = lambda t: math.exp(noise.log_mgf(t))  # noqa: E731
    s = a / (2 * a - 1) * m(a - 1) + 0.5 * m(1 - C - a) + m((1 - 2 * C) * a + C - 1) / (2 * (1 - 2 * a))
    return math.log(s) / (a - 1) if s > 0 else math.nan


def exact_scalar_rdp(noise: LmoNoise, shift: float, alpha: float) -> float:
    """The exact RDP D_alpha(f(. - shift) || f) of one noise coordinate shifted by ``shift``, by quadrature:
    1/(a-1) log int f(x-s)^a f(x)^(1-a) dx, f the mixture density. The two directions are equal (f is
    symmetric)."""
    from scipy import integrate

    a, s = float(alpha), abs(float(shift))
    if s == 0:
        return 0.0
    if noise.point_mass is not None:  # plain Laplace: Mironov's closed form
        return laplace_rdp(s * noise.point_mass, a)

    def g(x):  # f(x)^(1-a) f(x-s)^a / f(x) - 1, times f(x): integrates to exp((a-1) D) - 1
        lf, ls = noise.log_density(x), noise.log_density(x - s)
        return float(np.exp(lf) * np.expm1(a * (ls - lf)))

    pts = sorted({0.0, s})
    total = 0.0
    for lo, hi in ((-math.inf, pts[0]), (pts[0], pts[-1]), (pts[-1], math.inf)):
        if lo == hi:
            continue
        val, _ = integrate.quad(g, lo, hi, limit=400, epsabs=1e-14, epsrel=1e-10)
        total += val
    return float(math.log1p(total) / (a - 1)) if total > -1 else math.inf


def laplace_rdp(u: float, alpha: float) -> float:
    """RDP of Laplace(scale 1) shifted by u (Mironov 2017, Prop. 6)."""
    a = float(alpha)
    return float(np.logaddexp(math.log(a / (2 * a - 1)) + (a - 1) * u, math.log((a - 1) / (2 * a - 1)) - a * u)
                 / (a - 1))


def step_curve(noise: LmoNoise, C: float, orders=ORDERS) -> dict[int, float]:
    """:func:`scalar_rdp` at every integer order 2..max(orders), computed for all orders at once."""
    a = np.arange(2, max(orders) + 1, dtype=float)
    with np.errstate(over="ignore"):  # C near the float's limit: an order's argument overflows to inf (M_Y diverges)
        up, down = noise.log_mgf_v((a - 1) * C), noise.log_mgf_v(-a * C)
    with np.errstate(invalid="ignore"):
        val = np.logaddexp(np.log(a / (2 * a - 1)) + up, np.log((a - 1) / (2 * a - 1)) + down)
    rdp = np.where(np.isfinite(up), np.maximum(0.0, val / (a - 1)), math.inf)
    return {int(k): float(v) for k, v in zip(a, rdp)}


@dataclass(frozen=True)
class PaperClaim:
    epsilon: float
    order: int
    delta: float
    floor: float  # the conversion's floor at these orders: a claim within 10% of it reflects the grid
    near_floor: bool
    detail: str

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "order": self.order, "delta": self.delta, "floor": self.floor,
                "near_floor": self.near_floor, "detail": self.detail}


def claim(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float, conversion: str = "balle",
          orders=ORDERS) -> PaperClaim:
    """The epsilon LMO-DP's analysis claims for ``steps`` Poisson-subsampled steps of this noise."""
    base = step_curve(noise, C, orders)
    sub = rdp_general.poisson_subsampled(base, sample_rate, orders, bound="binomial")
    total = {a: steps * v for a, v in sub.items()}
    eps, order = rdp_general.to_epsilon(total, delta, conversion)
    fl = rdp_general.floor(delta, max(orders), conversion)
    return PaperClaim(eps, order, delta, fl, bool(eps <= 1.1 * fl),
                      f"LMO-DP's scalar analysis (Thm 4.2, general C = {C:g}), Poisson subsampling at q = "
                      f"{sample_rate:.4g} (binomial form), {steps} steps, {conversion} conversion at orders "
                      f"{min(orders)}..{max(orders)}")


def alg3_max_rule(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float,
                  conversion: str = "balle", orders=ORDERS) -> float:
    """Alg. 3, line 19 as printed: the *max* over orders of the converted epsilon (dominated by alpha = 2)."""
    sub = rdp_general.poisson_subsampled(step_curve(noise, C, orders), sample_rate, orders, bound="binomial")
    return max(rdp_general._convert(steps * v, a, delta, conversion) for a, v in sub.items())


# ---- Alg. 3: the offline search, with a stated objective ---------------------------------------------
OBJECTIVES = ("mean_abs", "variance")

# The paper reports a_k in [0.1, 0.9] (App. E.1) and nothing else; the ranges of k, theta, lambda and U(a, b)
# are ours, stated here and printed by `dpaudit lmo search`.
# The overall scale of Y is bisected for every point, so the grid covers shapes only.
DEFAULT_GRID = {
    "a1": (0.1, 0.5, 0.9), "a2": (0.1, 0.5, 0.9), "a3": (0.1, 0.5, 0.9),
    "gamma_k": (1.0, 2.0, 4.0), "gamma_theta": (1.0,), "exp_rate": (0.5, 1.0, 2.0),
    "u_low": (0.5, 1.0), "u_width": (0.5, 2.0),
}


@dataclass(frozen=True)
class SearchResult:
    noise: LmoNoise
    scale: float  # the grid point's Y multiplied by this factor (bisected) to meet the target
    claim: PaperClaim
    objective: str
    objective_value: float
    candidates: int
    feasible: int

    def to_dict(self) -> dict:
        return {"noise": self.noise.to_dict(), "scale": self.scale, "claim": self.claim.to_dict(),
                "objective": self.objective, "objective_value": self.objective_value,
                "candidates": self.candidates, "feasible": self.feasible}


def scaled(noise: LmoNoise, c: float) -> LmoNoise:
    """The same law with Y multiplied by c (Gamma scale, Exp rate and U ends rescaled)."""
    return LmoNoise(noise.a1, noise.a2, noise.a3, noise.gamma_k, noise.gamma_theta * c, noise.exp_rate / c,
                    noise.u_low * c, noise.u_high * c, noise.form)


def objective_value(noise: LmoNoise, objective: str) -> float:
    return noise.mean_abs_noise() if objective == "mean_abs" else noise.noise_variance()


def search(target_epsilon: float, delta: float, sample_rate: float, steps: int, C: float = 1.0,
           objective: str = "mean_abs", grid: dict | None = None, form: str = "sum", conversion: str = "balle",
           progress=None) -> SearchResult:
    """Alg. 3 made well-posed: for every grid point, scale Y so that the paper's claim meets the target
    (bisection on the scale; the claim decreases as the noise grows), and keep the point of least
    ``objective`` (E|Z| or Var Z) — the paper keeps 'the last feasible' point and states no objective.
    Over 8 parameters: the mechanism's four numbers and the paper's search options, all by name, as `dpaudit lmo search` passes them."""
    if objective not in OBJECTIVES:
        raise DpauditError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    g = {**DEFAULT_GRID, **(grid or {})}
    check_target(target_epsilon, delta, conversion)
    best, n, feasible = None, 0, 0
    combos = list(itertools.product(*(g[k] for k in ("a1", "a2", "a3", "gamma_k", "gamma_theta", "exp_rate",
                                                     "u_low", "u_width"))))
    for a1, a2, a3, k, th, lam, lo, wd in (progress(combos) if progress else combos):
        if form == "mixture":
            tot = a1 + a2 + a3
            a1, a2, a3 = a1 / tot, a2 / tot, a3 / tot
        n += 1
        try:
            base = LmoNoise(a1, a2, a3, k, th, lam, lo, lo + wd, form)
        except DpauditError:
            continue
        c = _scale_for(base, target_epsilon, delta, sample_rate, steps, C, conversion)
        if c is None:
            continue
        feasible += 1
        nz = scaled(base, c)
        val = objective_value(nz, objective)
        if best is None or val < best[0]:
            best = (val, nz, c)
    if best is None:
        raise DpauditError(f"no grid point reaches epsilon {target_epsilon} at delta {delta} (q = {sample_rate}, "
                           f"T = {steps}); widen the grid or raise epsilon")
    val, nz, c = best
    return SearchResult(nz, c, claim(nz, C, sample_rate, steps, delta, conversion), objective, val, n, feasible)


def check_target(target_epsilon: float, delta: float, conversion: str = "balle") -> None:
    """A target the paper's claim cannot meet at any noise is refused: at or below the conversion's floor at
    ``delta`` (its orders go up to ``max(ORDERS)``)."""
    floor = rdp_general.floor(delta, max(ORDERS), conversion)
    if target_epsilon <= floor:
        raise DpauditError(f"target epsilon {target_epsilon} is at or below {floor:.4g}, the smallest the "
                           f"{conversion} conversion can give with orders up to {max(ORDERS)} at delta {delta}; "
                           "raise epsilon or delta")


def _scale_for(base: LmoNoise, target: float, delta: float, q: float, steps: int, C: float,
               conversion: str) -> float | None:
    try:
        return scale_to(base, lambda nz: claim(nz, C, q, steps, delta, conversion).epsilon, target)
    except DpauditError:
        return None


def scale_to(base: LmoNoise, epsilon_of, target: float, rel_tol: float = 0.005) -> float:
    """Largest c (to ``rel_tol``, the safe end) with epsilon_of(scaled(base, c)) <= target: epsilon grows with Y
    (less noise). An error when no c in [1e-6, 1e6] meets the target."""
    def ok(c):
        return epsilon_of(scaled(base, c)) <= target

    lo, hi = 1.0, 1.0
    if ok(1.0):
        while ok(hi):
            lo, hi = hi, hi * 4
            if hi > 1e6:
                raise DpauditError(f"the noise shape meets epsilon {target} at every scale up to 1e6; check the target")
    else:
        while not ok(lo):
            hi, lo = lo, lo / 4
            if lo < 1e-6:
                raise DpauditError(f"no scale of this noise shape reaches epsilon {target}; raise epsilon or delta")
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
