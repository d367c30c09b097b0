"""What every probe adapter shares (docs/probe.md "One probe"): the per-step bookkeeping, the online checks, the
record written beside the model, and resuming.

An adapter (:class:`dpaudit.probe.probe.Probe` on an Opacus optimizer, :class:`dpaudit.probe.functional.
FunctionalProbe` on any loop) only decides *where* it reads: the clipped sum before the noise (records counted,
canaries added, noise meter's first reading) and the applied update after it. The rest is here, so the same checks
(dpaudit/audit/mechanism_checks.py) read the same record whichever adapter wrote it.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import numpy as np
import torch

from dpaudit.errors import DpauditError

SUM_TOLERANCE = 1e-4  # relative float slack of the clipped-sum bound
CLIP_EXACT_TOLERANCE = 1e-3  # float slack of a clip canary read before the noise (Opacus' 1e-6 in C / (norm + 1e-6))
CLIP_MULTIPLE = 4.0  # a clip canary's norm before clipping, in units of C


class ProbeCore:
    """The state and record of a probe. Adapters set, before their first step: ``private``, ``coordinates``,
    ``canaries`` (started), ``sample_rate``, ``clipping_norm``, ``noise_multiplier``, ``divisor``, ``world``,
    ``ghost``, ``n_clip``, ``meter``, ``coverage``, ``online``, ``tensor_names`` and ``optimizer_name``; then call
    :meth:`_init_readings`."""

    def _init_readings(self, run_id: str | None = None) -> None:
        # this run's identity (docs/security.md "Evidence is bound to its origin"): written into the record and, by
        # :meth:`bind` (dpaudit's trainers, ``card_from_opacus``), into the privacy card, which must then name it;
        # random unless the caller derives it (dpaudit's seeded runs: trainers/engine.run_identity)
        self.run_id = run_id or secrets.token_hex(16)
        self.records = []  # per logical step: records (or users) in the batch, over all ranks
        self.sum_ratio = []  # per logical step: ||clipped sum|| / (b C), this rank's worst
        self.clip_proj, self.clip_sampled = [], []
        self.clip_exact = []  # per step: largest |clip canary out of the optimizer's own clipping / C - 1|, hooks
        self.saved_to = None

    # -- one logical step ----------------------------------------------------------------------------------------

    def _noise_read(self, ss, units: float = 1.0) -> None:
        """The meter's reading of this step's noise (per-tensor sums of squares, in the update's units times
        ``units``), to the online noise check in units of C^2."""
        self.online.noise_step(None if ss is None else ss * units ** 2 / self.clipping_norm ** 2, self.meter.n)

    def _close_step(self, rows: int, ratio: float, update) -> None:
        """After a real step: this step's records and clipped-sum reading, the update's canary projections
        (``update(k)``: the noisy update applied to canary tensor k), then the step's online checks."""
        self.records.append(int(rows))
        self.sum_ratio.append(float(ratio))
        self.canaries.score(update, self.divisor)

    def _online_after_step(self) -> None:
        """After a logical step: the deterministic clipped-sum bound, coverage and the batch-size e-process; then
        an alarm raised under ``on_fail="raise"``."""
        step = len(self.records)
        if self.sum_ratio[-1] > 1 + SUM_TOLERANCE:
            self.online.deterministic("clipping", f"the clipped sum of step {step} had norm {self.sum_ratio[-1]:.3g} b C, "
                                      "above b C: per-sample clipping is not enforced")
        if self.coverage is not None:
            for name in self.coverage.after_step(step):
                self.online.deterministic("coverage", f"{name}, outside the DP optimizer, changed during training: it "
                                          "is trained (or updated from the data) without DP")
        self.online.sampling_step(self.records[-1])
        self.online.raise_pending()

    def status(self) -> dict:
        """The online checks now (anytime-valid: read it as often as you like; docs/probe.md "Fail fast"):
        {check: {"status": "ok" | "fail" | "not checked online", ...}}."""
        if not self.private:
            return {}
        return self.online.status(self.coverage is not None)

    @property
    def steps(self) -> int:
        """Noisy (logical) steps seen so far."""
        return len(self.records) if self.private else self.canaries.n_steps

    # -- what the probe saw ----------------------------------------------------------------------------------

    def readings(self) -> dict:
        """The probe's record beside the canaries' (``probe`` of gradient_canaries.json); arrays in ``arrays``."""
        if not self.private:
            return {"schema_version": 1, "run_id": self.run_id, "mode": self.mode, "coordinates": self.coordinates,
                    "steps": self.canaries.n_steps}
        T = len(self.records)
        clip = np.stack(self.clip_proj) if self.clip_proj else np.zeros((T, 0), np.float32)
        sampled = np.stack(self.clip_sampled) if self.clip_sampled else np.zeros((T, 0), bool)
        return {
            "schema_version": 1,
            "run_id": self.run_id,
            "mode": self.mode,
            "coordinates": self.coordinates,
            "optimizer": self.optimizer_name,
            "world_size": self.world,
            "steps": len(self.records),
            "sample_rate": self.sample_rate,
            "sampler": getattr(self, "sampler", "poisson"),
            "clipping_norm": self.clipping_norm,
            "noise_multiplier": self.noise_multiplier,
            "divisor": self.divisor,
            "divisor_from": getattr(self, "divisor_from", "given"),
            "dataset_size": getattr(self, "dataset_size", None),  # N the loop samples from, when the caller said
            "clip_canaries": self.n_clip,
            "clip_multiple": CLIP_MULTIPLE if self.n_clip and not self.ghost else 1.0,
            "clip_entry": ("before clipping (per-sample rows)" if not self.ghost else "after clipping (ghost mode)")
            if self.n_clip else None,
            "sum_tolerance": SUM_TOLERANCE,
            "clip_exact_tolerance": CLIP_EXACT_TOLERANCE,
            "noise_tensors": self.tensor_names,
            "coverage": self.coverage.record() if self.coverage is not None else {"model_given": False},
            "online": self.online.record(),
            **({"weights": w} if (w := self._weights()) is not None else {}),
            "arrays": {**(self.meter.arrays(self.clipping_norm / self._meter_units)
                          if self.meter is not None else {}),
                       "clip_exact": np.asarray(self.clip_exact if self.n_clip else [], dtype=np.float64),
                       **({"heldout_ss": np.asarray(self.canaries.online["heldout_ss"], dtype=np.float64)}
                          if self.canaries.online is not None else {}),
                       "records_per_step": np.asarray(self.records, dtype=np.int64),
                       "sum_ratio": np.asarray(self.sum_ratio, dtype=np.float64),
                       "clip_projections": clip, "clip_sampled": sampled},
        }

    def _weights(self) -> dict | None:
        """The fingerprint of the weights this probe's optimizer trained (dpaudit/probe/fingerprint.py), or why there
        is none; None where the adapter has nothing to say of them."""
        return None

    def _fingerprint(self, named: list) -> dict:
        """The fingerprint of ``named`` ((name, torch tensor) pairs): a few values of each, read on its device."""
        from dpaudit.probe import fingerprint

        def reader(p):
            def read(idx):
                with torch.no_grad():
                    return p.detach().reshape(-1)[torch.as_tensor(idx, device=p.device)].to(torch.float64).cpu().numpy()
            return read

        return fingerprint.take([(n, tuple(p.shape), str(p.dtype).removeprefix("torch."), reader(p)) for n, p in named],
                                self.run_id)

    _meter_units = 1.0  # the meter reads the noise in the sum's units (Opacus); the functional probe's in the update's

    def to_dict(self) -> dict:
        """The canary record (trainers/fit.py writes it as gradient_canaries*.json) with the probe's readings."""
        return {**self.canaries.to_dict(), "probe": self.readings()}

    def save(self, folder: str | Path, stem: str = "gradient_canaries") -> list[Path]:
        """Write the record beside a saved model (``folder``): ``<stem>.json``, its per-step projections and the
        probe's arrays. Call it once, after training, on rank 0 only under DDP."""
        import json

        from dpaudit.folders import atomic_folder
        from dpaudit.io import jsonable
        from dpaudit.probe.record import files, non_finite

        folder = Path(folder)
        if not folder.is_dir():
            raise DpauditError(f"{folder} is not a folder; save the model there first, then the probe beside it")
        if not re.fullmatch(r"gradient_canaries(_[a-z0-9_]{1,40})?", str(stem)):
            raise DpauditError(f"stem {stem!r}: a record is saved as gradient_canaries or gradient_canaries_<kind>, "
                               "<kind> of 1-40 characters in a-z, 0-9 and _ (dpaudit evaluate reads those names)")
        if not self.canaries.n_steps:
            raise DpauditError("the probe saw no optimizer step; attach it before training and save after")
        if self.coverage is not None:
            self.coverage.final(len(self.records))
        body = self.to_dict()
        bad = non_finite(body)
        if bad is not None:  # nothing non-finite is ever saved: evaluate would refuse the record later
            raise DpauditError(f"the probe's record holds NaN or infinity at {bad}: the run's updates (or the values "
                               "the probe was given) were not finite, so the run diverged or the loop passed a "
                               "broken value; nothing was saved: fix the divergence (a lower learning rate, a "
                               "finite loss; fp16 autocast with a GradScaler diverges under Opacus, bf16 does not: "
                               "docs/pitfalls.md item 9) and train again")
        written = files(body, stem)
        with atomic_folder(folder) as tmp:
            for name, body in written.items():
                if isinstance(body, bytes):
                    (tmp / name).write_bytes(body)
                else:
                    (tmp / name).write_text(json.dumps(jsonable(body)) + "\n")
        self.saved_to = folder
        return [folder / name for name in written]

    def bind(self, card):
        """``card`` (a :class:`dpaudit.claim.card.PrivacyCard`) naming this probe's run in ``extra.probe_runs``:
        ``dpaudit evaluate`` and ``check --checkpoint`` then refuse a white-box record beside it that another run
        wrote. Call it on the card of the run this probe watched, before saving the card."""
        from dpaudit.probe import record

        return record.bind(card, [self.run_id])

    # -- resuming (trainers/snapshot.py) ------------------------------------------------------------------------

    def snapshot(self, prefix: str, tensors: dict) -> dict:
        state = {**self.canaries.snapshot(prefix, tensors), "run_id": self.run_id}
        tensors[f"{prefix}/records"] = torch.tensor(self.records, dtype=torch.int64)
        tensors[f"{prefix}/sum_ratio"] = torch.tensor(self.sum_ratio, dtype=torch.float64)
        if self.n_clip:
            r = self.readings()["arrays"]
            tensors[f"{prefix}/clip_projections"] = torch.from_numpy(r["clip_projections"].copy())
            tensors[f"{prefix}/clip_sampled"] = torch.from_numpy(r["clip_sampled"].copy())
            state = {**state, "clip_rng": self._clip_rng.bit_generator.state, "clip_exact": list(self.clip_exact)}
        if self.meter is not None:
            state = {**state, "noise_meter": self.meter.snapshot()}
            if self.meter._previous is not None:  # the last step's noise: the next step's independence term needs it
                tensors[f"{prefix}/noise_previous"] = self.meter._previous[0].detach().cpu()
                state["noise_meter"]["previous_have"] = self.meter._previous[1].tolist()
        return state

    def restore(self, prefix: str, state: dict, tensors: dict) -> None:
        self.canaries.restore(prefix, state, tensors)
        self.run_id = state.get("run_id", self.run_id)  # a resumed run is the same run
        self.records = [int(x) for x in tensors[f"{prefix}/records"].tolist()]
        self.sum_ratio = [float(x) for x in tensors[f"{prefix}/sum_ratio"].tolist()]
        if self.n_clip:
            self._clip_rng.bit_generator.state = state["clip_rng"]
            self.clip_proj = list(tensors[f"{prefix}/clip_projections"].numpy().copy())
            self.clip_sampled = list(tensors[f"{prefix}/clip_sampled"].numpy().copy())
            self.clip_exact = list(state.get("clip_exact", [float("nan")] * len(self.records)))
        if self.meter is not None and state.get("noise_meter"):
            self.meter.restore(state["noise_meter"])
            if f"{prefix}/noise_previous" in tensors and "previous_have" in state["noise_meter"]:
                dev = self.meter.params[0].device
                self.meter._previous = (tensors[f"{prefix}/noise_previous"].to(dev),
                                        np.asarray(state["noise_meter"]["previous_have"], dtype=np.int64))
        if self.online is not None:
            self.online.step = len(self.records)
