"""``dpaudit audit checkpoints``: a many-run audit over independently trained checkpoints.

Each checkpoint was trained with or without one target canary (its manifest says which). Every
checkpoint's model scores the target with a black-box attack. The checkpoints are split in two by a
seeded coin before any score is seen: the decision threshold is chosen on the tuning half (the one
maximising the Clopper-Pearson bound there), then applied once to the audit half, whose confusion
counts give the reported Clopper-Pearson lower bound and the Gaussian-DP estimate
(:mod:`dpaudit.audit.many_run`). Each checkpoint must come from a separate training run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit import checkpoint
from dpaudit.audit import many_run
from dpaudit.errors import DpauditError


def score_checkpoints(paths: list[Path], canary_id: str, attack: str = "loss") -> tuple[np.ndarray, np.ndarray, str]:
    from dpaudit.attacks import BLACK_BOX
    from dpaudit.attacks.scoring import token_features

    if attack not in BLACK_BOX or attack == "reference":
        raise DpauditError(f"attack {attack!r} cannot score checkpoints here; use one of "
                           f"{', '.join(a for a in BLACK_BOX if a != 'reference')}")
    scores, member, text = [], [], None
    seen: dict = {}
    for p in paths:
        ck = checkpoint.load(p)
        same = seen.get(Path(p).resolve()) or seen.get(ck.hash())
        if same is not None:  # one training run counted twice would be two "independent" runs: an invalid bound
            raise DpauditError(f"{p} is the same checkpoint as {same} (the same folder or the same weights, card and "
                               "canaries); a many-run audit needs each checkpoint from its own training run: pass "
                               "each once")
        seen[Path(p).resolve()] = seen[ck.hash()] = p
        found = [c for c in ck.manifest.canaries if c.id == canary_id]
        if not found:
            ids = [c.id for c in ck.manifest.canaries]
            raise DpauditError(f"{p}: canary {canary_id!r} is not in its manifest (its ids: {', '.join(ids[:3])}, ..., "
                               f"{ids[-1]}); pass one of them with --canary")
        c = found[0]
        if text is None:
            text = c.text
        elif c.text != text:
            raise DpauditError(f"{p}: canary {canary_id} has different text than in the other checkpoints; "
                               "a many-run audit needs the same target record in every run")
        model, tok = ck.load_model()
        feats = token_features(model, tok, [c.text], moments=BLACK_BOX[attack].NEEDS_MOMENTS)
        scores.append(float(BLACK_BOX[attack].from_features(feats, [c.text])[0]))
        member.append(c.inserted)
    return np.array(scores), np.array(member, dtype=bool), text


def _counts(scores, member, thr):
    pred = scores >= thr
    return (int((pred & member).sum()), int((~pred & member).sum()), int((pred & ~member).sum()),
            int((~pred & ~member).sum()))


def audit(scores: np.ndarray, member: np.ndarray, delta: float = 0.0, confidence: float = 0.95, seed: int = 0) -> dict:
    n = scores.size
    if n < 4:
        raise DpauditError(f"a many-run audit needs at least 4 checkpoints, got {n}")
    if member.all() or (~member).all():
        raise DpauditError(f"the canary is {'in every one' if member.all() else 'in none'} of the {n} checkpoints; "
                           "a many-run audit compares runs trained with it and runs trained without it")
    perm = np.random.default_rng([seed, 2718]).permutation(n)
    tune, test = perm[: n // 2], perm[n // 2:]
    for name, idx in (("tuning", tune), ("audit", test)):
        if member[idx].all() or (~member[idx]).all():
            raise DpauditError(f"the {name} half has only members or only non-members; train more checkpoints "
                               "with the canary both in and out")
    u = np.unique(scores[tune])
    cands = np.r_[u[0] - 1.0, (u[:-1] + u[1:]) / 2, u[-1] + 1.0]  # midpoints between tuning scores
    keys = []
    for t in cands:  # the largest CP bound on the tuning half; ties (few runs) broken by TPR - FPR there
        tp, fn, fp, tn = _counts(scores[tune], member[tune], t)
        keys.append((many_run.clopper_pearson_epsilon(tp, fn, fp, tn, delta, confidence), tp / (tp + fn) - fp / (fp + tn)))
    top = [t for t, k in zip(cands, keys) if k == max(keys)]
    best_thr = float(np.median(top))  # the middle of the tied range, not its edge
    tp, fn, fp, tn = _counts(scores[test], member[test], best_thr)
    mu = many_run.gdp_mu_lower(tp, fn, fp, tn, confidence)
    return {"n_checkpoints": int(n), "n_tuning": int(tune.size), "n_audit": int(test.size), "threshold": float(best_thr),
            "tp": tp, "fn": fn, "fp": fp, "tn": tn, "delta": delta, "confidence": confidence,
            "epsilon_lb": many_run.clopper_pearson_epsilon(tp, fn, fp, tn, delta, confidence),
            "gdp_mu_lb": mu, "gdp_epsilon_estimate": many_run.gdp_epsilon(mu, delta) if delta > 0 else None,
            "rule": "threshold chosen on the tuning half of the checkpoints, counted on the other half"}
