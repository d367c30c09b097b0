"""How the one-run audit's free choices (which attack, how many guesses) are made validly, over several attacks,
through the public score auditor (dpaudit/audit/auditor.py).

* ``bonferroni``: the guess counts are the ones fixed in the canary manifest before training; every
  attack is audited at confidence 1 - alpha / n_attacks, so the best bound over attacks still holds
  at 1 - alpha family-wise.
* ``held_out``: the canaries are split in two halves by a seeded coin (before any score is seen); the
  attack and the guess fractions are chosen on the tuning half, and only that one configuration is
  audited, at full confidence, on the other half (m/2 canaries).

Pure NumPy/SciPy.
"""

from __future__ import annotations

import numpy as np

from dpaudit.audit import one_run
from dpaudit.audit.auditor import GRID, AuditResult, Fixed, ScoreAuditor
from dpaudit.options import RULES  # noqa: F401  (the rules this module implements)


def bonferroni(scores: dict[str, np.ndarray], signs, k_pos: int, k_neg: int, delta: float, confidence: float,
               group_size: int = 1, n_tests: int | None = None) -> dict[str, one_run.OneRunResult]:
    n = n_tests or len(scores)
    conf = 1 - (1 - confidence) / n
    out = {}
    for name, sc in scores.items():
        r = ScoreAuditor(sc, signs, fair_coins_checked=True).audit(Fixed(k_pos, k_neg), delta=delta, confidence=conf, group_size=group_size)
        out[name] = _result(r, f"bonferroni over {n} tests; guesses fixed in the manifest")
    return out


def held_out(scores: dict[str, np.ndarray], signs, delta: float, confidence: float, seed: int = 0,
             group_size: int = 1, grid=GRID) -> tuple[str, one_run.OneRunResult]:
    """The public auditor's HeldOut (dpaudit/audit/auditor.py) over several attacks: the attack too is chosen on
    the tuning half."""
    auditors = {name: ScoreAuditor(sc, signs, fair_coins_checked=True) for name, sc in scores.items()}
    tune_idx, audit_idx = next(iter(auditors.values())).split(seed)  # the same coin for every attack
    best = None
    for name, a in auditors.items():
        found = a.tune(tune_idx, grid, delta, confidence)
        if found is not None and (best is None or found[0] > best[0]):
            best = (found[0], name, found[1], found[2])
    if best is None:
        raise ValueError("no attack gave a tuned threshold on the tuning canaries")
    _, name, fp, fn = best
    kp, kn = int(fp * audit_idx.size), int(fn * audit_idx.size)
    r = auditors[name]._fixed(kp, kn, delta, confidence, "", idx=audit_idx, group_size=group_size)
    return name, _result(r, f"held out: attack '{name}' and guesses ({fp:.0%}, {fn:.0%}) chosen on "
                            f"{tune_idx.size} tuning canaries, audited on the other {audit_idx.size}")


def _result(r: AuditResult, rule: str) -> one_run.OneRunResult:
    """The auditor's result as the evaluation's row input (the Steinke et al. numbers; families.row adds f-DP)."""
    return one_run.OneRunResult(m=r.m, k_pos=r.k_pos, k_neg=r.k_neg, r=r.r, v=r.v, delta=r.delta,
                                confidence=r.confidence, epsilon_lb=r.steinke_epsilon_lb, ceiling=r.steinke_ceiling,
                                group_size=r.group_size, threshold_rule=rule)
