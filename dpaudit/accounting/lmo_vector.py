"""dpaudit's independent accounting of LMO-DP: the mechanism as it runs, noise on a d-dimensional L2-clipped sum.

One noisy step adds, to every coordinate of the clipped sum (sensitivity ||Delta||_2 <= C, any direction),
Laplace noise of scale 1 / Y. Two ways of drawing Y (recorded on the card as ``draw``):

* ``per_coordinate`` — every coordinate has its own Y: the coordinates are i.i.d. with the mixture density f,
  RDP adds over coordinates, sum_i R_a(Delta_i) with R_a(s) the exact RDP of one coordinate shifted by s
  (quadrature). With kappa_a = sup_{0 < s <= C} R_a(s) / s^2, the step is (a, kappa_a C^2)-RDP in every
  direction and every dimension. The sup is taken numerically over s = C 2^-j (j = 0..12) and the s -> 0
  limit a I_f / 2 (I_f the Fisher information of f, by quadrature), which is the dense direction as d -> inf;
  s = C is the one-hot (Dirac) direction, the only one the paper's scalar analysis covers.
* ``per_step`` — one Y for all coordinates of a step. Revealing Y can only help an attacker
  (post-processing), and given Y = y the step is product Laplace(1/y), (a, L_a y^2 C^2)-RDP in every
  direction (L_a = sup_u R^Lap_a(u) / u^2, closed form). Y's Gamma and Exp parts have exponential tails, so
  E exp((a-1) L_a C^2 Y^2) is infinite: the analysis truncates Y at y_max with P(Y > y_max) <= p per step
  (Chernoff bound from the MGF; exact tails for the mixture form) and pays T p (1 + e^eps) in delta.

Then Poisson subsampling (general bound of Zhu & Wang 2019, :mod:`.rdp_general`), T-fold composition and the
Balle et al. conversion. RDP is non-decreasing in the order, so the per-step curve is computed at a ladder of
orders and each integer order takes the value of the next computed one above it (an upper bound).
The lower value comes from :mod:`.lmo_pld`: the exact privacy-loss distribution of particular neighbouring
pairs (C on one coordinate, or spread over m coordinates), every approximation rounding the loss down, so the true
epsilon is at least that. With per-step draws only the one-coordinate pair is used (its marginal is exact).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from dpaudit.accounting import rdp_general
from dpaudit.accounting.events import require
from dpaudit.accounting.lmo_noise import LmoNoise

DRAWS = ("per_step", "per_coordinate")
MAX_ORDER = 128
LADDER = (2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128)
SHIFTS = tuple(2.0 ** -j for j in range(13))  # s / C


def _fill(ladder_values: dict[int, float]) -> dict[int, float]:
    """Every integer order 2..MAX_ORDER, each at the value of the next ladder order above it (RDP increases
    with the order, so this is an upper bound)."""
    out, rungs = {}, sorted(ladder_values)
    for a in range(2, MAX_ORDER + 1):
        out[a] = ladder_values[next(r for r in rungs if r >= a)]
    return out


# ---- per-coordinate draws ------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def fisher_information(noise: LmoNoise) -> float:
    """I_f = int f'^2 / f of one coordinate's density, f' by central differences of log f (f' / f = (log f)');
    y0^2 for a plain Laplace of scale 1 / y0."""
    from scipy import integrate

    if noise.point_mass is not None:
        return noise.point_mass ** 2

    def integrand(x):
        h = 1e-6 * max(1.0, abs(x))
        dlog = (noise.log_density(x + h) - noise.log_density(x - h)) / (2 * h)
        return float(np.exp(noise.log_density(x)) * dlog ** 2)

    val, _ = integrate.quad(integrand, 0, math.inf, limit=400)
    return float(2 * val)


def kappa(noise: LmoNoise, C: float, alpha: int) -> tuple[float, dict]:
    """(kappa_a = sup_s R_a(s) / s^2 over 0 < s <= C, {dirac: R_a(C), dense_limit: a I_f C^2 / 2, ...})."""
    from dpaudit.accounting.lmo_paper import exact_scalar_rdp

    limit = alpha * fisher_information(noise) / 2
    ratios = {}
    for r in SHIFTS:
        s = r * C
        ratios[r] = exact_scalar_rdp(noise, s, alpha) / s ** 2
    k = max(limit, *ratios.values())
    return k, {"dirac": ratios[1.0] * C ** 2, "dense_limit": limit * C ** 2, "sup_at": "limit" if k == limit
               else f"s = {min(r for r, v in ratios.items() if v == k):g} C"}


def per_coordinate_curve(noise: LmoNoise, C: float) -> tuple[dict[int, float], dict]:
    ladder, info = {}, {}
    for a in LADDER:
        k, i = kappa(noise, C, a)
        ladder[a] = k * C ** 2
        info[a] = i
    return _fill(ladder), info


# ---- per-step draws --------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def laplace_ratio_sup(alpha: int) -> float:
    """L_a = sup_{u > 0} R^Lap_a(u) / u^2 for Laplace of scale 1 shifted by u (closed form, Mironov 2017),
    over a fine log grid with the u -> 0 limit a / 2."""
    from dpaudit.accounting.lmo_paper import laplace_rdp

    u = np.geomspace(1e-4, 1e3, 4000)
    r = np.array([laplace_rdp(x, alpha) for x in u])
    return float(max(alpha / 2, np.max(r / u ** 2)))


def _part_laws(noise: LmoNoise):
    from scipy import stats

    return [stats.gamma(noise.gamma_k, scale=noise.gamma_theta), stats.expon(scale=1 / noise.exp_rate),
            stats.uniform(noise.u_low, noise.u_high - noise.u_low)]


def log_tail_bound(noise: LmoNoise, y: float) -> float:
    """log of an upper bound on P(Y > y): exact for the mixture form, Chernoff min_t M(t) e^{-ty} for the sum."""
    from scipy import optimize
    from scipy.special import logsumexp

    if noise.form == "mixture":
        parts = [law.logsf(y) for law in _part_laws(noise)]
        return float(min(0.0, logsumexp([math.log(w) + p for w, p in zip(noise.weights, parts) if w > 0])))
    if y <= noise.mean():
        return 0.0
    tmax = noise.t_max()
    hi = tmax * (1 - 1e-9) if math.isfinite(tmax) else 1e3 / max(y, 1e-9)
    res = optimize.minimize_scalar(lambda t: noise.log_mgf(t) - t * y, bounds=(0.0, hi), method="bounded",
                                   options={"xatol": 1e-10 * max(hi, 1)})
    return float(min(0.0, res.fun))


def log_tails(noise: LmoNoise, ys: np.ndarray) -> np.ndarray:
    """log upper bounds on P(Y > y) at grid points ys = 0, h, 2h, ...: for the sum form the smaller of Chernoff and
    a rounded-up discretisation (every part's value rounded up to the grid, the parts' PMFs convolved exactly,
    mass beyond the grid counted as exceeding every y: a stochastically larger Y, so its tails are upper bounds)."""
    cher = np.array([log_tail_bound(noise, float(y)) for y in ys])
    if noise.form == "mixture":
        return cher
    h, n = float(ys[1] - ys[0]), len(ys)
    pmfs, beyond = [], 0.0
    for law, w in zip(_part_laws(noise), noise.weights):
        if w == 0:
            continue
        edges = np.arange(n + 1) * h / w  # part value w*X rounded up to a multiple of h: cell j holds X in (e_j-1, e_j]
        sf = law.sf(edges)
        pmf = np.r_[1 - sf[0], -np.diff(sf)]  # cell 0: X <= 0 (mass 0 for positive parts)
        pmfs.append(np.clip(pmf[:n], 0, None))
        beyond += sf[n - 1]  # beyond the grid: counted as larger than every y
    total = pmfs[0]
    for pm in pmfs[1:]:
        total = np.convolve(total, pm)
    tail = np.cumsum(total[::-1])[::-1]  # P(Y_up >= k h)
    # P(Y > y_i) <= P(Y_up > y_i) = P(Y_up >= (i+1) h)
    up = np.array([tail[i + 1] if i + 1 < len(tail) else 0.0 for i in range(n)]) + beyond
    with np.errstate(divide="ignore"):
        return np.minimum(cher, np.minimum(0.0, np.log(up)))


def truncation_point(noise: LmoNoise, log_p: float) -> float:
    """A y_max with log P(Y > y_max) <= log_p (by :func:`log_tail_bound`)."""
    target = log_p
    hi = max(1.0, noise.mean())
    while log_tail_bound(noise, hi) > target:
        hi *= 2
        if hi > 1e12:
            raise ValueError("no truncation point found")
    lo = 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if log_tail_bound(noise, mid) > target else (lo, mid)
    return hi


GRID = 1500  # points of the Abel-summation bound of E phi(min(Y, y_max))


def per_step_curve(noise: LmoNoise, C: float, y_max: float) -> dict[int, float]:
    """Per-step RDP of the revealed-Y mechanism with Y truncated at y_max: 1/(a-1) log E phi(min(Y, y_max)),
    phi(y) = exp((a-1) L_a C^2 y^2) increasing, bounded on a grid 0 = y_0 < ... < y_n = y_max by
    phi(0) + sum_j (phi(y_j+1) - phi(y_j)) P(Y > y_j)  (an upper bound: P(Y > y) <= P(Y > y_j) on each cell)."""
    from scipy.special import logsumexp

    ys = np.linspace(0.0, y_max, GRID + 1)
    log_tail = log_tails(noise, ys)[:-1]
    ladder = {}
    for a in LADDER:
        c = (a - 1) * laplace_ratio_sup(a) * C ** 2
        lo, hi = c * ys[:-1] ** 2, c * ys[1:] ** 2
        log_inc = hi + np.log(-np.expm1(lo - hi))  # log(phi(y_j+1) - phi(y_j))
        ladder[a] = float(logsumexp(np.r_[0.0, log_inc + log_tail]) / (a - 1))
    return _fill(ladder)


# ---- the accountant ----------------------------------------------------------------------------------------
def _noise_of(ev) -> LmoNoise:
    return LmoNoise.from_dict(ev.noise)


def epsilon_for(noise: LmoNoise, C: float, draw: str, sample_rate: float, steps: int, delta: float,
                eps_guess: float = 10.0) -> tuple[float, str]:
    """(epsilon upper bound at ``delta``, detail) for ``steps`` Poisson-subsampled steps."""
    if draw == "per_coordinate":
        base, info = per_coordinate_curve(noise, C)
        total = {a: steps * v for a, v in rdp_general.poisson_subsampled(base, sample_rate).items()}
        eps, order = rdp_general.to_epsilon(total, delta)
        removal = {a: steps * v for a, v in rdp_general.poisson_subsampled(base, sample_rate, bound="binomial").items()}
        i2 = info[2]
        return eps, (f"per-coordinate draws, d-dim worst case over directions (kappa_a C^2; order {order}); per-step "
                     f"RDP at a = 2: Dirac {i2['dirac']:.4g}, dense limit {i2['dense_limit']:.4g}; Zhu-Wang Poisson "
                     f"subsampling (upper only; with the claim's binomial form instead: "
                     f"{rdp_general.to_epsilon(removal, delta)[0]:.4g})")
    for _ in range(8):
        log_p = math.log(delta) - math.log(2 * steps) - np.logaddexp(0.0, eps_guess)
        y_max = truncation_point(noise, log_p)
        base = per_step_curve(noise, C, y_max)
        total = {a: steps * v for a, v in rdp_general.poisson_subsampled(base, sample_rate).items()}
        eps, order = rdp_general.to_epsilon(total, delta / 2)
        if eps <= eps_guess:
            return eps, (f"per-step draws, Y revealed and truncated at {y_max:.4g} (log P(Y > y_max) <= {log_p:.3g} "
                         f"per step, delta/2 paid for it); d-dim worst case (L_a y^2 C^2; order {order}); Zhu-Wang "
                         "Poisson subsampling (upper only)")
        if not math.isfinite(eps) or eps > 100:
            break
        eps_guess = eps + 1.0
    return math.inf, ("per-step draws: no finite bound from this analysis (a shared Y with an exponential tail makes "
                      "E exp(c Y^2) infinite, and truncating it costs more than delta allows); draw Y per coordinate "
                      "or bound Y")


PARAMETER_RANGE = (1e-6, 1e6)  # every weight and parameter of a part Y uses
GAMMA_SHAPE_MIN = 0.01  # a Gamma shape of 1e-6 ran its density integrals for minutes (0.01: 30 s)
LOSS_RANGE = (1e-6, 10.0)  # clipping_norm x E[Y]: one coordinate's privacy loss scale per step


def check_range(noise: LmoNoise, C: float) -> None:
    """:class:`NotApplicable` outside the range this accountant's numerics hold: a hostile round's fuzz of an LMO
    card (each parameter at 1e308, 1e-308, 5e-324, 1e15) found overflows, divisions by zero and runs of minutes there.
    Noise so small that C x E[Y] > 10 has a useful epsilon nowhere (thousands per step); C x E[Y] < 1e-6 is 0."""
    from dpaudit.accounting.events import NotApplicable

    lo, hi = PARAMETER_RANGE
    used = {"a1": ("gamma_k", "gamma_theta"), "a2": ("exp_rate",), "a3": ("u_low", "u_high")}
    for weight, params in used.items():
        if getattr(noise, weight) > 0:
            for name in (weight, *params):
                v, low = getattr(noise, name), GAMMA_SHAPE_MIN if name == "gamma_k" else lo
                if not low <= v <= hi:
                    raise NotApplicable(f"the LMO vector accountant handles noise parameters in [{low:g}, {hi:g}]; "
                                        f"{name} = {v:g}")
    scale = C * noise.mean()
    if not LOSS_RANGE[0] <= scale <= LOSS_RANGE[1]:
        raise NotApplicable(f"the LMO vector accountant handles clipping_norm x E[Y] (one coordinate's loss scale per "
                            f"step) in [{LOSS_RANGE[0]:g}, {LOSS_RANGE[1]:g}]; here it is {scale:g}")


LOWER_SPREADS = (1, 4, 16, 64)  # the pairs of the lower value: C spread over m coordinates


def interval(events, delta: float, relation: str = "add_remove", dataset_size=None) -> tuple:
    from dpaudit.accounting import lmo_pld

    require(events, ("poisson",), "dpaudit LMO vector accountant", relation, kinds=("subsampled_laplace_mixture",))
    if len(events) != 1:
        from dpaudit.accounting.events import NotApplicable

        raise NotApplicable("the LMO vector accountant analyses one LMO training phase")
    ev = events[0]
    nz = _noise_of(ev)
    check_range(nz, ev.clipping_norm)
    eps, detail = epsilon_for(nz, ev.clipping_norm, ev.draw, ev.sample_rate, ev.steps, delta)
    spreads: tuple[int, ...] = LOWER_SPREADS if ev.draw == "per_coordinate" else (1,)
    if ev.dimension:
        spreads = tuple(m for m in spreads if m <= ev.dimension)
    lo, m = lmo_pld.best_lower(nz, ev.clipping_norm, ev.sample_rate, ev.steps, delta, spreads)
    if lo is None:
        return None, eps, (f"{detail}; no lower value: the exact PLD of {ev.steps:,} steps would need a grid of more "
                           f"than {lmo_pld.MAX_COMPOSED_CELLS:,} cells")
    where = "one coordinate" if m == 1 else f"C spread over {m} coordinates"
    return lo, eps, f"{detail}; lower value: exact PLD of the pair with {where} (rounded down)"


def epsilon(events, delta: float) -> float:
    return interval(events, delta)[1]
