"""Choose the threshold strategy before the scores exist, from what the auditor is told about the mechanism.

Which of the score auditor's valid strategies (dpaudit/audit/auditor.py) gives the largest bound depends on the
attack and on m: fixed guesses at m/4 + m/4 win when the attack is strong (randomised response), a held-out split
or a search when it is weak and m is large (reports/score_auditor). Told the mechanism (a
:mod:`dpaudit.audit.simulated` spec, e.g. ``auc:0.6`` for an attack expected to reach AUC 0.6) and m, :func:`choose`
simulates each strategy ``sims`` times on seeds of its own and picks the largest median bound; among equal medians
the simplest (fixed, then held-out, search, median). The choice reads no real score, so the strategy is fixed before
the audit, as every strategy's validity needs; its power is checked against the best strategy on other seeds (200
per mechanism at m = 1,000, 30 at 10,000) in reports/score_auditor.

Pure NumPy/SciPy.
"""

from __future__ import annotations

import numpy as np

from dpaudit.audit.auditor import Fixed, HeldOut, MedianOfSplits, ScoreAuditor, Search
from dpaudit.audit.simulated import Simulated

# the CLI names (`dpaudit audit scores --strategy NAME`), simplest first: ties go to the earlier one
CANDIDATES = {"fixed": lambda m: Fixed(m // 4, m // 4), "held-out": lambda m: HeldOut(),
              "search": lambda m: Search(), "median": lambda m: MedianOfSplits()}
PLAN_STREAM = 31337  # the plan's simulations use seeds [seed, PLAN_STREAM, m, i]: none of a power table's


def bounds(mech: Simulated, m: int, strategy, delta: float, confidence: float, seeds, done=None) -> list[float]:
    """The strategy's epsilon lower bound on one simulated audit per seed (``seeds``: sequences for NumPy's rng);
    ``done()`` is called after each."""
    out = []
    for sd in seeds:
        scores, signs = mech.draw(np.random.default_rng(sd), m)
        out.append(ScoreAuditor(scores, signs, fair_coins_checked=True).audit(strategy, delta=delta, confidence=confidence).epsilon_lb)
        if done is not None:
            done()
    return out


def choose(mech: Simulated, m: int, delta: float = 1e-5, confidence: float = 0.95, sims: int = 40,
           seed: int = 0, progress=None, done=None) -> dict:
    """Every candidate strategy's median bound over ``sims`` simulated audits of ``mech`` with m canaries, and the
    choice. ``progress(name)`` is called before each strategy's simulations, ``done()`` after each simulation."""
    if m < 8:
        raise ValueError(f"a held-out split needs at least 8 canaries, got m = {m}")
    if sims < 1:
        raise ValueError(f"sims must be >= 1, got {sims}")
    mech.check_size(m)
    seeds = [[seed, PLAN_STREAM, m, i] for i in range(sims)]
    medians = {}
    for name, make in CANDIDATES.items():
        if progress is not None:
            progress(name)
        medians[name] = float(np.median(bounds(mech, m, make(m), delta, confidence, seeds, done)))
    top = max(medians.values())
    choice = next(n for n in CANDIDATES if medians[n] >= top - 1e-12)
    return {"mechanism": mech.spec, "m": int(m), "delta": float(delta),
            "confidence": float(confidence), "sims": int(sims), "seed": int(seed), "medians": medians,
            "choice": choice}
