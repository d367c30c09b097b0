"""The LMO-DP noise law (Yang et al., Def. 4.1), as numbers: its parameters, the MGF of the inverse scale, the
density of one noise coordinate, and its existence checks. Pure NumPy/SciPy; the trainer's sampler is
:class:`dpaudit.trainers.noise.LaplaceMixture`, which draws from the same parameters.

The noise added to the clipped sum is Laplace(0, b) with a random scale b = 1 / Y, where

* ``form = "sum"``: Y = a1 * Gamma(k, theta) + a2 * Exp(lambda) + a3 * U(u_low, u_high), independent parts,
  M_Y(t) = prod_k M_k(a_k t) (Thm A.4 of the paper; a part with weight 0 is absent and contributes 1);
* ``form = "mixture"``: Y is one part, chosen with probability a_k (weights summing to 1),
  M_Y(t) = sum_k a_k M_k(t) (Alg. 3, line 13, with its M_1 typo read as M_2).

Y = 1 / b is the only reading under which the paper's accounting is coherent (App. B.1 substitutes
exp(t / b) -> M(t)). The density of one coordinate is f(x) = E[Y exp(-Y |x|)] / 2 = M_Y'(-|x|) / 2.
Everything is computed in log space: the paper's orders go to alpha = 128 and e^{t u_high} overflows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from dpaudit.errors import DpauditError

FORMS = ("sum", "mixture")
PARTS = ("gamma", "exp", "uniform")


@dataclass(frozen=True)
class LmoNoise:
    """The noise parameters S = (a1, a2, a3, k, theta, lambda, u_low, u_high) and how Y combines its parts."""

    a1: float = 0.0  # weight of Gamma(k, theta) (shape k, scale theta)
    a2: float = 0.0  # weight of Exp(lambda) (rate lambda)
    a3: float = 0.0  # weight of U(u_low, u_high)
    gamma_k: float = 1.0
    gamma_theta: float = 1.0
    exp_rate: float = 1.0
    u_low: float = 1.0
    u_high: float = 2.0
    form: str = "sum"

    def __post_init__(self):
        for name in ("a1", "a2", "a3", "gamma_k", "gamma_theta", "exp_rate", "u_low", "u_high"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
                raise DpauditError(f"LMO noise parameter {name} must be a finite number, got {v!r}")
        if self.form not in FORMS:
            raise DpauditError(f"LMO noise form must be one of {', '.join(FORMS)}, got {self.form!r}")
        if min(self.a1, self.a2, self.a3) < 0 or self.a1 + self.a2 + self.a3 <= 0:
            raise DpauditError(f"LMO weights a1, a2, a3 must be >= 0 and not all 0, got {self.weights}")
        if self.form == "mixture" and abs(sum(self.weights) - 1) > 1e-9:
            raise DpauditError(f"the mixture form picks part k with probability a_k: a1 + a2 + a3 must be 1, got "
                               f"{sum(self.weights):.6g}; rescale them or use form = 'sum'")
        if self.a1 > 0 and not (self.gamma_k > 0 and self.gamma_theta > 0):
            raise DpauditError(f"Gamma(k, theta) needs k > 0 and theta > 0, got k = {self.gamma_k}, "
                               f"theta = {self.gamma_theta}")
        if self.a2 > 0 and not self.exp_rate > 0:
            raise DpauditError(f"Exp(lambda) needs a rate lambda > 0, got {self.exp_rate}")
        if self.a3 > 0 and not 0 < self.u_low < self.u_high:
            raise DpauditError(f"U(a, b) needs 0 < a < b (a <= 0 lets the Laplace scale 1/Y be infinite or negative), "
                               f"got a = {self.u_low}, b = {self.u_high}")

    @property
    def point_mass(self) -> float | None:
        """The fixed inverse scale when Y is (to 1e-6 relative) a constant: a plain Laplace of scale 1 / Y."""
        if self.a1 == 0 and self.a2 == 0 and self.u_high - self.u_low <= 1e-6 * self.u_low:
            return self.a3 * 0.5 * (self.u_low + self.u_high) if self.form == "sum" else 0.5 * (self.u_low + self.u_high)
        return None

    @property
    def weights(self) -> tuple[float, float, float]:
        return (self.a1, self.a2, self.a3)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> LmoNoise:
        if not isinstance(d, dict):
            raise DpauditError("LMO noise parameters must be a table of a1, a2, a3, gamma_k, gamma_theta, exp_rate, "
                               "u_low, u_high, form")
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise DpauditError(f"unknown LMO noise parameter(s) {', '.join(unknown)}; known: "
                               f"{', '.join(cls.__dataclass_fields__)}")
        return cls(**{k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v)  # type: ignore[arg-type]
                      for k, v in d.items()})

    # ---- the MGF of Y --------------------------------------------------------------------------------
    def t_max(self) -> float:
        """sup of the t where M_Y(t) is finite (inf when Y is bounded)."""
        lim = [math.inf]
        scale = (lambda w: w) if self.form == "sum" else (lambda w: 1.0 if w > 0 else 0.0)
        if self.a1 > 0:
            lim.append(1.0 / (scale(self.a1) * self.gamma_theta))
        if self.a2 > 0:
            lim.append(self.exp_rate / scale(self.a2))
        return min(lim)

    def log_mgf(self, t: float) -> float:
        """log M_Y(t); inf where the MGF diverges (t >= t_max)."""
        if t >= self.t_max():
            return math.inf
        parts = [(w, _log_part_mgf(p, self, w * t if self.form == "sum" else t)) for p, w in zip(PARTS, self.weights)
                 if w > 0]
        if self.form == "sum":
            return float(sum(lm for _, lm in parts))
        return float(_logsumexp([math.log(w) + lm for w, lm in parts]))

    def log_mgf_v(self, t) -> np.ndarray:
        """:meth:`log_mgf` at every entry of an array ``t`` at once (the noise search's per-order curves)."""
        t = np.asarray(t, dtype=float)
        out = np.full(t.shape, math.inf)
        ok = t < self.t_max()
        tt = t[ok]
        parts = [(w, _log_part_mgf_v(p, self, w * tt if self.form == "sum" else tt))
                 for p, w in zip(PARTS, self.weights) if w > 0]
        if self.form == "sum":
            out[ok] = sum(lm for _, lm in parts)
        else:
            out[ok] = np.logaddexp.reduce(np.stack([math.log(w) + lm for w, lm in parts]), axis=0)
        return out

    def mean(self) -> float:
        """E[Y]."""
        m = [self.gamma_k * self.gamma_theta, 1.0 / self.exp_rate, 0.5 * (self.u_low + self.u_high)]
        return float(sum(w * mk for w, mk in zip(self.weights, m)))

    # ---- one noise coordinate ------------------------------------------------------------------------
    def log_density(self, x) -> np.ndarray:
        """log f(x), f(x) = M_Y'(-|x|) / 2, the density of one Laplace(1/Y) coordinate (vectorised)."""
        t = -np.abs(np.asarray(x, dtype=float))
        if self.form == "sum":
            logm = sum(_log_part_mgf_v(p, self, w * t) for p, w in zip(PARTS, self.weights) if w > 0)
            dlog = sum(w * _dlog_part_mgf_v(p, self, w * t) for p, w in zip(PARTS, self.weights) if w > 0)
            return math.log(0.5) + logm + np.log(dlog)
        terms = [math.log(w) + _log_part_mgf_v(p, self, t) + np.log(_dlog_part_mgf_v(p, self, t))
                 for p, w in zip(PARTS, self.weights) if w > 0]
        return math.log(0.5) + np.logaddexp.reduce(np.stack(terms), axis=0)

    def mean_abs_noise(self) -> float:
        """E|Z| = E[1/Y] (the paper's 'usefulness' made explicit): by quadrature of M_Y(-s) over s >= 0."""
        from scipy import integrate

        val, _ = integrate.quad(lambda s: math.exp(self.log_mgf(-s)), 0, math.inf, limit=200)
        return float(val)

    def noise_variance(self) -> float:
        """Var Z = 2 E[1/Y^2] = 2 int_0^inf s M_Y(-s) ds."""
        from scipy import integrate

        val, _ = integrate.quad(lambda s: s * math.exp(self.log_mgf(-s)), 0, math.inf, limit=200)
        return float(2 * val)


def _logsumexp(xs: list[float]) -> float:
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs)) if math.isfinite(m) else m


