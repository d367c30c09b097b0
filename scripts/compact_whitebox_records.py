"""Keep committed white-box canary records light: replace a record's per-step projections (``<stem>.steps.npy``,
T x m float32) by what every committed table reads of them, exactly the fields the probe keeps when it runs with
``record_steps=False`` (docs/probe.md "How many canaries"): the per-canary likelihood ratio at the card's
mechanism, the sums of squares of the noise check and the held-out canaries' per-step sums. The array's sha256 is
kept in the record (``steps_sha256``), so a re-run of the command that made the run can be checked against it.

    python scripts/compact_whitebox_records.py reports/demo reports/demo_lm ...

A record whose statistic is the sum (a non-private run, a card with another mechanism) keeps its summed scores;
only its array goes. Run it on committed reports only: a checkpoint you still evaluate with the full record
should keep its array.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def compact(record_file: Path) -> str | None:
    from dpaudit.audit import whitebox_lr
    from dpaudit.claim.card import load_card
    from dpaudit.probe.integrity import digest

    d = json.loads(record_file.read_text())
    steps_name = d.get("steps_file")
    if not steps_name:
        return None
    npy = record_file.parent / steps_name
    steps = np.load(npy, allow_pickle=False)
    signs = np.asarray(d["signs"])
    card = load_card(record_file.parent / "privacy_card.json")
    stat, params = whitebox_lr.choose({**d, "steps_array": steps}, card.audited_mechanism())
    x = steps.astype(np.float64)
    out = {k: v for k, v in d.items() if k != "steps_file"}
    out["steps_sha256"] = digest(npy.read_bytes())
    if stat == "likelihood_ratio":
        llr = whitebox_lr.subsampled_gaussian_llr(steps, params["sample_rate"], params["noise_multiplier"])
        out["online"] = {"statistic": "likelihood_ratio", "sample_rate": params["sample_rate"],
                         "noise_multiplier": params["noise_multiplier"], "steps": int(x.shape[0]),
                         "values": int(x.size), "sum_of_squares": float(np.sum(x * x)),
                         "llr": [float(v) for v in llr]}
    probe = out.get("probe")
    if probe and probe.get("arrays_file"):  # the held-out canaries' per-step sums, for the probe's checks
        arr = record_file.parent / probe["arrays_file"]
        with np.load(arr, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["heldout_ss"] = np.sum(x[:, signs < 0] ** 2, axis=1)
        np.savez(arr, **arrays)
        probe["arrays_sha256"] = digest(arr.read_bytes())  # the file it now names
    record_file.write_text(json.dumps(out) + "\n")
    npy.unlink()
    return f"{record_file}: {stat}, {steps.shape[0]} x {steps.shape[1]} projections -> sha256 {out['steps_sha256'][:12]}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for folder in argv:
        for f in sorted(Path(folder).glob("**/gradient_canaries*.json")):
            line = compact(f)
            if line:
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
