"""``dpaudit table RUN --columns ...``: one markdown row per variant of a run folder, from its committed files.

    dpaudit table reports/li_repro_minilm_mean --columns variant,accuracy_ci,claimed,pld_rdp,verdict

Every column is one entry of :data:`COLUMNS` (header, and the cell of one variant from its report.json and
run.json); adding one is one line. A number in a README table is then what this command prints from the run
that made it (tests/report/test_report_scripts.py). No torch here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from dpaudit.errors import DpauditError
from dpaudit.io import printable
from dpaudit.markup import md, md_tree, percent
from dpaudit.options import evidence_tier, verdict_name
from dpaudit.report import paired
from dpaudit.run_folder import RunFolder

Z95 = 1.959964  # the 97.5% normal quantile (6 decimals, as the committed tables): two-sided 95% intervals


def wilson(p: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p`` observed on ``n`` trials."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def newcombe(p1: float, n1: int, p2: float, n2: int) -> tuple[float, float]:
    """95% interval for p1 - p2 (Newcombe 1998, method 10: from the two Wilson intervals)."""
    l1, u1 = wilson(p1, n1)
    l2, u2 = wilson(p2, n2)
    d = p1 - p2
    return d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)


class Row:
    """One variant's files, with the readings several columns share."""

    def __init__(self, name: str, report: dict, record: dict, card=lambda: {}):
        self.name, self.r, self.rec, self._card = name, report, record, card
        self.tr = report["reproducibility"].get("train_result") or {}
        self.m = report.get("metrics") or {}
        self.eps = {a["accountant"]: a["epsilon"] for a in report["accounting"].get("results", [])}

    @property
    def sigma(self):
        return self.tr.get("noise_multiplier")

    @property
    def batch(self) -> float:
        """The expected batch B = q N."""
        return self.tr["sample_rate"] * self.tr["dataset_size"]

    @property
    def noise_per_coordinate(self) -> float:
        """σC/B: the noise std on the averaged gradient, per coordinate."""
        B = self.tr["sample_rate"] * self.tr["dataset_size"]
        return self.sigma * self.r["reproducibility"]["config"]["train"]["clipping_norm"] / B


    @property
    def card(self) -> dict:
        """The checkpoint's privacy_card.json (read on first use)."""
        if not hasattr(self, "_card_dict"):
            self._card_dict = self._card()
        return self._card_dict

    def bound(self, attack: str, kind: str = "claimed") -> dict | None:
        got = [e for e in self.r["empirical"] if e["attack"] == attack and e["delta_kind"] == kind]
        return got[0] if got else None


def _eps(x) -> str:
    return "∞" if x is None else f"{x:.2f}"


def _final_loss_window(tr: dict) -> str:
    """The final training loss with the window it averages (runs before one loss per logical step averaged the
    last 20 physical batches of a DP run, the last 20 steps of a non-private one)."""
    k = tr.get("final_loss_steps")
    if k:
        return f"{tr['final_loss']:.3f} (last {k} of {tr['steps']} steps)"
    return f"{tr['final_loss']:.3f} (last 20 {'batches' if tr.get('noise_multiplier') else 'steps'}, old)"


def _accuracy_ci(x: Row) -> str:
    lo, hi = wilson(x.m["accuracy"], x.m["n_test"])
    return f"{x.m['accuracy']:.3f} [{lo:.3f}, {hi:.3f}]"


def _auc_ci(x: Row) -> str:
    a = x.r["attacks"]["loss"]
    return f"{a['auc']:.3f} [{a['auc_ci'][0]:.2f}, {a['auc_ci'][1]:.2f}]"


def _best(x: Row, confidence: bool) -> str:
    b = x.r["empirical_best"]
    conf = f", {percent(b['family_confidence'])}" if confidence else ""
    return f"{b['epsilon_lb']:.2f} ({b['attack']}{conf}, {b['ceiling']:.2f})"


def _mechanism_limit(x: Row) -> str:
    """The card mechanism's median one-run limit with the best test's canaries and guesses (the report's
    audit_limits), and the share of it the test reached."""
    b = x.r["empirical_best"]
    lim = next((e["mechanism_limit"] for e in x.r.get("audit_limits") or []
                if e.get("attack") == b["attack"] and e.get("mechanism_limit")), None)
    if lim is None:
        return "—"
    share = b["epsilon_lb"] / lim["epsilon_lb"] if lim["epsilon_lb"] > 0 else math.nan
    return f"{lim['epsilon_lb']:.2f} ({share:.0%})"


