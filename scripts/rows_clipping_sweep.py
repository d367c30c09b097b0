"""One line per variant of a clipping sweep, printed from its committed report.json files: accuracy (and the
base model's), sigma, steps, final train loss, mean fraction of units clipped, and six samples of the
per-step fraction clipped and median per-unit norm.

Run: `python scripts/rows_clipping_sweep.py reports/li_repro_minilm_c_sweep > reports/li_repro_minilm_c_sweep/rows.txt`
"""

from pathlib import Path

from dpaudit.run_folder import from_argv


def main() -> None:
    run = from_argv(__doc__, Path(__file__).resolve().parents[1] / "reports" / "li_repro_minilm_c_sweep")
    for name in sorted(p.name for p in run.path.iterdir() if p.is_dir()):
        if not run.has_report(name):
            print(name, "no report yet")
            continue
        r = run.report(name)
        tr = r["reproducibility"]["train_result"]
        c = tr.get("clipping") or {}
        pf = c.get("per_step", {}).get("fraction_clipped", [])
        pm = c.get("per_step", {}).get("median_norm", [])
        k = max(1, len(pf) // 6)
        m = r["metrics"]
        acc, base = m.get("accuracy"), (m.get("base_model") or {}).get("accuracy")
        print(name, "acc=%.3f" % acc, "base=%s" % base, "sigma=%s" % tr["noise_multiplier"], "steps=%d" % tr["steps"],
              "loss=%.3f" % tr["final_loss"], "meanclip=", c.get("mean_fraction_clipped"), "frac=", pf[::k],
              "med=", pm[::k], "s=%.0f" % tr["seconds"])


if __name__ == "__main__":
    main()
