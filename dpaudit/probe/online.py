"""The probe's checks while training runs (docs/probe.md, "Fail fast"): anytime-valid, so ``probe.status()`` may
be read after every step at the stated false-alarm rate.

Each online check is an e-process (dpaudit/audit/sequential.py) or a deterministic rule, and raises an alarm at
most once, at the step it first fails:

* ``noise``     the per-step noise of all tensors together (alpha / 2) and of each tensor alone (alpha / 2P)
                against the sigma the probe was given (the optimizer's by default, which ``card_from_opacus``
                writes into the card);
* ``sampling``  the records per logical batch against Binomial(N, q), when the probe knows N (``dataset_size``);
* ``clipping``  deterministic: a clipped sum of norm above b C, or a clip canary that came out of the optimizer's
                own clipping at other than C (hooks mode, read before the noise);
* ``coverage``  deterministic (with the model): a parameter or buffer outside the DP optimizer changed, or one
                of its parameters moved between two of its steps.

Family-wise: the statistical ones share ``alpha`` (default 0.1%) equally; the deterministic ones never fire on an
honest loop. ``on_fail="warn"`` (default) warns once per check, ``"raise"`` raises :class:`ProbeFailure` from the
optimizer's step (the Hugging Face callback stops the Trainer instead), ``None`` only records.
"""

from __future__ import annotations

import warnings

import numpy as np

from dpaudit.audit import sequential
from dpaudit.audit.mechanism_checks import fixed_batch
from dpaudit.errors import DpauditError
from dpaudit.probe.settings import ON_FAIL, SAMPLERS

ALPHA = 0.001
ONLINE_CHECKS = ("noise", "sampling", "clipping", "coverage")


class ProbeFailure(DpauditError):
    """A mechanism check failed while training ran (``attach_probe(..., on_fail="raise")``)."""


class ProbeWarning(UserWarning):
    """A mechanism check failed while training ran (``on_fail="warn"``)."""


def check_sampler(sampler: str) -> None:
    if sampler not in SAMPLERS:
        raise DpauditError(f"sampler must be 'poisson' (Opacus' default) or 'shuffle' (fixed-size batches, "
                           f"poisson_sampling=False), as the card states; got {sampler!r}")


