"""LMO-DP (Yang et al.): DP-Adam whose Gaussian noise is replaced by Laplace noise of random inverse scale Y.

Axes of the shared engine: unit = record, parameters = full / LoRA / head as configured, noise =
:class:`dpaudit.trainers.noise.LaplaceMixture` (noise once per logical batch on the clipped sum, Y drawn per
step or per coordinate as ``lmo_draw`` says). Which analysis calibrates the noise and writes the claim is
``lmo_accounting``:

* ``paper`` — the method's own claim (:mod:`dpaudit.accounting.lmo_paper`): Alg. 3's search over the
  noise shapes (``lmo_noise`` unset), or the given shape (``lmo_noise``, or a fixed scale with ``lmo_fixed``)
  scaled until the paper's scalar analysis meets ``target_epsilon``. The card's accountant is ``lmo_paper``;
  dpaudit's evaluator then re-accounts it independently (``lmo_vector``).
* ``vector`` — dpaudit's d-dimensional accountant calibrates the given shape (the controls at equal
  re-accounted epsilon); the card's accountant is ``lmo_vector``.

The card carries one ``subsampled_laplace_mixture`` event; ``extra.lmo`` records the noise, the draw, both
epsilons known at training time and the search. ``target_epsilon = inf`` is not an LMO run: use dp_adam's
non-private baseline.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from dpaudit import progress
from dpaudit.accounting import SubsampledLaplaceMixture, lmo_paper, lmo_vector
from dpaudit.accounting.lmo_noise import LmoNoise
from dpaudit.canaries.manifest import Manifest
from dpaudit.errors import DpauditError
from dpaudit.trainers import dp_adam, engine, planning
from dpaudit.trainers import fit as common
from dpaudit.trainers.noise import LaplaceMixture

FIXED_WIDTH = 1e-9  # a fixed scale is U(y0, y0 (1 + this)): a point mass to every accountant's precision


def shape_of(tc) -> LmoNoise | None:
    """The configured shape of Y (None: search it)."""
    if tc.lmo.fixed:
        return LmoNoise(0.0, 0.0, 1.0, u_low=1.0, u_high=1.0 + FIXED_WIDTH, form="sum")
    if tc.lmo.noise is not None:
        return LmoNoise.from_dict({**tc.lmo.noise, "form": tc.lmo.noise.get("form", tc.lmo.form)})
    return None


@dataclasses.dataclass(frozen=True)
class Calibration:
    noise: LmoNoise
    claim_epsilon: float
    claim_accountant: str
    detail: str
    search: dict | None


def preflight(cfg, variant, data, manifest: Manifest) -> None:
    """What this variant would refuse at its start, refused before the first variant of a run trains
    (``dpaudit.run.pipeline``): the record-level plan's step count, a non-private LMO variant, and a target the
    paper's analysis cannot meet at this delta (its conversion's floor; the search itself runs at the start)."""
    tc, eng = variant.trainer, common.engine_config(variant)
    n = len(data.train) + len(manifest.training_texts())
    _check_private(eng)
    if n > 0:
        plan = engine.record_plan(n, eng)
        if tc.lmo.accounting == "paper":
            lmo_paper.check_target(eng.target_epsilon, plan.delta)


def _check_private(eng) -> None:
    if not eng.private:
        raise DpauditError("method = 'lmo_dp' needs a finite target_epsilon; the non-private baseline is "
                           "method = 'dp_adam' with target_epsilon = inf")


def calibrate(tc, eng, plan: engine.RecordPlan) -> Calibration:
    """The noise for this run and its claim, before any training (errors here cost nothing)."""
    _check_private(eng)
    C, q, T, delta = eng.clipping_norm, plan.sample_rate, plan.steps, plan.delta
    shape = shape_of(tc)
    if tc.lmo.accounting == "paper":
        if shape is None:
            res = lmo_paper.search(eng.target_epsilon, delta, q, T, C, tc.lmo.objective, form=tc.lmo.form,
                                   progress=lambda xs: progress.bar(xs, desc="LMO search"))
            return Calibration(res.noise, res.claim.epsilon, "lmo_paper", res.claim.detail, res.to_dict())
        c = lmo_paper.scale_to(shape, lambda nz: lmo_paper.claim(nz, C, q, T, delta).epsilon, eng.target_epsilon)
        nz = lmo_paper.scaled(shape, c)
        cl = lmo_paper.claim(nz, C, q, T, delta)
        return Calibration(nz, cl.epsilon, "lmo_paper", cl.detail, None)
    def vec(nz):
        return lmo_vector.epsilon_for(nz, C, tc.lmo.draw, q, T, delta)[0]

    c = lmo_paper.scale_to(shape, vec, eng.target_epsilon, rel_tol=0.01)
    nz = lmo_paper.scaled(shape, c)
    eps, detail = lmo_vector.epsilon_for(nz, C, tc.lmo.draw, q, T, delta)
    return Calibration(nz, eps, "lmo_vector", detail, None)


def fit(cfg, variant, data, manifest: Manifest, out: Path,
        snapshots=None) -> Path:
    """Train one LMO-DP variant of a run config and write its checkpoint directory."""
    tc, eng = variant.trainer, common.engine_config(variant)
    model, tok = common.base_model(cfg, eng, manifest)
    model, base = common.choose_trainable(model, tc, eng.grad_sample_mode)
    records = dp_adam.build_records(data, manifest, tok, cfg.task.objective, cfg.model.max_len, eng.seed, cfg.task.name)
    plan = engine.record_plan(len(records), eng)
    cal = calibrate(tc, eng, plan)
    dim = sum(p.numel() for p in model.parameters() if p.requires_grad)
    noise = LaplaceMixture(cal.noise, tc.lmo.draw)

    def event(q, steps):
        return SubsampledLaplaceMixture(sample_rate=q, steps=steps, noise=cal.noise.to_dict(),
                                        clipping_norm=eng.clipping_norm, draw=tc.lmo.draw, dimension=dim)

    model, res = engine.train(model, records, eng, tok.pad_token_id, cfg.model.max_len, noise=noise, event=event,
                              snapshots=snapshots)
    paper = lmo_paper.claim(cal.noise, eng.clipping_norm, res.sample_rate, res.steps, res.delta)
    extra = {"lmo": {"noise": cal.noise.to_dict(), "draw": tc.lmo.draw, "accounting": tc.lmo.accounting,
                     "fixed_scale": tc.lmo.fixed, "dimension": dim, "claim_detail": cal.detail,
                     "paper_epsilon": paper.epsilon, "paper_order": paper.order, "paper_floor": paper.floor,
                     "paper_near_floor": paper.near_floor, "mean_abs_noise": cal.noise.mean_abs_noise(),
                     "noise_std": math.sqrt(cal.noise.noise_variance()), "search": cal.search}}
    card = common.privacy_card(eng, epsilon=cal.claim_epsilon, delta=res.delta, accountant=cal.claim_accountant,
                               method="lmo_dp", trainable=tc.trainable, events=res.events, dataset_size=len(records),
                               expected_batch_size=plan.batch, extra=extra)
    run = common.run_record(cfg, variant, eng, res, data,
                            {**common.trainable_fields(tc), **{f"lmo_{k}": v for k, v in dataclasses.asdict(tc.lmo).items()},
                             "lmo_noise_used": cal.noise.to_dict()},
                            common.data_counts(data, records))
    return common.write(out, model, tok, card, manifest, run, res, tc, base)


def plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of an LMO-DP variant: the record-level sampling plan and the Laplace-mixture noise its
    search calibrates (:func:`calibrate`), with the ε its card will claim."""
    tc, eng = variant.trainer, variant.trainer.engine
    p = engine.record_plan(n_records, eng)
    c = calibrate(tc, eng, p)  # a non-private LMO variant refused, as the run refuses it
    return planning.MechanismPlan("record", n_records, p.batch, p.sample_rate, p.steps, p.delta,
                                  f"LMO Laplace mixture ({c.claim_accountant})", c.claim_epsilon)
