"""How much of an inserted new-token canary's clipped gradient lands on the canary's own parameters.

A white-box Dirac canary puts its whole clipped norm C on one coordinate no other record touches; a black-box
new-token canary owns only its tokens' embedding rows (input and, untied, output), and the rest of its gradient
goes to parameters every record shares, where it is one more record among many. This measures, for inserted
canaries of a run's manifest on the run's base model (before training: the first DP step's view), the norm of the
per-example gradient restricted to the canary's own rows after clipping to C, as a share of C:
``|g_own| * min(1, C / |g|) / C``. The one-run audit of a final-model reader can use at most that share of the
signal the card's white-box limit assumes, whatever the attack.

Usage (from the checkout's root, a run folder made by ``dpaudit run``):
    python experiments/canary_gradient_share.py CONFIG RUN_FOLDER [--n 64] [--clip 1.0]
Prints one JSON line: the model, how many canaries, the median and quartiles of the share and of |g|.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="the run's config (its [model] and [train] trainable settings)")
    ap.add_argument("run", type=Path, help="the run folder; its first variant's checkpoint/canaries.json is read")
    ap.add_argument("--n", type=int, default=64, help="inserted canaries measured (the first n of the manifest)")
    ap.add_argument("--clip", type=float, default=1.0, help="the clipping norm C")
    a = ap.parse_args(argv)

    import torch

    from dpaudit.canaries.manifest import load_manifest
    from dpaudit.run import config as run_config
    from dpaudit.trainers import fit

    cfg = run_config.load(a.config)
    variant = cfg.variants[-1]
    tc = variant.trainer
    manifest = load_manifest(next(sorted(a.run.glob("*/checkpoint/canaries.json")).__iter__()))
    torch.manual_seed(0)
    model, tok = fit.base_model(cfg, tc.engine, manifest)
    model, _ = fit.choose_trainable(model, tc, tc.engine.grad_sample_mode)
    model.eval()  # no dropout: the gradient of the example itself
    emb_in = model.get_input_embeddings().weight
    emb_out = model.get_output_embeddings().weight
    params = [p for p in model.parameters() if p.requires_grad]
    new = set(manifest.new_tokens())
    shares, norms = [], []
    for c in manifest.inserted[: a.n]:
        text = c.text
        ids = tok(text, return_tensors="pt", truncation=True, max_length=cfg.model.max_len)["input_ids"]
        own = sorted({i for i in ids[0].tolist() if tok.convert_ids_to_tokens(i) in new})
        model.zero_grad(set_to_none=True)
        labels = ids
        if manifest.plan.train_on == "secret":  # the final-weights design: the loss reads the new token only
            from dpaudit.api import canary_labels

            labels = torch.tensor([canary_labels(ids[0].tolist(), tok, manifest)])
        model(input_ids=ids, labels=labels).loss.backward()
        total = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)).item()
        own_sq = 0.0
        for w in {id(emb_in): emb_in, id(emb_out): emb_out}.values():
            if w.requires_grad and w.grad is not None:
                own_sq += float((w.grad[own].double() ** 2).sum())
        shares.append(np.sqrt(own_sq) * min(1.0, a.clip / total) / a.clip)
        norms.append(total)
    q = lambda x: [round(float(v), 4) for v in np.quantile(x, [0.25, 0.5, 0.75])]  # noqa: E731
    print(json.dumps({"model": cfg.model.name, "trainable": tc.trainable, "canaries": len(shares),
                      "own_share_q25_q50_q75": q(shares), "grad_norm_q25_q50_q75": q(norms), "clip": a.clip}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
