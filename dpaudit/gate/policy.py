"""``dpaudit check``: a CI gate on privacy claims, reading only report.json.

Policy TOML (every key optional; unknown keys are errors)::

    [rules]
    no_empirical_above_claim = true   # no empirical lower bound may exceed the claimed epsilon
    accounting = ["verified"]         # allowed accounting checks: verified | under-claim | unverifiable
    empirical = ["consistent", "underpowered"]  # allowed empirical checks; ["consistent"] demands an audit
                                      # whose ceiling reaches the claim (violated | consistent | underpowered | no-power)
    accounting_tolerance = 0.02       # numerical slack of the accounting check (the evaluator's rule, re-applied)
    accounting_reference = "certified"  # also require this upper value <= claim: "certified" (smallest sound;
                                      # the accounting check itself), "largest", or an accountant's name
    max_claimed_epsilon = 10.0        # the privacy budget
    intended_tolerance = 0.01         # fail a run whose claim spent more than the epsilon it was trained for (the
                                      # card's extra.intended, e.g. make_private_with_epsilon's target) by more than
                                      # this fraction; a card that does not record it is not checked
    require_claim = true              # a non-private model (no claim) fails
    min_accuracy = 0.5                # task accuracy floor
    max_exposure = 12.0               # no canary's exposure above this many bits
    allowed_verdicts = ["consistent", "underpowered"]  # every word: docs/verdicts.md (older policies' words are read
                                      # as their current names: a headline "not-refuted" as "underpowered", an
                                      # empirical "not-refuted" as "consistent")
    no_noise_shortfall = false        # fail when a white-box noise check bounds the noise actually added below the
                                      # card's sigma (dpaudit/audit/noise_check.py; outside the verdict's family-wise
                                      # correction, so on top of its false-failure rate)
    mechanism_checks = ["noise", "sampling"]  # the checks that must not fail (each at its stated false-alarm rate);
                                      # omitted: every check, those registered with register_mechanism_check too
    require_mechanism_checks = false  # true: each check named above must also have been run and passed (a report
                                      # without a probe, with the check not tested, or from a record the card
                                      # does not bind, then fails)

A list names what is allowed; an empty one is refused (it would allow nothing). Both tolerances are fractions of the
claim, at most 1.

Exit codes: 0 every rule holds, 1 at least one fails (one line each), 2 bad input.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from dpaudit import checks, options, report_file
from dpaudit.audit import check_registry
from dpaudit.audit.rows import TestRow
from dpaudit.claim import status as claim_check
from dpaudit.claim import verdict
from dpaudit.errors import DpauditError
from dpaudit.gate import mechanism_rules
from dpaudit.io import number, read_toml
from dpaudit.markup import percent


@dataclass(frozen=True)
class Policy:
    """The gate's rules (the module docstring). From Python, an empty tuple for ``accounting``, ``empirical`` or
    ``allowed_verdicts`` puts no restriction on that status; a policy file must list them (an empty list is refused)."""

    no_empirical_above_claim: bool = True
    accounting: tuple = ("verified",)
    empirical: tuple = ("consistent", "underpowered")
    accounting_tolerance: float | None = options.ACCOUNTING_TOLERANCE
    accounting_reference: str = "certified"
    max_claimed_epsilon: float | None = 10.0  # the default policy is configs/policy.toml (test_configs.py)
    intended_tolerance: float | None = 0.01  # the claim may exceed the intended epsilon by this fraction at most
    require_claim: bool = True
    min_accuracy: float | None = None
    max_exposure: float | None = None
    allowed_verdicts: tuple = ("consistent", "underpowered")
    no_noise_shortfall: bool = False
    mechanism_checks: tuple | None = None  # None: every check (the registered ones too); "records": the card's probe
    # records are in the folder
    require_mechanism_checks: bool = False

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("no_empirical_above_claim", "require_claim", "no_noise_shortfall",
                          "require_mechanism_checks") and not isinstance(v, bool):
                raise DpauditError(f"policy rules.{f.name} must be true or false, got {v!r}")
            if f.name in ("accounting_tolerance", "max_claimed_epsilon", "min_accuracy", "max_exposure",
                          "intended_tolerance") and \
                    v is not None and (not checks.finite(v) or v < 0):
                raise DpauditError(f"policy rules.{f.name} must be a finite number >= 0, got {v!r}")
            if f.name in ("accounting_tolerance", "intended_tolerance") and v is not None and v > 1:
                raise DpauditError(f"policy rules.{f.name} is a fraction of the claim (0.02 is 2%), at most 1, "
                                   f"got {v!r}")
        for key, known in (("allowed_verdicts", options.VERDICTS), ("accounting", options.ACCOUNTING_STATUSES),
                           ("mechanism_checks", check_registry.names()),
                           ("empirical", options.EMPIRICAL_STATUSES)):
            bad = [v for v in getattr(self, key) or () if v not in known]
            if bad:
                raise DpauditError(f"policy rules.{key}: unknown status {bad[0]!r}; known: {', '.join(known)}")


def load_policy(path: Path | None) -> Policy:
    if path is None:
        return Policy()
    d = read_toml(path, "policy file", "see configs/policy.toml")
    extra = sorted(set(d) - {"rules"})
    if extra:
        raise DpauditError(f"unknown policy section [{extra[0]}]; put rules under [rules]")
    rules = d.get("rules", {})
    if not isinstance(rules, dict):
        raise DpauditError(f"policy 'rules' must be a table ([rules] with one key per rule), got {type(rules).__name__}")
    names = {f.name for f in fields(Policy)}
    bad = sorted(set(rules) - names)
    if bad:
        raise DpauditError(f"unknown policy key 'rules.{bad[0]}'; valid keys: {', '.join(sorted(names))}")
    for key in ("allowed_verdicts", "accounting", "empirical", "mechanism_checks"):
        if key in rules:
            if not isinstance(rules[key], list):
                raise DpauditError(f"policy rules.{key} must be a list of statuses, got {rules[key]!r}")
            if not rules[key] and key != "mechanism_checks":  # in a file, [] reads as "allow nothing"; the rule
                # would instead be off (Policy's () is "no restriction", for the Python API): refused, not guessed
                known = {"allowed_verdicts": options.VERDICTS, "accounting": options.ACCOUNTING_STATUSES,
                         "empirical": options.EMPIRICAL_STATUSES}[key]
                raise DpauditError(f"policy rules.{key} is empty; list the statuses allowed (every one, "
                                   f"{list(known)}, turns the rule off) or leave the key out for the default")
            rules[key] = tuple(rules[key])
    for key, level in (("allowed_verdicts", "verdict"), ("empirical", "empirical")):
        if key in rules:  # an older policy's word, read as its current name
            rules[key] = tuple(options.current_word(level, v) if isinstance(v, str) else v for v in rules[key])
    return Policy(**rules)


load_report = report_file.load  # the one reader of a report.json (dpaudit/report_file.py)


def check(r: dict, p: Policy) -> list[str]:
    """Failures, one line each (empty = all rules hold) for one evaluation report."""
    name = r.get("checkpoint", {}).get("variant") or r.get("checkpoint", {}).get("path") or "the model"
    fails = []
    claim = number(r["claim"]["epsilon"])
    private = claim is not None
    if p.require_claim and not private:
        fails.append(f"{name}: no privacy claim (non-private model) but the policy requires one")
    if p.no_empirical_above_claim and private:
        for e in r["empirical"]:
            if e["delta_kind"] == "claimed" and e["epsilon_lb"] > claim:
                fails.append(f"{name}: empirical lower bound {e['epsilon_lb']:.3f} ({e['attack']}, "
                             f"{percent(e['family_confidence'])}) exceeds the claimed epsilon {claim:.3f}")
    if private:
        fails += _accounting(name, r, claim, p)
        emp = empirical_check(r, claim)
        if p.empirical and emp.status not in p.empirical:
            fails.append(f"{name}: empirical check '{emp.status}' is not allowed ({emp.reason})")
    if p.max_claimed_epsilon is not None and private and claim > p.max_claimed_epsilon:
        fails.append(f"{name}: claimed epsilon {claim:.3f} is above the budget {p.max_claimed_epsilon}")
    fails += _intended(name, r, claim, p)
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
    if p.no_noise_shortfall:
        for c in r.get("noise_checks") or []:
            if c["status"] == "below the card":
                fails.append(f"{name}: the updates recorded on the {c['attack']} canaries carry noise at most "
                             f"{c['upper']:.4g} ({percent(c['confidence'])}), below the card's sigma "
                             f"{c['noise_multiplier']:.4g}")
    fails += mechanism_rules.failures(name, r, p.mechanism_checks, p.require_mechanism_checks)
    plan = r.get("audit_plan") or {}
    if plan.get("status") == "off-plan":
        fails.append(f"{name}: the evaluation departs from the plan fixed before training "
                     f"({'; '.join(plan.get('departures', []))}): exploratory, not a gate result; re-evaluate "
                     "without --off-plan")
    if p.allowed_verdicts and r["verdict"]["status"] not in p.allowed_verdicts:
        said = [f for f in fails if "mechanism check" in f or "trained for" in f or "departs from the plan" in f]
        why = ("its causes are the FAIL lines above" if r["verdict"]["status"] == "mechanism-mismatch" and said
               else r["verdict"]["reason"])  # one FAIL line per failure: a cause already printed is not repeated
        fails.append(f"{name}: verdict '{r['verdict']['status']}' is not allowed ({why})")
    return fails


def accounting_check(r: dict, claim: float, tolerance: float) -> dict:
    """The report's accounting check, re-applied at ``tolerance`` with the evaluator's own rule."""
    acct, c = r["accounting"], r["claim"]
    return claim_check.status(claim, c["delta"], c.get("neighbouring", "add_remove"), acct["results"],
                              acct.get("findings", []), acct.get("not_applicable"), tolerance)


def empirical_check(r: dict, claim: float) -> verdict.EmpiricalCheck:
    """The report's empirical check, re-derived from its rows (reports written before it was recorded too)."""
    rows = [TestRow.from_dict(e) for e in r["empirical"] if e["delta_kind"] == "claimed"]
    best = max(rows, key=lambda e: e.epsilon_lb) if rows else None
    curve = next((e for e in rows if e.claim_curve_rejected), None)
    return verdict.empirical(claim, best, max((e.ceiling for e in rows), default=0.0), curve)


