"""Re-decode the committed table-to-text checkpoints with the current decoding (until EOS or the 128-token
context is full) and print the metrics next to the ones in each report.json (decoded with the earlier cap of 48
new tokens). Usage: python scripts/rescore_table2text.py DIR [DIR ...]"""

import json
import sys
from pathlib import Path

from dpaudit import checkpoint
from dpaudit.tasks import registry

KEYS = ("bleu", "nist", "meteor", "rougeL", "cider")
print("| run | variant | " + " | ".join(f"{k} (48-token cap → to EOS)" for k in KEYS) + " |")
print("|---|---|" + "---|" * len(KEYS))
for d in map(Path, sys.argv[1:]):
    for v in sorted(p for p in d.iterdir() if (p / "checkpoint").is_dir()):
        ck = checkpoint.load(v / "checkpoint")
        old = json.loads((v / "report" / "report.json").read_text())["metrics"]
        task = ck.run["task"]
        data = registry.load_data(task)
        assert data.fingerprint() == ck.run["data"]["fingerprint"], "data changed since the run"
        model, tok = ck.load_model()
        new = registry.get(task["name"]).metrics(model, tok, data.test, 64, ck.run["model"]["max_len"])
        print(f"| {d.name} | {v.name} | " + " | ".join(f"{old[k]:.3g} → {new[k]:.3g}" for k in KEYS) + " |",
              flush=True)