class Online:
    def __init__(self, *, noise_multiplier: float | None, tensors: int, sample_rate: float,
                 dataset_size: int | None, on_fail: str | None, alpha: float = ALPHA, sampler: str = "poisson"):
        if on_fail not in ON_FAIL:
            raise DpauditError(f"on_fail must be 'warn', 'raise' or None, got {on_fail!r}")
        check_sampler(sampler)
        self.sampler = sampler
        self.on_fail, self.alpha = on_fail, float(alpha)
        self.sigma = float(noise_multiplier) if noise_multiplier and noise_multiplier > 0 else None
        self.noise = sequential.NoiseScale(1 + tensors) if self.sigma else None
        self.tensors = tensors
        self.batches = (sequential.BatchSizes(dataset_size, sample_rate)
                        if dataset_size and 0 < sample_rate < 1 and sampler == "poisson" else None)
        # fixed-size batches (sampling without replacement): none above the card's B = round(q N), deterministic
        self.fixed_batch = fixed_batch(sample_rate, dataset_size) if dataset_size and sampler == "shuffle" else None
        self.statistical = [c for c, on in (("noise", self.noise), ("sampling", self.batches)) if on is not None]
        self.alarms: dict[str, dict] = {}
        self.step = 0

    # -- per step ---------------------------------------------------------------------------------------------

    def noise_step(self, ss_tensor: np.ndarray | None, n_tensor: np.ndarray) -> None:
        """``ss_tensor``: this step's noise sums of squares per tensor, in units of C^2."""
        if self.noise is None or ss_tensor is None or "noise" in self.alarms:
            return
        s2 = self.sigma ** 2
        chi2 = np.r_[ss_tensor.sum(), ss_tensor] / s2
        n = np.r_[n_tensor.sum(), n_tensor]
        self.noise.update(chi2, n)
        log_e = self.noise.log_e()
        share = self.alpha / len(self.statistical)
        if log_e[0] >= np.log(2 / share):
            ratio = float(np.sqrt(ss_tensor.sum() / max(n_tensor.sum(), 1)) / self.sigma)
            self.fail("noise", f"the noise added at step {self.step} and before is below the card's sigma {self.sigma:.4g} "
                      f"(this step: {ratio:.3g} sigma; e-value {np.exp(min(log_e[0], 700)):.3g} >= {2 / share:.3g})")
        elif self.tensors and np.max(log_e[1:]) >= np.log(2 * self.tensors / share):
            k = int(np.argmax(log_e[1:]))
            self.fail("noise", f"tensor {k} of the optimizer carries less noise than sigma {self.sigma:.4g} "
                      f"(e-value >= {2 * self.tensors / share:.3g} by step {self.step})", tensor=k)

    def sampling_step(self, records: int) -> None:
        if self.fixed_batch is not None and int(records) > self.fixed_batch:
            self.deterministic("sampling", f"step {self.step} held {int(records)} records, more than the fixed batch "
                               f"size B = {self.fixed_batch} the card's sampling without replacement allows")
        if self.batches is None or "sampling" in self.alarms:
            return
        self.batches.update(int(records))
        share = self.alpha / len(self.statistical)
        if self.batches.log_e() >= np.log(1 / share):
            b = self.batches
            what = ("batch sizes repeat as fixed-size batches do, not as Poisson sampling's (a card that states "
                    "fixed-size batches, poisson_sampling=False: attach the probe with sampler='shuffle')"
                    if b.log_e_repeat() >= np.max(b.log_tilt) else
                    f"the records per batch depart from Binomial(N = {b.N}, q = {b.q:.6g})")
            self.fail("sampling", f"by step {self.step}: {what} (anytime-valid e-value >= {1 / share:.3g})")

    def deterministic(self, check: str, finding: str) -> None:
        if check not in self.alarms:
            self.fail(check, finding)

    def fail(self, check: str, finding: str, **extra) -> None:
        self.alarms[check] = {"step": self.step, "finding": finding, **extra}
        msg = f"dpaudit probe: mechanism check '{check}' failed at step {self.step}: {finding}"
        if self.on_fail == "raise":
            self._pending = msg  # raised once the optimizer's step is complete (raise_pending), not mid-step
        elif self.on_fail == "warn":
            warnings.warn(msg, ProbeWarning, stacklevel=4)

    def raise_pending(self) -> None:
        msg, self._pending = getattr(self, "_pending", None), None
        if msg:
            raise ProbeFailure(msg)

    # -- reading -------------------------------------------------------------------------------------------------

    def status(self, coverage_on: bool) -> dict:
        out = {}
        share = self.alpha / max(len(self.statistical), 1)
        for check in ONLINE_CHECKS:
            if check in self.alarms:
                out[check] = {"status": "fail", **self.alarms[check]}
            elif check == "noise" and self.noise is None:
                out[check] = {"status": "not checked online", "why": "no sigma > 0 to test against"}
            elif check == "sampling" and self.batches is None and self.fixed_batch is not None:
                out[check] = {"status": "ok", "steps": self.step, "rule": f"no batch above B = {self.fixed_batch}"}
            elif check == "sampling" and self.batches is None:
                out[check] = {"status": "not checked online",
                              "why": "attach the probe with dataset_size=N to test the batch sizes while training"}
            elif check == "coverage" and not coverage_on:
                out[check] = {"status": "not checked online", "why": "attach the probe with model=... to check it"}
            else:
                row = {"status": "ok", "steps": self.step}
                if check == "noise":
                    row["log_e"] = float(self.noise.log_e()[0])
                    row["threshold_log_e"] = float(np.log(2 / share))
                elif check == "sampling":
                    row["log_e"] = float(self.batches.log_e())
                    row["threshold_log_e"] = float(np.log(1 / share))
                out[check] = row
        return out

    def record(self) -> dict:
        return {"alpha": self.alpha, "statistical": self.statistical, "sigma": self.sigma,
                "alarms": {k: dict(v) for k, v in self.alarms.items()}, "steps": self.step}
