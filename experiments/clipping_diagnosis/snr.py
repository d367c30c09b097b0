"""Per-coordinate signal vs DP noise at initialisation, MiniLM-LoRA (B = 256, no clipping: C = 3 clips none).

Under Adam every coordinate moves by about lr per step whatever the size of its gradient, so a coordinate
whose mean gradient |s| is far below the noise std tau = sigma * C / B random-walks instead of descending,
however small sigma is. This prints, per parameter group, the quantiles of |s| and the fraction of
coordinates with |s| > tau for the tau of the runs in README.md."""

import torch
from opacus import GradSampleModule

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as loss_fn
from dpaudit.trainers import trainable

torch.manual_seed(0)
torch.set_num_threads(2)
B, C = 256, 3.0
data = sentiment.load(n_train=3000, validation=500)
model, tok = models.build(models.ModelSpec(name="minilm-l6", max_len=48))
model, _ = trainable.apply(model, "lora")
model.train()
recs = [sentiment.encode_example(e, tok, "classifier", 48) for e in data.train[:B]]
ids, mask, tgt = data_seam.collate(recs, tok.pad_token_id, 48).tensors
params = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]
gsm = GradSampleModule(model, loss_reduction="sum")
total = {nm: torch.zeros_like(p) for nm, p in params}
for k in range(0, B, 64):
    (loss_fn.batch_loss(gsm, ids[k : k + 64], mask[k : k + 64], tgt[k : k + 64]) * 64).backward()
    for nm, p in params:  # per-example gradients of this chunk, summed
        total[nm] += p.grad_sample.sum(0)
        p.grad_sample = None
groups = {"lora_A": [], "lora_B": [], "head": []}
for nm, _ in params:
    s = (total[nm] / B).abs().flatten()
    groups["lora_A" if "lora_A" in nm else "lora_B" if "lora_B" in nm else "head"].append(s)
taus = {
    "sigma 0.01": 0.01 * C / B,
    "sigma 0.03": 0.03 * C / B,
    "eps 1000 (sigma 0.106)": 0.106 * C / B,
    "eps 8 (sigma 0.71)": 0.71 * C / B,
}
print("tau = sigma*C/B:", {k: f"{v:.2e}" for k, v in taus.items()})
for g, parts in groups.items():
    s = torch.cat(parts)
    q = torch.quantile(s[:1_000_000].double(), torch.tensor([0.5, 0.9, 0.99], dtype=torch.double)).tolist()
    frac = {k: f"{float((s > t).double().mean()):.3f}" for k, t in taus.items()}
    print(
        f"{g}: {s.numel()} coords, |s| median {q[0]:.2e}, p90 {q[1]:.2e}, p99 {q[2]:.2e}, max {float(s.max()):.2e}; "
        f"fraction with |s| > tau: {frac}"
    )
