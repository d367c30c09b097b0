"""dp_accounting's subsampled-Gaussian PLD with the inverse privacy loss evaluated on the whole grid at once.

dp_accounting (0.6) builds a Gaussian PLD by calling ``inverse_privacy_loss`` once per grid point in a Python
loop: at a discretisation of 1e-5 that is ~1.2 million scalar calls and ~4.5 s per pass, most of a cold
``dpaudit account --card``. Here the same formulas run as numpy array operations:

* :class:`GridGaussianPrivacyLoss` is dp_accounting's ``GaussianPrivacyLoss`` whose ``get_delta_for_epsilon``
  computes the x cut-offs for all epsilons in one call, so dp_accounting's own connect-the-dots construction
  (the pessimistic PLD) runs unchanged on it;
* :func:`_privacy_buckets` is dp_accounting's privacy-buckets construction (the optimistic PLD,
  ``_create_pld_pmf_from_monotone_privacy_loss`` with ``use_connect_dots=False``) with the same loop unrolled
  into arrays: the same x boundaries, the same buckets, the same tails.

Add/remove neighbours with sampling rate q < 1 only (replace-one and q = 1 keep dp_accounting's own path).
tests/accounting/test_accounting_grid.py checks both estimates against dp_accounting's, PMF by PMF and epsilon by epsilon.
"""

from __future__ import annotations

import collections
import math

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss


class GridGaussianPrivacyLoss(GaussianPrivacyLoss):
    """``GaussianPrivacyLoss`` (sensitivity 1) whose inverse privacy loss also takes arrays."""

    def inverse_losses(self, losses: np.ndarray) -> np.ndarray:
        """``inverse_privacy_loss`` of every entry (the largest x whose privacy loss is at least it)."""
        losses = np.asarray(losses, dtype=float)
        q = self.sampling_prob
        if q == 1.0 or self.adjacency_type == AdjacencyType.REPLACE:
            return np.array([self.inverse_privacy_loss(float(v)) for v in losses])
        var = self._standard_deviation ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.adjacency_type == AdjacencyType.REMOVE:
                # log(1/q e^l + 1 - 1/q) = d + log1p(-exp(log(1/q - 1) - d)), d = l + log(1/q)   (common._log_sub)
                d = losses + np.log(1 / q)
                unsub = d + np.log1p(-np.exp(np.log(1 / q - 1) - d))
                x = -0.5 - unsub * var
            else:  # ADD: -log(1/q e^-l + 1 - 1/q), then the remove inverse shifted by the sensitivity
                d = -losses + np.log(1 / q)
                unsub = -(d + np.log1p(-np.exp(np.log(1 / q - 1) - d)))
                x = 1.0 + (-0.5 - unsub * var)
        # the boundary cases dp_accounting treats apart (isclose to log(1 - q) / -log(1 - q), infinities)
        edge = ~np.isfinite(x) | np.isclose(losses, self._edge(), rtol=1e-9, atol=0.0) | ~np.isfinite(losses)
        for i in np.flatnonzero(edge):
            x[i] = self.inverse_privacy_loss(float(losses[i]))
        return x

    def _edge(self) -> float:
        q = self.sampling_prob
        return math.log(1 - q) if self.adjacency_type == AdjacencyType.REMOVE else -math.log(1 - q)

    def get_delta_for_epsilon(self, epsilon):
        """dp_accounting's hockey-stick divergence at each epsilon, its x cut-offs computed as one array."""
        is_scalar = np.ndim(epsilon) == 0
        epsilons = np.atleast_1d(np.asarray(epsilon, dtype=float))
        if self.sampling_prob == 1.0 or self.adjacency_type == AdjacencyType.REPLACE:
            return super().get_delta_for_epsilon(epsilon)
        deltas = np.zeros_like(epsilons)
        if self.adjacency_type == AdjacencyType.ADD:
            inverse = epsilons < -math.log1p(-self.sampling_prob)
        else:
            inverse = epsilons > math.log1p(-self.sampling_prob)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        x = self.inverse_losses(epsilons[inverse])
        deltas[inverse] = self.mu_upper_cdf(x) - np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x))
        deltas = np.clip(deltas, 0, 1)
        return float(deltas[0]) if is_scalar else deltas


