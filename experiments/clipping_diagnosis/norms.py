import sys

import torch
from opacus import GradSampleModule

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as loss_fn
from dpaudit.trainers import trainable

torch.manual_seed(0)
tr = sys.argv[1]
n = int(sys.argv[2])
data = sentiment.load(n_train=n)
model, tok = models.build(models.ModelSpec(name="minilm-l6", max_len=48))
model, _ = trainable.apply(model, tr)
model.train()
for mod in model.modules():
    if isinstance(mod, torch.nn.Dropout):
        mod.p = 0.0
recs = [sentiment.encode_example(e, tok, "classifier", 48) for e in data.train]
ds = data_seam.collate(recs, tok.pad_token_id, 48)
ids, mask, tgt = ds.tensors
params = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]
gsm = GradSampleModule(model, loss_reduction="sum")
G = []
for k in range(0, n, 64):
    gsm.zero_grad()
    for _, p in params:
        p.grad_sample = None
    loss = loss_fn.batch_loss(gsm, ids[k : k + 64], mask[k : k + 64], tgt[k : k + 64]) * min(64, n - k)
    loss.backward()
    G.append(torch.cat([p.grad_sample.reshape(p.grad_sample.shape[0], -1) for _, p in params], 1))
G = torch.cat(G)
nr = G.norm(dim=1)
print("norm quantiles", torch.quantile(nr, torch.tensor([0, 0.1, 0.5, 0.9, 0.99, 1.0])))
m = G.mean(0)
head = sum(p.numel() for nm, p in params if "classifier" in nm)
print("head share of squared norm", (G[:, -head:].norm(dim=1) ** 2 / nr**2).mean().item())
for C in [0.1, 1, 3, 10]:
    f = torch.clamp(C / nr, max=1.0)
    mc = (G * f[:, None]).mean(0)
    print(
        C,
        "clipped frac",
        (nr > C).float().mean().item(),
        "cos",
        torch.nn.functional.cosine_similarity(m, mc, dim=0).item(),
        "cos head",
        torch.nn.functional.cosine_similarity(m[-head:], mc[-head:], dim=0).item(),
        "cos nonhead",
        torch.nn.functional.cosine_similarity(m[:-head], mc[:-head], dim=0).item(),
    )
labels = tgt[:, 0]
print("label balance", labels.float().mean().item(), "bias grad mean", m[-2:].tolist())