def _trained(x: Row) -> str:
    """What a DP-FROST run selected (share of the parameters, partitions, and the two phases' seconds)."""
    tr = x.rec["trainer"]
    sel = tr.get("selection")
    if not sel:
        return "all" if tr["trainable"] == "full" else tr["trainable"]
    out = f"{sel[0]['selected_params'] / sel[0]['total_params']:.1%} ({len(sel[0]['chosen'])} partitions)"
    if sel[0].get("seconds") is not None:
        out += f"; selection {sel[0]['seconds']:.0f} s, training {x.rec['train_result']['seconds']:.0f} s"
    return out


def _sigmas(x: Row) -> str:
    """sigma of DP-FROST's selection phase / of DP-SGD (a data-independent selection has no noise)."""
    tr, sig = x.rec["trainer"], x.rec["train_result"].get("noise_multiplier")
    free = tr.get("frost_selection") in ("random", "pval")
    if tr.get("selection") and sig and not free:
        return f"{tr['sigma_ps']:.3g} / {sig:.3g}"
    return f"— / {sig:.3g}" if sig else "—"


def _best_with_whitebox(x: Row) -> str:
    b = x.r["empirical_best"]
    wb = x.bound("whitebox_gradient", b["delta_kind"])
    return (f"{b['epsilon_lb']:.2f} ({b['attack']}; ceiling {b['ceiling']:.2f})"
            + (f", white-box {wb['epsilon_lb']:.2f}" if wb else ""))


def _with_ceiling(x: Row, attack: str, kind: str = "claimed") -> str:
    e = x.bound(attack, kind)
    return f"{e['epsilon_lb']:.2f} (≤ {e['ceiling']:.2f})" if e else "—"


def _two_sample(x: Row) -> str:
    """The white-box two-sample test (block canaries; beside the verdict): its bound and the card's median limit."""
    t = next(iter(x.r.get("whitebox_two_sample") or []), None)
    return f"{t['epsilon_lb']:.2f} (limit {t['mechanism_limit']:.2f})" if t else "—"


def _best_blackbox(x: Row) -> str:
    return _best_of_tier(x, "outputs only")


def _best_of_tier(x: Row, tier: str) -> str:
    """The largest bound of the claim's tests of one evidence tier (``options.TIERS``), and its test."""
    mine = [e for e in x.r["empirical"] if evidence_tier(e["attack"]) == tier]
    rows = [e for e in mine if e["delta_kind"] == "claimed"] or [e for e in mine if e["delta_kind"] == "zero"]
    if not rows:  # a non-private model's rows are at delta = 0
        return "—"
    e = max(rows, key=lambda e: e["epsilon_lb"])
    return f"{e['epsilon_lb']:.2f} ({e['attack']})"


def _noise(x: Row) -> tuple[str, float]:
    """(the noise's name, its standard deviation per coordinate in units of C) from the card."""
    lmo = (x.card.get("extra") or {}).get("lmo")
    if lmo:
        name = "fixed Laplace" if lmo["fixed_scale"] else f"Laplace mixture ({lmo['draw'].replace('_', ' ')})"
        return name, lmo["noise_std"] / x.card["mechanism"]["clipping_norm"]
    return "Gaussian", x.rec["train_result"]["noise_multiplier"]


