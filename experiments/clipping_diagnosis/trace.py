import sys

import torch

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as loss_fn
from dpaudit.trainers import mechanism, trainable
from dpaudit.trainers.engine import EngineConfig

torch.manual_seed(0)
torch.set_num_threads(2)
C = float(sys.argv[1])
lr = float(sys.argv[2])
steps = int(sys.argv[3])
data = sentiment.load(n_train=3000, validation=500)
model, tok = models.build(models.ModelSpec(name="minilm-l6", max_len=48))
model, _ = trainable.apply(model, "lora")
recs = [sentiment.encode_example(e, tok, "classifier", 48) for e in data.train]
ds = data_seam.collate(recs, tok.pad_token_id, 48)
cfg = EngineConfig(
    target_epsilon=8, epochs=3, batch_size=256, lr=lr, clipping_norm=C, grad_sample_mode="hooks"
)
model.train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.Adam(params, lr=lr)
loader = torch.utils.data.DataLoader(
    ds, batch_size=256, shuffle=True, generator=torch.Generator().manual_seed(0)
)
gsm, dp_opt, _, dp_loader = mechanism.record_level(
    model, opt, loader, sigma=0.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed
)
it = iter(dp_loader)
for s in range(steps):
    ids, mask, tgt = next(it)
    dp_opt.zero_grad(set_to_none=True)
    loss = loss_fn.batch_loss(gsm, ids, mask, tgt)
    loss.backward()
    nr = torch.stack([p.grad_sample.reshape(p.grad_sample.shape[0], -1).norm(dim=1) for p in params], 1).norm(
        dim=1
    )
    dp_opt.step()
    gsm.eval()
    with torch.no_grad():
        logits = gsm(input_ids=ids, attention_mask=mask).logits
    gsm.train()
    pred1 = (logits.argmax(1) == 1).float().mean().item()
    print(
        f"step {s} B={ids.size(0)} loss {loss.item():.3f} norm med {nr.median():.3f} max {nr.max():.3f} clipped {(nr > C).float().mean():.2f} pred1 {pred1:.2f}",
        flush=True,
    )
