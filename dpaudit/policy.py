"""``dpaudit check``: a CI gate on privacy claims, reading only report.json.

Policy TOML (every key optional; unknown keys are errors)::

    [rules]
    no_empirical_above_claim = true   # no empirical lower bound may exceed the claimed epsilon
    accounting_tolerance = 0.02       # re-accounted eps <= claimed eps * (1 + tolerance)
    accounting_reference = "certified"  # which re-accounted eps: "certified" (smallest sound), "largest", or an accountant
    max_claimed_epsilon = 10.0        # the privacy budget
    require_claim = true              # a non-private model (no claim) fails
    min_accuracy = 0.5                # task accuracy floor
    max_exposure = 12.0               # no canary's exposure above this many bits
    allowed_verdicts = ["consistent"]

Exit codes: 0 every rule holds, 1 at least one fails (one line each), 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from dpaudit import options
from dpaudit.errors import DpauditError
from dpaudit.io import number, read_json, read_toml

REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Policy:
    no_empirical_above_claim: bool = True
    accounting_tolerance: float | None = options.ACCOUNTING_TOLERANCE
    accounting_reference: str = "certified"
    max_claimed_epsilon: float | None = None
    require_claim: bool = True
    min_accuracy: float | None = None
    max_exposure: float | None = None
    allowed_verdicts: tuple = ("consistent",)

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("no_empirical_above_claim", "require_claim") and not isinstance(v, bool):
                raise DpauditError(f"policy rules.{f.name} must be true or false, got {v!r}")
            if f.name in ("accounting_tolerance", "max_claimed_epsilon", "min_accuracy", "max_exposure") and \
                    v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
                raise DpauditError(f"policy rules.{f.name} must be a number >= 0, got {v!r}")
        bad = [v for v in self.allowed_verdicts if v not in options.VERDICTS]
        if bad:
            raise DpauditError(f"policy rules.allowed_verdicts: unknown verdict {bad[0]!r}; known: "
                               f"{', '.join(options.VERDICTS)}")


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    d = read_toml(path, "policy file", "see configs/policy.toml")
    extra = sorted(set(d) - {"rules"})
    if extra:
        raise DpauditError(f"unknown policy section [{extra[0]}]; put rules under [rules]")
    rules = d.get("rules", {})
    names = {f.name for f in fields(Policy)}
    bad = sorted(set(rules) - names)
    if bad:
        raise DpauditError(f"unknown policy key 'rules.{bad[0]}'; valid keys: {', '.join(sorted(names))}")
    if "allowed_verdicts" in rules:
        rules["allowed_verdicts"] = tuple(rules["allowed_verdicts"])
    return Policy(**rules)


def load_report(path: Path) -> dict:
    r = read_json(path, "report", "pass the report.json written by `dpaudit evaluate`")
    if not isinstance(r, dict) or r.get("schema_version") != REPORT_SCHEMA_VERSION:
        got = r.get("schema_version") if isinstance(r, dict) else None
        raise DpauditError(f"report {path} has schema_version {got!r}; this dpaudit reads {REPORT_SCHEMA_VERSION}")
    if r.get("kind") not in ("evaluation", "comparison"):
        raise DpauditError(f"report {path} is neither an evaluation nor a comparison report")
    return r


def check(r: dict, p: Policy) -> list[str]:
    """Failures, one line each (empty = all rules hold) for one evaluation report."""
    name = r.get("checkpoint", {}).get("variant") or r.get("checkpoint", {}).get("path")
    fails = []
    claim = number(r["claim"]["epsilon"])
    private = claim is not None
    if p.require_claim and not private:
        fails.append(f"{name}: no privacy claim (non-private model) but the policy requires one")
    if p.no_empirical_above_claim and private:
        for e in r["empirical"]:
            if e["delta_kind"] == "claimed" and e["epsilon_lb"] > claim:
                fails.append(f"{name}: empirical lower bound {e['epsilon_lb']:.3f} ({e['attack']}, "
                             f"{e['family_confidence']:.0%}) exceeds the claimed epsilon {claim:.3f}")
    if p.accounting_tolerance is not None and private:
        acct = r["accounting"]
        if p.accounting_reference == "certified":
            ref, label = acct["certified_epsilon"], "certified (smallest sound accountant)"
        elif p.accounting_reference == "largest":
            ref, label = acct["reaccounted_epsilon"], "largest accountant"
        else:
            vals = [a["epsilon"] for a in acct["results"] if a["accountant"] == p.accounting_reference]
            if not vals:
                raise DpauditError(f"policy accounting_reference {p.accounting_reference!r} is not in the report")
            ref, label = vals[0], p.accounting_reference
        if ref is not None and options.exceeds(ref, claim, p.accounting_tolerance):
            fails.append(f"{name}: re-accounted epsilon {ref:.3f} ({label}) exceeds the claim {claim:.3f} by more "
                         f"than {p.accounting_tolerance:.0%}")
        for f in acct.get("findings", []):
            fails.append(f"{name}: accounting finding: {f}")
    if p.max_claimed_epsilon is not None and private and claim > p.max_claimed_epsilon:
        fails.append(f"{name}: claimed epsilon {claim:.3f} is above the budget {p.max_claimed_epsilon}")
    if p.min_accuracy is not None:
        acc = (r.get("metrics") or {}).get("accuracy")
        if acc is None:
            fails.append(f"{name}: no accuracy in the report but the policy sets min_accuracy")
        elif acc < p.min_accuracy:
            fails.append(f"{name}: accuracy {acc:.3f} is below the floor {p.min_accuracy}")
    if p.max_exposure is not None:
        can = (r.get("exposure") or {}).get("canaries")
        if not can:
            fails.append(f"{name}: no exposure in the report but the policy sets max_exposure")
        else:
            worst = max(can, key=lambda c: c["exposure"])
            if worst["exposure"] > p.max_exposure:
                fails.append(f"{name}: canary {worst['id']} has exposure {worst['exposure']:.2f} bits, above "
                             f"the ceiling {p.max_exposure}")
    if p.allowed_verdicts and r["verdict"]["status"] not in p.allowed_verdicts:
        fails.append(f"{name}: verdict '{r['verdict']['status']}' is not allowed ({r['verdict']['reason']})")
    return fails


def check_any(r: dict, p: Policy) -> list[str]:
    if r["kind"] == "comparison":
        return [f for v in r["variants"].values() for f in check(v, p)]
    return check(r, p)