def _log_part_mgf(part: str, s: LmoNoise, t: float) -> float:
    return float(_log_part_mgf_v(part, s, np.asarray(t, dtype=float)))


def _log_part_mgf_v(part: str, s: LmoNoise, t: np.ndarray) -> np.ndarray:
    """log of one part's MGF at t (finite where it exists)."""
    t = np.asarray(t, dtype=float)
    if part == "gamma":
        return -s.gamma_k * np.log1p(-t * s.gamma_theta)
    if part == "exp":
        return -np.log1p(-t / s.exp_rate)
    a, b = s.u_low, s.u_high
    w = t * (b - a)
    small = np.abs(w) < 1e-8
    wsafe = np.where(small, 1.0, w)
    # (e^{tb} - e^{ta}) / (t (b - a)) = e^{ta} (e^{w} - 1) / w, and log((e^w - 1) / w) = max(w, 0) +
    # log(1 - e^{-|w|}) - log|w| for either sign of w, without overflow
    aw = np.abs(wsafe)
    big = t * a + np.maximum(wsafe, 0) + np.log(-np.expm1(-aw)) - np.log(aw)
    return np.where(small, t * (a + b) / 2, big)


def _dlog_part_mgf_v(part: str, s: LmoNoise, t: np.ndarray) -> np.ndarray:
    """d/dt log M(t) of one part (= E[Y e^{tY}] / E[e^{tY}] > 0)."""
    t = np.asarray(t, dtype=float)
    if part == "gamma":
        return s.gamma_k * s.gamma_theta / (1 - t * s.gamma_theta)
    if part == "exp":
        return 1.0 / (s.exp_rate - t)
    a, b = s.u_low, s.u_high
    w = t * (b - a)
    small = np.abs(w) < 1e-6
    wsafe = np.where(small, 1.0, w)
    # d/dt log((e^{tb} - e^{ta}) / t) = a + (b - a) / (1 - e^{-w}) - 1 / t, with 1 / (1 - e^{-w}) written
    # for either sign of w without overflow
    aw = np.abs(wsafe)
    inv = np.where(wsafe > 0, 1.0, -np.exp(-aw)) / -np.expm1(-aw)
    big = a + (b - a) * inv - (b - a) / wsafe
    return np.where(small, (a + b) / 2 + t * (b - a) ** 2 / 12, big)
