"""The coverage check's "not tested" finding names the cause that holds: a functional probe (no model to watch, a
limit of its interface) is not told to pass attach_probe(..., model=...), which does not apply to it."""

import numpy as np

from dpaudit.audit import mechanism_checks as mc


def _readings(mode: str) -> mc.Readings:
    T = 3
    return mc.Readings(probe={"mode": mode}, records=np.full(T, 8), sum_ratio=np.ones(T),
                       clip_projections=np.zeros((T, 0)), clip_sampled=np.zeros((T, 0), bool), heldout_ss=None,
                       heldout_m=0)


def test_functional_and_optimizer_probes_get_their_own_reason():
    functional = mc.coverage(_readings("functional"))
    assert functional.status == "not tested"
    assert "functional probe" in functional.finding and "attach_probe" not in functional.finding
    hooks = mc.coverage(_readings("hooks"))
    assert hooks.status == "not tested" and "attach_probe(optimizer, model=model" in hooks.finding
