import sys

import torch
from opacus import GradSampleModule

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as loss_fn
from dpaudit.trainers import trainable

torch.manual_seed(0)
tr = sys.argv[1]
data = sentiment.load(n_train=8)
model, tok = models.build(models.ModelSpec(name="minilm-l6", max_len=48))
model, _ = trainable.apply(model, tr)
model.train()
for mod in model.modules():
    if isinstance(mod, torch.nn.Dropout):
        mod.p = 0.0
recs = [sentiment.encode_example(e, tok, "classifier", 48) for e in data.train]
ds = data_seam.collate(recs, tok.pad_token_id, 48)
ids, mask, tgt = ds.tensors
params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
# loop reference
ref = []
for i in range(len(recs)):
    model.zero_grad()
    loss = loss_fn.batch_loss(model, ids[i : i + 1], mask[i : i + 1], tgt[i : i + 1])
    loss.backward()
    ref.append(torch.cat([p.grad.flatten() for _, p in params]))
ref = torch.stack(ref)
gsm = GradSampleModule(model, loss_reduction="mean")
gsm.zero_grad()
loss = loss_fn.batch_loss(gsm, ids, mask, tgt)
loss.backward()
gs = torch.cat([p.grad_sample.reshape(len(recs), -1) for _, p in params], 1)
print("norms ref", ref.norm(dim=1))
print("norms gs ", gs.norm(dim=1))
print("max rel err", ((gs - ref).norm(dim=1) / ref.norm(dim=1)).max().item())
for n, p in params[:3] + params[-2:]:
    print(n, p.shape)
# per-block norms for sample 0
off = 0
for n, p in params:
    k = p.numel()
    print(f"{n:70s} {ref[0, off : off + k].norm():.3e} {gs[0, off : off + k].norm():.3e}")
    off += k