def _accounting(name: str, r: dict, claim: float, p: Policy) -> list[str]:
    tol = options.ACCOUNTING_TOLERANCE if p.accounting_tolerance is None else p.accounting_tolerance
    acc = accounting_check(r, claim, tol)
    fails = []
    if p.accounting and acc["status"] not in p.accounting:
        fails.append(f"{name}: accounting check '{acc['status']}' is not allowed ({acc['reason']})")
    if p.accounting_reference != "certified" and p.accounting_tolerance is not None:
        results = r["accounting"]["results"]
        if p.accounting_reference == "largest":
            ref, label = r["accounting"]["reaccounted_epsilon"], "largest accountant"
        else:
            vals = [a["epsilon"] for a in results if a["accountant"] == p.accounting_reference]
            if not vals:
                raise DpauditError(f"policy accounting_reference {p.accounting_reference!r} is not in the report")
            ref, label = vals[0], p.accounting_reference
        if ref is not None and options.exceeds(ref, claim, tol):
            fails.append(f"{name}: re-accounted epsilon {ref:.3f} ({label}) exceeds the claim {claim:.3f} by more "
                         f"than {tol:.0%}")
    return fails


def summary(r: dict) -> str:
    """What the checks of one evaluation report established, in one line (printed by a passing gate)."""
    name = r.get("checkpoint", {}).get("variant") or r.get("checkpoint", {}).get("path") or "the model"
    claim = number(r["claim"]["epsilon"])
    if claim is None:
        return f"{name}: no claim"
    acc = accounting_check(r, claim, r["accounting"].get("tolerance", options.ACCOUNTING_TOLERANCE))
    emp = empirical_check(r, claim)
    from dpaudit.report.markdown import claim_strength

    s = claim_strength(r)
    strength = (f"; at the claim these canaries show {s['top']['epsilon_lb']:.2g} for a mechanism exactly at it"
                if s else "")
    ph = r.get("posthoc") if isinstance(r.get("posthoc"), dict) else None
    posthoc = (f"; post-hoc audit ({ph.get('kind')}): the empirical side holds only under its stated "
               "assumption (REPORT.md)") if ph else ""
    return (f"{name}: claim epsilon {claim:g}; accounting {acc['status']}; empirical {emp.status} "
            f"(tested up to epsilon {emp.ceiling:.3g}{strength}){posthoc}")


