"""How the one-run audit's free choices (which attack, how many guesses) are made validly.

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
from dpaudit.options import RULES  # noqa: F401  (the rules this module implements)

GRID = (0.05, 0.1, 0.2, 0.3, 0.5)  # fractions of the canaries guessed on each side


def bonferroni(scores: dict[str, np.ndarray], signs, k_pos: int, k_neg: int, delta: float, confidence: float,
               group_size: int = 1, n_tests: int | None = None) -> dict[str, one_run.OneRunResult]:
    n = n_tests or len(scores)
    conf = 1 - (1 - confidence) / n
    out = {}
    for name, sc in scores.items():
        r = one_run.audit(sc, signs, k_pos, k_neg, delta=delta, confidence=conf, group_size=group_size)
        out[name] = _with_rule(r, f"bonferroni over {n} tests; guesses fixed in the manifest")
    return out


def held_out(scores: dict[str, np.ndarray], signs, delta: float, confidence: float, seed: int = 0,
             group_size: int = 1, grid=GRID) -> tuple[str, one_run.OneRunResult]:
    signs = np.asarray(signs)
    m = signs.size
    tune = np.random.default_rng([seed, 4242]).permutation(m)
    tune_idx, audit_idx = np.sort(tune[: m // 2]), np.sort(tune[m // 2:])
    best = None
    for name, sc in scores.items():
        sc = np.asarray(sc)
        for fp in grid:
            for fn in grid:
                kp, kn = int(fp * tune_idx.size), int(fn * tune_idx.size)
                if kp + kn == 0 or kp + kn > tune_idx.size:
                    continue
                r = one_run.audit(sc[tune_idx], signs[tune_idx], kp, kn, delta=delta, confidence=confidence)
                key = (r.epsilon_lb, -(fp + fn))
                if best is None or key > best[0]:
                    best = (key, name, fp, fn)
    _, name, fp, fn = best
    sc = np.asarray(scores[name])
    kp, kn = int(fp * audit_idx.size), int(fn * audit_idx.size)
    r = one_run.audit(sc[audit_idx], signs[audit_idx], kp, kn, delta=delta, confidence=confidence,
                      group_size=group_size)
    return name, _with_rule(r, f"held out: attack '{name}' and guesses ({fp:.0%}, {fn:.0%}) chosen on "
                               f"{tune_idx.size} tuning canaries, audited on the other {audit_idx.size}")


def _with_rule(r: one_run.OneRunResult, rule: str) -> one_run.OneRunResult:
    from dataclasses import replace

    return replace(r, threshold_rule=rule)