def _samples(values: list, k: int = 6) -> str:
    """About six evenly spaced values of a per-step trace."""
    step = max(1, len(values) // k)
    return ", ".join(f"{v:.4g}" for v in values[::step]) or "—"


def _clip(x: Row) -> dict:
    return x.tr.get("clipping") or {}


# name -> (header, cell)
COLUMNS: dict[str, tuple[str, Callable[[Row], str]]] = {
    "variant": ("variant", lambda x: x.name),
    "accuracy": ("test accuracy", lambda x: f"{x.m['accuracy']:.3f}"),
    "accuracy_ci": ("test accuracy [95% CI]", _accuracy_ci),
    "bleu": ("BLEU", lambda x: f"{x.m['bleu']:.1f}"),
    "perplexity": ("perplexity", lambda x: f"{x.m['perplexity']:.1f}"),
    "user_sampling": ("user records", lambda x: (x.card.get("extra") or {}).get("records_per_step", "—")),
    "validation_bleu": ("validation BLEU", lambda x: f"{x.m['bleu']:.1f}"),
    "nist": ("NIST", lambda x: f"{x.m['nist']:.2f}"),
    "meteor": ("METEOR", lambda x: f"{x.m['meteor']:.1f}"),
    "rougeL": ("ROUGE-L", lambda x: f"{x.m['rougeL']:.1f}"),
    "cider": ("CIDEr", lambda x: f"{x.m['cider']:.2f}"),
    "zero_shot_bleu": ("zero-shot BLEU", lambda x: f"{x.m['base_model']['bleu'] if 'base_model' in x.m else math.nan:.1f}"),
    "claimed": ("claimed ε (PRV)", lambda x: _eps(x.r["claim"]["epsilon"])),
    "claimed_exact": ("claimed ε", lambda x: "∞" if x.r["claim"]["epsilon"] is None else f"{x.r['claim']['epsilon']:.3f}"),
    "prv": ("claimed ε (PRV)", lambda x: f"{x.eps['prv']:.2f}" if x.eps else "∞"),
    "pld_rdp": ("PLD / RDP", lambda x: f"{x.eps['pld']:.2f} / {x.eps['rdp']:.2f}" if x.eps else "—"),
    "interval": ("true ε in (accountants)", lambda x: "—" if x.r["accounting"].get("lower_epsilon") is None else
                 f"[{x.r['accounting']['lower_epsilon']:.3f}, {x.r['accounting']['certified_epsilon']:.3f}]"),
    "sigma": ("σ", lambda x: f"{x.sigma:.3f}" if x.sigma else "—"),
    "noise_per_coordinate": ("σC/B", lambda x: f"{x.noise_per_coordinate:.2g}" if x.sigma else "—"),
    "steps": ("steps", lambda x: f"{x.tr['steps']}"),
    "mrs": ("MRs (records)", lambda x: f"{x.r['reproducibility']['config']['task']['n_train']} ({x.tr['dataset_size']})"),
    "epochs": ("epochs", lambda x: f"{x.tr['steps'] * x.batch / x.tr['dataset_size']:.1f}"),
    "example_passes": ("example passes", lambda x: f"{x.tr['steps'] * x.batch:.0f}"),
    "final_loss": ("final train loss", lambda x: f"{x.tr['final_loss']:.3f}"),
    "final_loss_window": ("final train loss", lambda x: _final_loss_window(x.tr)),
    "seconds": ("train s", lambda x: f"{x.tr['seconds']:.0f}"),
    "loss_auc": ("LOSS AUC", lambda x: f"{x.r['attacks']['loss']['auc']:.3f}"),
    "design": ("canary design", lambda x: x.r["canary_plan"].get("design", "template")),
    "canaries": ("canaries (inserted)", lambda x: f"{x.r['canary_plan']['m']} ({x.r['canary_plan']['inserted']})"),
    "loss_tpr_1": ("LOSS TPR at 1% FPR", lambda x: f"{x.r['attacks']['loss']['tpr_at_1_fpr']:.3f}"),
    "best_tpr_1": ("best TPR at 1% FPR (attack)", lambda x: "{1:.3f} ({0})".format(*max(
        ((a, v["tpr_at_1_fpr"]) for a, v in x.r["attacks"].items() if v.get("tpr_at_1_fpr") is not None),
        key=lambda t: t[1]))),
    "loss_auc_ci": ("LOSS AUC [95% CI]", _auc_ci),
    "best": ("empirical ε lower bound, 95% (best test, ceiling)", lambda x: _best(x, False)),
    "mechanism_limit": ("card mechanism's median limit, same m and guesses (reached)", _mechanism_limit),
    "best_confidence": ("empirical ε lower bound (best test, confidence, ceiling)", lambda x: _best(x, True)),
    "verdict": ("verdict", lambda x: f"`{verdict_name(x.r['verdict']['status'])}`"),
    "trained": ("trained", _trained),
    "sigmas": ("σ_ps / σ_SGD", _sigmas),
    "best_with_whitebox": ("best one-run bound, 95%", _best_with_whitebox),
    "constant_accuracy": ("constant predictor", lambda x: f"{x.m.get('constant_predictor_accuracy', math.nan):.3f}"),
    "noise": ("noise", lambda x: _noise(x)[0]),
    "noise_std_over_c": ("noise std / C", lambda x: f"{_noise(x)[1]:.2f}"),
    "claimed_by": ("claimed ε (by)", lambda x: f"{x.r['claim']['epsilon']:.3f} ({x.card['claim']['accountant']})"),
    "whitebox_dirac": ("white-box Dirac ε ≥ (ceiling)", lambda x: _with_ceiling(x, "whitebox_gradient")),
    "whitebox_dense": ("white-box dense ε ≥ (ceiling)", lambda x: _with_ceiling(x, "whitebox_gradient_dense")),
    "whitebox_two_sample": ("white-box two-sample ε ≥, if independent (card's limit)", _two_sample),
    "best_blackbox": ("best black-box ε ≥", _best_blackbox),
    "outputs_only": ("outputs only: best ε ≥ (test)", lambda x: _best_of_tier(x, "outputs only")),
    "final_weights": ("final weights: ε ≥ (ceiling)", lambda x: _with_ceiling(
        x, "final_weights", "claimed" if x.bound("final_weights") else "zero")),
    "final_weights_auc": ("final-weights AUC", lambda x: "—" if "final_weights" not in x.r["attacks"] else
                          f"{x.r['attacks']['final_weights']['auc']:.3f}"),
    "in_run": ("in-run: best ε ≥ (test)", lambda x: _best_of_tier(x, "in-run")),
    "base_accuracy": ("base model accuracy", lambda x: "—" if not x.m.get("base_model") else
                      f"{x.m['base_model']['accuracy']:.3f}"),
    "sigma_full": ("σ", lambda x: f"{x.sigma:.6g}" if x.sigma else "—"),
    "mean_clipped": ("clipped (mean over steps)", lambda x: "—" if _clip(x).get("mean_fraction_clipped") is None
                     else f"{_clip(x)['mean_fraction_clipped']:.4g}"),
    "clipped_trace": ("fraction clipped, per step (samples)", lambda x: _samples(
        _clip(x).get("per_step", {}).get("fraction_clipped", []))),
    "norm_trace": ("median per-unit norm, per step (samples)", lambda x: _samples(
        _clip(x).get("per_step", {}).get("median_norm", []))),
}


def md_cell(text) -> str:
    """A markdown table cell built by a column from escaped values (:func:`table` escapes the report, the record,
    the card and the variant's name with :func:`dpaudit.markup.md_tree`): one line, and no pipe the escaping left
    bare, so no cell can add a row or a column."""
    return re.sub(r"(?<!\\)\|", "\\|", " ".join(str(text).split("\n")).replace("\r", " "))


def table(runs, columns: list[str], variants: list[str] | None = None) -> str:
    """The markdown table of ``columns``: one row per variant of each run folder in ``runs`` (a RunFolder or a
    list of them, in order), ``variants`` only when given (default: every variant with a report, by name)."""
    runs = [runs] if isinstance(runs, RunFolder) else list(runs)  # or ReportFolders (dpaudit/report/report_folder.py)
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown or not columns:
        raise DpauditError(f"unknown column {unknown[0] if unknown else None!r}; choose from {', '.join(COLUMNS)}")
    pairs = [(run, v) for run in runs for v in (list(variants) if variants else run.variants())]
    missing = [f"{v!r} in {run.path}" for run, v in pairs if not run.has_report(v)]
    if not pairs:
        raise DpauditError(f"{printable(', '.join(str(r.path) for r in runs))[:200]} holds no variant with a report "
                           "(<variant>/report/report.json); pass the --out of a `dpaudit run`")
    if missing:
        raise DpauditError(f"variant {missing[0]} has no report; run it first, or leave it out")
    lines = ["| " + " | ".join(COLUMNS[c][0] for c in columns) + " |", "|" + "---|" * len(columns)]
    for run, v in pairs:
        try:
            row = Row(md(v), md_tree(run.report(v)), md_tree(run.run_record(v)),
                      card=lambda run=run, v=v: md_tree(run.card(v)))  # every input string escaped (dpaudit.markup)
            cells = [COLUMNS[c][1](row) for c in columns]
        except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError) as e:
            raise DpauditError(f"variant {printable(v)!r} has no value for a requested column ({type(e).__name__}: "
                               f"{printable(str(e))[:80]}); leave that column out, or restore its files") from None
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def differences(runs, pairs: list[tuple[str, str]]) -> str:
    """The markdown table of test-accuracy differences A − B for each (A, B) of ``pairs`` found in ``runs``: paired
    (McNemar's exact test, paired bootstrap interval; dpaudit/report/paired.py) where both reports carry per-example
    outcomes on the same test examples, else Newcombe's 95% interval (unpaired, so conservative)."""
    runs = [runs] if isinstance(runs, RunFolder) else list(runs)

    def metrics(v):
        for run in runs:
            if run.has_report(v):
                return run.report(v)["metrics"]
        raise DpauditError(f"variant {v!r} has no report; run it first, or leave it out of --differences")

    lines = ["| variant | minus | difference in accuracy [95% CI] | reading |", "|---|---|---|---|"]
    for a, b in pairs:
        ma, mb = metrics(a), metrics(b)
        if paired.can_pair(ma, mb):  # the same test examples, each model's outcome on each: McNemar
            c = paired.compare(ma["correct"], mb["correct"])
            lines.append(f"| {a} | {b} | {c.difference:+.3f} [{c.low:+.3f}, {c.high:+.3f}] (paired; McNemar p = "
                         f"{c.p_value:.3g}, {c.a_only} vs {c.b_only} discordant) | {c.reading()} |")
            continue
        (pa, na), (pb, nb) = (ma["accuracy"], ma["n_test"]), (mb["accuracy"], mb["n_test"])
        lo, hi = newcombe(pa, na, pb, nb)
        word = "higher" if lo > 0 else "lower" if hi < 0 else "cannot be resolved"
        lines.append(f"| {a} | {b} | {pa - pb:+.3f} [{lo:+.3f}, {hi:+.3f}] | {word} |")
    return "\n".join(lines) + "\n"