def summaries(r: dict) -> list[str]:
    return [summary(v) for v in r["variants"].values()] if r["kind"] == "comparison" else [summary(r)]


def overspend(r: dict) -> dict | None:
    """Intended vs achieved: the epsilon the run was meant to spend (the card's ``extra.intended``, in the report's
    claim) beside the one its card claims for what ran, and their ratio; None when the intent is not recorded."""
    c = r.get("claim") or {}
    intended = c.get("intended_epsilon")
    if intended is None or not checks.finite(intended) or not intended > 0:
        return None
    spent = number(c.get("epsilon"))
    spent = float("inf") if spent is None else float(spent)
    return {"intended": float(intended), "spent": spent, "ratio": spent / float(intended),
            "source": c.get("intended_source") or "the card"}


def _intended(name: str, r: dict, claim, p: Policy) -> list[str]:
    o = overspend(r)
    if p.intended_tolerance is None or o is None or not o["spent"] > o["intended"] * (1 + p.intended_tolerance):
        return []
    spent = "no finite epsilon" if o["spent"] == float("inf") else f"epsilon {o['spent']:.4g}"
    return [f"{name}: the run spent {spent}, more than the epsilon {o['intended']:.4g} it was trained for "
            f"({o['source']}): {o['ratio']:.2f}x the intended budget; the mechanism that ran is not the one planned "
            "(a smaller noise multiplier, more steps or a higher sample rate than the target's)"]


def check_any(r: dict, p: Policy) -> list[str]:
    if r["kind"] == "comparison":
        return [f for v in r["variants"].values() for f in check(v, p)]
    return check(r, p)
