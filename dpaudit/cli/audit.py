"""``dpaudit audit``: audit bounds from counts (one-run, many-run) or membership scores (scores, through the public
auditor dpaudit/audit/auditor.py), and many-run audits over checkpoints. (Over 300 lines: one command group, its
options' help and its one-line errors; the arithmetic is in dpaudit/audit/.)"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit import checks
from dpaudit.errors import DpauditError
from dpaudit.io import repeated
from dpaudit.markup import percent, probability


@click.group()
def audit():
    """Audit statistics from counts or scores (no model needed)."""


@audit.command("one-run")
@click.option("--canaries", "m", required=True, type=int, help="Number of canaries m (each in with prob. 1/2).")
@click.option("--guesses", "r", required=True, type=int, help="Number of guesses r = k+ + k- (fixed in advance).")
@click.option("--correct", "v", required=True, type=int, help="Number of correct guesses v.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence level.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object with key epsilon_lb.")
def one_run_cmd(m, r, v, delta, confidence, as_json):
    """Steinke-Nasr-Jagielski one-run ε lower bound, with the ceiling r guesses allow, and the f-DP readings of
    the same counts (Mahloujifar, Melis, Chaudhuri 2024): the (ε, δ) trade-off bound and the Gaussian-DP estimate."""
    from dpaudit.audit.auditor import bounds_from_counts

    _audit_params(delta, confidence, canaries=m, guesses=r, correct=v)
    if m > MAX_CANARIES or r > MAX_GUESSES:
        raise DpauditError(f"at most {MAX_CANARIES:.0e} canaries and {MAX_GUESSES:.0e} guesses (the f-DP reading takes "
                           f"about a second at 10^6 guesses); got {m:,} and {r:,}")
    if r > m:
        raise DpauditError(f"--guesses {r} cannot exceed --canaries {m}")
    try:  # the public auditor's counts path (dpaudit/audit/auditor.py), r split evenly between the two sides
        res = bounds_from_counts(m, r // 2, r - r // 2, v, delta, confidence)
    except ValueError as e:
        raise DpauditError(str(e)) from None
    lb, cap = res.steinke_epsilon_lb, res.steinke_ceiling
    if as_json:
        click.echo(json.dumps({"epsilon_lb": lb, "ceiling": cap, "m": m, "r": r, "v": v, "delta": delta,
                               "confidence": confidence, "fdp_epsilon_lb": res.epsilon_lb, "fdp_ceiling": res.ceiling,
                               "gdp_mu_lb": res.gdp_mu_lb, "gdp_epsilon_estimate": res.gdp_epsilon_estimate}))
    else:
        click.echo(f"ε ≥ {lb:.3f} at {percent(confidence)} confidence (ceiling for {r} guesses: {cap:.3f})")
        click.echo(f"f-DP: ε ≥ {res.epsilon_lb:.3f} (ceiling {res.ceiling:.3f}); Gaussian-DP μ ≥ "
                   f"{res.gdp_mu_lb:.3f}{_estimate(res)}")


def _estimate(res) -> str:
    """The Gaussian-DP reading, labelled as the estimate it is."""
    if res.gdp_epsilon_estimate is None:
        return ""
    return (f", ε ≈ {res.gdp_epsilon_estimate:.3f} at δ = {probability(res.delta)} if the mechanism is Gaussian-shaped (an "
            "estimate, not a bound)")


@audit.command("scores")
@click.argument("scores_file", metavar="SCORES", type=click.Path(path_type=Path))
@click.option("--strategy", type=click.Choice(["fixed", "held-out", "search", "median", "two-sample"]),
              default="fixed", show_default=True,
              help="How the guesses are made, each valid at --confidence: fixed = --guesses fixed before the scores "
                   "were seen; held-out = guess counts chosen on a seeded half, audited on the other; search = every "
                   "count of a geometric grid, Bonferroni over the grid; median = the median of --splits held-out "
                   "splits, each at 1 - alpha/2; two-sample = past guessing: the inserted and held-out scores above "
                   "--threshold (or one tuned on a seeded half), valid only for independent canaries (white-box "
                   "Dirac canaries), docs/methods.md.")
@click.option("--guesses", default=None, metavar="K_POS,K_NEG",
              help="fixed: guesses on each side, fixed in advance (default m/4,m/4).")
@click.option("--splits", default=11, show_default=True, type=click.IntRange(1, 101), help="median: held-out splits.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0),
              help="held-out and two-sample: the split's seed.")
@click.option("--threshold", default=None, type=float,
              help="two-sample: the score threshold, fixed before the scores were seen (dpaudit audit plan "
                   "--two-sample prints the card's); without it one is tuned on a seeded half.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence level.")
@click.option("--fpr", default=0.01, show_default=True, type=float,
              help="Report the TPR at this FPR, with Clopper-Pearson intervals.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the audit, tpr, fpr and auc.")
def scores_cmd(scores_file, strategy, guesses, splits, seed, threshold, delta, confidence, fpr, as_json):
    """Every bound from membership scores: SCORES is a JSON file ({"scores": [...], "inserted": [true, false, ...]},
    {"inserted": [scores], "held_out": [scores]}, or a list of {"score", "inserted"} records), a .jsonl file of such
    records, or a CSV/TSV with columns score and inserted (semicolons and decimal commas read too), one per canary,
    each inserted by a fair coin before training (a split no fair coin gives is refused). Prints the f-DP ε lower bound and its ceiling, the Steinke et
    al. bound of the same guesses, the Gaussian-DP reading (an estimate), TPR at --fpr and AUC with intervals
    (dpaudit/audit/auditor.py: the same auditor as a Python object). At most 10^6 canaries, every strategy (median:
    canaries × splits at most 1.1 × 10^7)."""
    from dpaudit.audit import auditor

    _audit_params(delta, confidence)
    if not 0 < fpr < 1:
        raise DpauditError(f"--fpr must be in (0, 1), got {fpr}")
    sc, signs = _read_scores(scores_file)
    if sc.size > MAX_SCORES:
        raise DpauditError(f"at most {MAX_SCORES:,} canaries; {scores_file} has {sc.size:,}")
    if strategy == "median" and sc.size * splits > MAX_MEDIAN_WORK:  # the real cost: one held-out audit per split
        raise DpauditError(f"--strategy median: canaries × --splits is at most {MAX_MEDIAN_WORK:,} (each split is one "
                           f"held-out audit; 11 splits of 10^6 take about 40 s here); {sc.size:,} × {splits} = "
                           f"{sc.size * splits:,}: pass --splits {max(1, MAX_MEDIAN_WORK // sc.size)} or fewer")
    if threshold is not None and strategy != "two-sample":
        raise DpauditError(f"--threshold is for --strategy two-sample, not {strategy}")
    if strategy == "two-sample":
        if guesses is not None:
            raise DpauditError("--guesses is for --strategy fixed; two-sample counts the scores above a threshold")
        return _two_sample(scores_file, sc, signs, threshold, seed, delta, confidence, as_json)
    try:
        a = auditor.ScoreAuditor(sc, signs)
        if strategy == "fixed":
            kp, kn = (a.m // 4, a.m // 4) if guesses is None else _pair(guesses)
            strat = auditor.Fixed(kp, kn)
        else:
            if guesses is not None:
                raise DpauditError(f"--guesses is for --strategy fixed; {strategy} chooses its own")
            strat = {"held-out": auditor.HeldOut(seed=seed), "search": auditor.Search(),
                     "median": auditor.MedianOfSplits(splits=splits)}[strategy]
        res = a.audit(strat, delta=delta, confidence=confidence)
        tpr, got_fpr = a.tpr_at_fpr(fpr, confidence)
        auc = a.auc(confidence)
    except ValueError as e:
        raise DpauditError(f"{scores_file}: {e}") from None
    if as_json:
        click.echo(json.dumps({"audit": res.to_dict(), "tpr": vars(tpr), "fpr": vars(got_fpr), "auc": vars(auc)}))
        return
    click.echo(f"{a.m} canaries ({int((signs > 0).sum())} inserted); {res.strategy}: {res.v} right of "
               f"{res.r} guesses on {res.m}")
    click.echo(f"ε ≥ {res.epsilon_lb:.3f} at {percent(confidence)} confidence, δ = {probability(delta)} (f-DP; ceiling "
               f"{res.ceiling:.3f}, the most these guesses could show); Steinke et al.: ε ≥ {res.steinke_epsilon_lb:.3f}")
    click.echo(f"Gaussian-DP μ ≥ {res.gdp_mu_lb:.3f}{_estimate(res)}")
    click.echo(f"TPR {tpr.value:.3f} [{tpr.low:.3f}, {tpr.high:.3f}] at FPR {got_fpr.value:.4f} "
               f"[{got_fpr.low:.4f}, {got_fpr.high:.4f}] (asked {fpr:g}; {percent(confidence)} Clopper-Pearson); "
               f"AUC {auc.value:.3f} [{auc.low:.3f}, {auc.high:.3f}] (bootstrap)")


def _two_sample(scores_file, sc, signs, threshold, seed, delta, confidence, as_json) -> None:
    import math

    from dpaudit.audit import auditor

    if threshold is not None and not math.isfinite(threshold):
        raise DpauditError(f"--threshold must be a finite number, got {threshold}")
    try:
        res = auditor.ScoreAuditor(sc, signs).two_sample(delta, confidence, threshold=threshold, seed=seed)
    except ValueError as e:
        raise DpauditError(f"{scores_file}: {e}") from None
    if as_json:
        click.echo(json.dumps({"two_sample": res.to_dict()}))
        return
    click.echo(f"{sc.size} canaries ({int((signs > 0).sum())} inserted); two-sample test, {res.threshold_rule}: "
               f"{res.tp} of {res.n_in} inserted and {res.fp} of {res.n_out} held-out scores above {res.threshold:.6g}")
    click.echo(f"ε ≥ {res.epsilon_lb:.3f} at {percent(confidence)} confidence, δ = {probability(delta)} (ceiling {res.ceiling:.3f}); "
               f"valid only if {res.assumption}")


def _pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise DpauditError(f"--guesses takes K_POS,K_NEG (two whole numbers), got {text!r}")
    return int(parts[0]), int(parts[1])


def _read_scores(path: Path):
    """(scores, signs) from a JSON or CSV file; bad input is one line."""
    import numpy as np

    from dpaudit.io import MAX_JSON_BYTES, read_json

    if not path.is_file():
        raise DpauditError((f"scores file {path} is not a regular file (a folder, a device or a pipe)" if path.exists()
                            else f"scores file not found at {path}") + "; write one with scores and inserted flags")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise DpauditError(f"{path} is {path.stat().st_size:,} bytes, more than a scores file of 10^6 canaries")
    if path.suffix.lower() in (".csv", ".tsv"):
        d = _table_rows(path)
    elif path.suffix.lower() == ".jsonl":
        d = _columns(path, _jsonl_rows(path))
    else:
        d = read_json(path, "scores file", "write {\"scores\": [...], \"inserted\": [...]}")
        if isinstance(d, list):  # pandas' to_json(orient="records"): one {"score", "inserted"} object per canary
            d = _columns(path, d)
        if not isinstance(d, dict):
            raise DpauditError(f"{path} must hold a JSON object with scores and inserted, or inserted and held_out")
    try:
        if "scores" in d:
            if "inserted" not in d:
                raise DpauditError(f"{path}: scores but no inserted flags{_found(d)}; add \"inserted\": one true/false "
                                   f"per score (true: the canary was in the training data){_RENAME}")
            sc = np.asarray([_score(x) for x in d["scores"]], dtype=float)
            flags = [_flag(x) for x in d["inserted"]]
            signs = np.where(np.asarray(flags, dtype=bool), 1, -1)
        elif "inserted" in d and "held_out" in d:
            ins = np.asarray([_score(x) for x in d["inserted"]], dtype=float)
            out = np.asarray([_score(x) for x in d["held_out"]], dtype=float)
            sc, signs = np.r_[ins, out], np.r_[np.ones(ins.size, dtype=int), -np.ones(out.size, dtype=int)]
        else:
            raise DpauditError(f"{path}: give scores and inserted (one flag per score), or inserted and held_out"
                               f"{_found(d)}{_RENAME}")
    except (TypeError, ValueError, OverflowError) as e:  # OverflowError: an integer beyond any float
        raise DpauditError(f"{path}: the scores must be numbers and the flags true/false ({e})") from None
    if sc.size != signs.size:
        raise DpauditError(f"{path}: {sc.size} scores but {signs.size} inserted flags: one of each per canary")
    return sc, signs


_RENAME = ("; another tool's membership labels are not guessed: rename its member flag (or member scores) to "
           "inserted, its non-member scores to held_out")


def _found(d) -> str:
    """" (it has: a, b)": the keys or columns a score file holds, cut short (names from the file: shown escaped)."""
    names = [str(k)[:30] for k in list(d)[:8]]
    return f" (it has: {', '.join(names) or 'nothing'}{', ...' if len(d) > 8 else ''})"


def _score(x) -> float:
    """A score as a float; true/false is a flag, not a score (Python's float(True) is 1.0)."""
    if isinstance(x, bool):
        raise ValueError(f"{x!r} is a flag, not a score")
    return float(x)


def _flag(x) -> bool:
    if isinstance(x, bool):
        return x
    t = str(x).strip().lower()
    if t in ("true", "1", "+1", "yes", "in", "inserted"):
        return True
    if t in ("false", "0", "-1", "no", "out", "held_out", "held out"):
        return False
    try:  # a flag column written as floats (pandas, NumPy): 1.0 inserted, 0.0 or -1.0 held out
        v = float(t)
    except ValueError:
        v = None
    if v in (1.0, 0.0, -1.0):
        return v == 1.0
    raise ValueError(f"{x!r} is not a flag")


def _table_rows(path: Path) -> dict:
    """The score and inserted columns of a CSV (comma, or semicolon with decimal commas as European spreadsheets
    write it) or TSV file; column names read without case or surrounding spaces."""
    import csv

    kind = "TSV" if path.suffix.lower() == ".tsv" else "CSV"
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # a BOM (Excel) is not part of the header
            head = fh.readline()
            delim = "\t" if kind == "TSV" else ";" if ";" in head and "," not in head else ","
            fh.seek(0)
            rows = list(csv.reader(fh, delimiter=delim))
    except (UnicodeDecodeError, csv.Error) as e:
        raise DpauditError(f"cannot read {path} as {kind} (UTF-8 text): {e}") from None
    names = [c.strip().lower() for c in rows[0]] if rows else []
    if "score" not in names or "inserted" not in names:
        raise DpauditError(f"{path}: a {kind} needs the columns score and inserted (one row per canary)"
                           f"{_found(dict.fromkeys(names))}{_RENAME}")
    twice = repeated([c for c in names if c in ("score", "inserted")])
    if twice is not None:
        raise DpauditError(f"{path}: the header names the column {twice} twice; keep one")
    i, j = names.index("score"), names.index("inserted")
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    if any(len(r) <= max(i, j) for r in body):
        raise DpauditError(f"{path}: a row has fewer fields than the header; one score and one flag per row")
    comma = delim == ";"
    return {"scores": [r[i].strip().replace(",", ".") if comma else r[i] for r in body],
            "inserted": [r[j] for r in body]}


def _jsonl_rows(path: Path) -> list:
    from dpaudit.tasks.files import read_rows

    return read_rows(path, "scores file", "one {\"score\": ..., \"inserted\": ...} object per line")


def _columns(path: Path, rows: list) -> dict:
    """One {"score", "inserted"} object per canary, as columns."""
    bad = next((r for r in rows if not (isinstance(r, dict) and "score" in r and "inserted" in r)), None)
    if bad is not None:
        raise DpauditError(f"{path}: each record needs a score and an inserted flag ({{\"score\": ..., "
                           f"\"inserted\": ...}}){_found(bad) if isinstance(bad, dict) else ''}{_RENAME}")
    return {"scores": [r["score"] for r in rows], "inserted": [r["inserted"] for r in rows]}


@audit.command("plan")
@click.option("--sample-rate", "q", required=True, type=float, help="The card's Poisson sampling rate q.")
@click.option("--sigma", required=True, type=float, help="The card's noise multiplier σ.")
@click.option("--steps", required=True, type=int, help="The card's noisy steps T.")
@click.option("--delta", default=1e-5, show_default=True, type=float, help="δ of the claim the audit tests.")
@click.option("--confidence", default=0.95, show_default=True, type=float,
              help="Confidence of the white-box test (the report's family-wise share of it, e.g. 1 - 0.05/7).")
@click.option("--canaries", "ms", default="1000,5000,20000,100000", show_default=True, metavar="M,...",
              help="Numbers of white-box Dirac canaries to compare.")
@click.option("--two-sample", "two", is_flag=True,
              help="Also the two-sample threshold test past guessing (independent canaries): its median bound, "
                   "the false-positive rate it aims at and the threshold to fix (seconds per m).")
@click.option("--canary-rate", "canary_rate", type=float, default=None,
              help="The canaries' own Poisson rate (canaries.sample_rate), where they are sampled apart from the "
                   "data: the limit is that of canaries at this rate; the card accounts every record at the larger "
                   "of --sample-rate and this, so give --sigma calibrated at that rate (`dpaudit run --dry-run` "
                   "prints it).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per m.")
def plan_cmd(q, sigma, steps, delta, confidence, ms, two, canary_rate, as_json):
    """Before training: what a white-box audit with m canaries can show about this mechanism (the median simulated
    one-run bound at the best guess count, docs/probe.md), for each m. Pick m here, then fix it in the config
    (train.gradient_canaries) or attach_probe(m=...): the audit is planned before its scores exist."""
    from dpaudit.accounting import validate_mechanism
    from dpaudit.audit import mechanism_limit

    _audit_params(delta, confidence)
    validate_mechanism(sigma, q, steps)  # the card's ranges, as `account` and `card` take them
    if canary_rate is not None:
        try:
            validate_mechanism(sigma, canary_rate, steps)
        except DpauditError as e:
            raise DpauditError(f"--canary-rate: {e}") from None
    card_q, q = q, (q if canary_rate is None else canary_rate)  # the canaries' mechanism: their own rate
    try:
        sizes = [int(x) for x in ms.split(",") if x.strip()]
    except ValueError:
        raise DpauditError(f"--canaries takes integers separated by commas, got {ms!r}") from None
    if not sizes or min(sizes) < 2:
        raise DpauditError(f"--canaries takes integers >= 2, got {ms!r}")
    if max(sizes) > MAX_PLAN_CANARIES or len(sizes) > MAX_PLAN_SIZES:
        raise DpauditError(f"--canaries takes at most {MAX_PLAN_SIZES} sizes of at most {MAX_PLAN_CANARIES:,} canaries "
                           f"each (each size is simulated: about 20 s at 10^6); got {len(sizes)} sizes up to "
                           f"{max(sizes):,}")
    rows = []
    for m in sizes:
        st = mechanism_limit.study(m, q, sigma, steps, delta, confidence)
        if st is None:
            rows.append({"m": m, "epsilon_lb": None, "best_k": None, "method": None})
            continue
        j = st["k"].index(st["best_k"])
        rows.append({"m": m, "epsilon_lb": st["epsilon_lb"][j], "best_k": st["best_k"], "method": st["method"],
                     "median_right": st["median_right"][j]})
    if two:
        from dpaudit.audit import two_sample

        for r in rows:
            p = two_sample.plan(q, sigma, steps, r["m"] // 2, r["m"] - r["m"] // 2, delta, confidence)
            r["two_sample"] = None if p is None else {k: p[k] for k in ("limit", "fpr", "threshold", "ceiling", "pool")}
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(f"white-box Dirac canaries on a subsampled Gaussian (q = {q:g}, σ = {sigma:g}, T = {steps}), "
               f"δ = {probability(delta)}, {percent(confidence, 1)}:")
    if canary_rate is not None:
        click.echo(f"  (the canaries at their own rate {q:g}, the data at {card_q:g}: the card accounts every record "
                   f"at q = {max(q, card_q):g})")
    for r in rows:
        if r["epsilon_lb"] is None:
            click.echo(f"  m = {r['m']:>9,}: beyond the simulation budget (no limit; the audit keeps m/4 + m/4)")
        else:
            click.echo(f"  m = {r['m']:>9,}: ε ≥ {r['epsilon_lb']:.2f} in the median audit ({r['best_k']:,} + "
                       f"{r['best_k']:,} guesses, {r['median_right']:,} right; {r['method']})")
        t = r.get("two_sample")
        if two and t:
            click.echo(f"               two-sample test: ε ≥ {t['limit']:.2f} in the median audit at FPR {t['fpr']:g} "
                       f"(threshold {t['threshold']:.6g}; ceiling {t['ceiling']:.2f}; valid for independent canaries)")
        elif two:
            click.echo("               two-sample test: beyond the simulation budget")


MAX_STRATEGY_CANARIES = 10 ** 5  # audit strategy: as --strategy search / median
MAX_STRATEGY_WORK = 10 ** 6  # audit strategy: canaries x simulations (every simulation audits m canaries 4 ways)
MAX_STRATEGY_DRAWS = 2 * 10 ** 8  # audit strategy: the normals all its simulations draw, 4 x sims x m x T for a
# subsampled mechanism of T steps (2 x 10^7 take about 2 s on this project's 2-core CPU: about 20 s at the cap)


def pld_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """A subsampled Gaussian's epsilon at delta (dp_accounting's PLD): the true epsilon of a simulated one."""
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.accounting.dpa_pld import epsilon

    return float(epsilon([SubsampledGaussian(q, sigma, steps)], delta))


@audit.command("strategy")
@click.option("--mechanism", "spec", required=True, metavar="KIND:PARAMETERS",
              help="What you expect of the scores you will audit: null, gaussian:MU (inserted canaries score "
                   "N(MU, 1), held-out N(0, 1)), auc:A (the same at the MU whose AUC is A: an attack expected to "
                   "reach AUC A), rr:EPS (randomised response) or subsampled:Q,SIGMA,T (white-box Dirac canaries "
                   "of a subsampled Gaussian card).")
@click.option("--canaries", "m", required=True, type=click.IntRange(8, MAX_STRATEGY_CANARIES),
              help="Number of canaries m the audit will have (each inserted with probability 1/2).")
@click.option("--sims", default=20, show_default=True, type=click.IntRange(1, 1000),
              help="Simulated audits per strategy (each strategy's median over them decides; about 1 s per "
                   f"simulation of all four strategies at m = 10,000 on a 2-core CPU). --canaries × --sims is at "
                   f"most {MAX_STRATEGY_WORK:,}, and all simulations draw at most {MAX_STRATEGY_DRAWS:,} normals (4 × sims × m × T "
                   "for subsampled:Q,SIGMA,T).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed of the simulations.")
@click.option("--delta", default=1e-5, show_default=True, type=float, help="δ of the claim the audit tests.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence of the audit.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object (medians per strategy and the choice).")
def strategy_cmd(spec, m, sims, seed, delta, confidence, as_json):
    """Before the scores exist: which threshold strategy of `dpaudit audit scores` to fix, chosen from what you
    tell about the mechanism. Simulates every strategy on it with m canaries and picks the largest median bound
    (the simplest among equals); reads no real score, so the audit stays valid (dpaudit/audit/strategy_plan.py)."""
    from dpaudit import progress
    from dpaudit.audit import simulated, strategy_plan

    _audit_params(delta, confidence)
    if m * sims > MAX_STRATEGY_WORK:
        raise DpauditError(f"--canaries × --sims is at most {MAX_STRATEGY_WORK:,} (each simulation audits the m "
                           f"canaries four ways, about 1 s at m = 10,000); {m:,} × {sims:,} = {m * sims:,}: pass "
                           f"--sims {max(1, MAX_STRATEGY_WORK // m)} or fewer")
    try:
        mech = simulated.parse(spec)
        mech.check_size(m)  # refused before the bar is drawn: one line
        steps = int(mech.params[2]) if mech.kind == "subsampled" else 1
        if mech.kind == "subsampled":  # the card's ranges, as `account` and `card` take them
            from dpaudit.accounting import validate_mechanism

            validate_mechanism(float(mech.params[1]), float(mech.params[0]), steps)
        draws = len(strategy_plan.CANDIDATES) * sims * m * steps
        if draws > MAX_STRATEGY_DRAWS:  # the real cost: a subsampled mechanism draws m x T normals per audit
            raise DpauditError(f"{len(strategy_plan.CANDIDATES)} strategies × --sims {sims:,} × --canaries {m:,} × "
                               f"{steps:,} steps = {draws:,} simulated draws, more than {MAX_STRATEGY_DRAWS:,} (about "
                               f"{draws / 1e7:,.0f} s here): pass --sims "
                               f"{max(1, MAX_STRATEGY_DRAWS // (len(strategy_plan.CANDIDATES) * m * steps))} or fewer, "
                               "or fewer canaries or steps")
        bar = progress.bar(total=len(strategy_plan.CANDIDATES) * sims, desc="simulated audits", unit="audit",
                           disable=as_json)
        with bar:
            r = strategy_plan.choose(mech, m, delta, confidence, sims=sims, seed=seed,
                                     progress=lambda name: bar.set_postfix_str(name), done=bar.update)
        r["true_epsilon"] = mech.true_epsilon(delta, pld_epsilon)
    except ValueError as e:
        raise DpauditError(str(e)) from None
    if as_json:
        click.echo(json.dumps(r))
        return
    click.echo(f"{mech.spec} (true ε {r['true_epsilon']:.2f} at δ = {probability(delta)}), m = {m:,}, {sims} simulated audits "
               f"per strategy, {percent(confidence)}:")
    for name, med in r["medians"].items():
        click.echo(f"  {name:9s} median ε ≥ {med:.2f}{'   <- chosen' if name == r['choice'] else ''}")
    if max(r["medians"].values()) <= 0:
        click.echo(f"no strategy shows a bound in the median audit of {m:,} canaries on this mechanism: more canaries "
                   "(or a stronger attack) first; the default stays")
    click.echo(f"fix it before the scores exist: dpaudit audit scores SCORES --strategy {r['choice']}")


@audit.command("many-run")
@click.option("--tp", required=True, type=int, help="Runs WITH the canary that the test called member.")
@click.option("--fn", required=True, type=int, help="Runs WITH the canary that the test called non-member.")
@click.option("--fp", required=True, type=int, help="Runs WITHOUT the canary that the test called member.")
@click.option("--tn", required=True, type=int, help="Runs WITHOUT the canary that the test called non-member.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Joint confidence of both rates.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def many_run_cmd(tp, fn, fp, tn, delta, confidence, as_json):
    """Clopper-Pearson ε lower bound from many training runs (Jagielski et al. 2020), plus the Gaussian-DP
    estimate (Nasr et al. 2023), which assumes a GDP-shaped mechanism and is labelled as an estimate.
    The test's threshold must have been fixed on other runs than these."""
    from dpaudit.audit import many_run

    _audit_params(delta, confidence, tp=tp, fn=fn, fp=fp, tn=tn)
    if tp + fn == 0 or fp + tn == 0:
        raise DpauditError("the many-run audit needs runs with the canary (--tp + --fn > 0) and runs without it "
                           "(--fp + --tn > 0)")
    try:
        lb = many_run.clopper_pearson_epsilon(tp, fn, fp, tn, delta, confidence)
        mu = many_run.gdp_mu_lower(tp, fn, fp, tn, confidence)
    except ValueError as e:
        raise DpauditError(str(e)) from None
    gdp_eps = many_run.gdp_epsilon(mu, delta) if delta > 0 else None
    if as_json:
        click.echo(json.dumps({"epsilon_lb": lb, "gdp_mu_lb": mu, "gdp_epsilon_estimate": gdp_eps,
                               "confidence": confidence, "delta": delta}))
    else:
        click.echo(f"ε ≥ {lb:.3f} at {percent(confidence)} confidence (Clopper-Pearson lower bound)")
        est = f", ε ≈ {gdp_eps:.3f} at δ = {delta}" if gdp_eps is not None else ""
        click.echo(f"estimate, assuming Gaussian DP: μ ≥ {mu:.3f}{est} (not a bound)")


@audit.command("checkpoints")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--canary", "canary_id", required=True, help="Id of the target canary, in or out of each run.")
@click.option("--attack", default="loss", show_default=True, help="Black-box attack scoring the target.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence of the bound.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0), help="Seed of the tuning/audit split.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def checkpoints_cmd(checkpoints, canary_id, attack, delta, confidence, seed, as_json):
    """Many-run audit over CHECKPOINTS trained with and without one target canary: threshold chosen on
    half of them, Clopper-Pearson bound on the other half."""
    from dpaudit.evaluation import checkpoint_audit

    _audit_params(delta, confidence)
    scores, member, _ = checkpoint_audit.score_checkpoints(list(checkpoints), canary_id, attack)
    r = checkpoint_audit.audit(scores, member, delta, confidence, seed)
    if as_json:
        click.echo(json.dumps(r))
    else:
        click.echo(f"ε ≥ {r['epsilon_lb']:.3f} at {percent(confidence)} confidence from {r['n_audit']} audit runs "
                   f"(TP {r['tp']}, FN {r['fn']}, FP {r['fp']}, TN {r['tn']}; threshold from {r['n_tuning']} other runs)")


MAX_SCORES = 10 ** 6  # audit scores, every strategy (search about 17 s, median 41 s at 10^6: reports/bench/audit_speed.md)
MAX_MEDIAN_WORK = 11 * 10 ** 6  # audit scores --strategy median: canaries x splits (the default 11 splits at 10^6)
MAX_CANARIES = 10 ** 8  # audit one-run: the Steinke bound's cost does not grow with m beyond this
MAX_GUESSES = 10 ** 6  # audit one-run: the f-DP reading is O(r) per evaluation (about a second at 10^6 here)
MAX_PLAN_CANARIES = 10 ** 6  # audit plan: a simulated audit per size (about 20 s at 10^6 on this project's CPU)
MAX_PLAN_SIZES = 20


MAX_COUNT = 10 ** 12  # runs or canaries an audit could have counted


def _audit_params(delta: float, confidence: float, **counts: int) -> None:
    """The hypothesis and confidence of an audit bound, and its counts, before any work: a bound at an invalid δ
    or at a confidence outside [0.5, 1) would be printed as if it were valid."""
    if not 0 <= delta < 1:  # NaN fails too
        raise DpauditError(f"--delta must be in [0, 1), got {delta}")
    checks.check_confidence(confidence, "--confidence")
    for name, n in counts.items():
        if n < 0:
            raise DpauditError(f"--{name} must be >= 0, got {n}")
        if n > MAX_COUNT:  # SciPy's beta quantiles take no integer past 2**63 (a TypeError, exit 3, before)
            raise DpauditError(f"--{name} {n} is past {MAX_COUNT:.0e}: no audit trains or plants that many; pass the "
                               "counts the audit made")