def _privacy_buckets(loss: GridGaussianPrivacyLoss, disc: float) -> pld_pmf.PLDPmf:
    """The optimistic (rounded-down) privacy-buckets PMF of ``loss``, as dp_accounting builds it point by point."""
    tail = loss.privacy_loss_tail()
    lower_x, upper_x = tail.lower_x_truncation, tail.upper_x_truncation
    pmf: collections.defaultdict[int, float] = collections.defaultdict(float)
    infinity_mass = tail.tail_probability_mass_function.get(math.inf, 0)
    for value, mass in tail.tail_probability_mass_function.items():
        if value != math.inf:
            pmf[math.floor(value / disc)] += mass
    start = math.floor(loss.privacy_loss(lower_x) / disc)
    upper_loss = loss.privacy_loss(upper_x)
    # dp_accounting's loop visits k = start, start - 1, ...: x = inverse(disc * k) while disc * k > upper_loss,
    # then x = upper_x once; it stops at the first x >= upper_x
    stop = start
    while disc * stop > upper_loss:  # a handful of iterations: jump close, then step exactly as the loop does
        stop = min(stop - 1, math.floor(upper_loss / disc) + 1)
    ks = np.arange(start, stop, -1, dtype=np.int64)
    inner = loss.inverse_losses(disc * ks.astype(float)) if len(ks) else np.empty(0)
    past = np.flatnonzero(inner >= upper_x)
    if len(past):  # the loop ends at the first x at or beyond upper_x (never reached in exact arithmetic)
        xs = np.concatenate([[lower_x], inner[:past[0] + 1]])
        values = ks[:past[0] + 1]
    else:
        xs = np.concatenate([[lower_x], inner, [upper_x]])
        values = np.concatenate([ks, [stop]])
    cdf = np.asarray(loss.mu_upper_cdf(xs), dtype=float)
    masses = cdf[1:] - cdf[:-1]
    for k, mass in zip(values.tolist(), masses.tolist()):
        pmf[k] += mass
    return pld_pmf.create_pmf(dict(pmf), disc, infinity_mass, pessimistic_estimate=False)


def gaussian_pld(sigma: float, sample_rate: float, disc: float, pessimistic: bool):
    """``pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=disc)`` for
    add/remove neighbours: connect-the-dots when pessimistic, privacy buckets when not (dp_accounting's choices
    for the two estimates), with the grid evaluated as arrays."""

    def one(adjacency):
        loss = GridGaussianPrivacyLoss(sigma, pessimistic_estimate=pessimistic, sampling_prob=sample_rate,
                                       adjacency_type=adjacency)
        if pessimistic:
            return pld_lib._create_pld_pmf_from_monotone_privacy_loss(loss, True, disc, use_connect_dots=True)
        return _privacy_buckets(loss, disc)

    if sample_rate == 1.0:
        return pld_lib.PrivacyLossDistribution(one(AdjacencyType.REMOVE))
    return pld_lib.PrivacyLossDistribution(one(AdjacencyType.REMOVE), one(AdjacencyType.ADD))


def loss_range(sigma: float, sample_rate: float) -> float:
    """Total width of the privacy losses one step's add and remove PLDs span (between dp_accounting's tail
    truncations): a grid of discretisation d has about ``loss_range / d`` points, which sets a pass's cost."""
    width = 0.0
    for adjacency in (AdjacencyType.REMOVE, AdjacencyType.ADD):
        loss = GridGaussianPrivacyLoss(sigma, sampling_prob=sample_rate, adjacency_type=adjacency)
        tail = loss.privacy_loss_tail()
        width += loss.privacy_loss(tail.lower_x_truncation) - loss.privacy_loss(tail.upper_x_truncation)
    return width
