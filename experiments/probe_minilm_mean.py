"""DP linear probe on frozen MiniLM-L6 features, to choose the new head's learning rate without the test
split: the same validation split as sweep.toml (500 snippets held out from the training split), features
from the pretrained encoder (mean-pooled last hidden states, or BERT's [CLS] pooler), a 2-class linear head
trained by DP-Adam exactly as the engine does it for a head (Poisson sampling at q = B/N, per-example
clipping at C = 0.1, Gaussian noise sigma*C once per step, divided by B; sigma from Opacus' PRV accountant
at delta = 1e-5). The per-example gradient of a linear head is closed-form, (p - y) x^T and (p - y).
Run: `python experiments/probe_minilm_mean.py > reports/li_repro_minilm_mean_pilot/probe.txt`"""

import math

import torch
from opacus.accountants.utils import get_noise_multiplier

from dpaudit.tasks import models, sentiment


@torch.inference_mode()
def features(model, tok, examples):
    mean, cls = [], []
    for i in range(0, len(examples), 128):
        enc = tok(
            [e["sentence"] for e in examples[i : i + 128]],
            truncation=True,
            max_length=48,
            padding=True,
            return_tensors="pt",
        )
        h = model.bert(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        mean.append((h * m).sum(1) / m.sum(1))
        cls.append(model.bert.pooler(h))
    return torch.cat(mean), torch.cat(cls)


def dp_adam_head(X, y, Xte, yte, eps, B, epochs, lr, C=0.1, delta=1e-5, seed=0):
    N = len(y)
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(2, X.shape[1], generator=g) * 0.02
    b = torch.zeros(2)
    params = [W, b]
    m1 = [torch.zeros_like(p) for p in params]
    m2 = [torch.zeros_like(p) for p in params]
    q = B / N
    T = int(math.ceil(epochs / q))
    sigma = (
        0.0
        if math.isinf(eps)
        else get_noise_multiplier(
            target_epsilon=eps, target_delta=delta, sample_rate=q, steps=T, accountant="prv"
        )
    )
    for t in range(1, T + 1):
        idx = (torch.rand(N, generator=g) < q).nonzero().squeeze(1)
        x, yy = X[idx], y[idx]
        r = torch.softmax(x @ W.T + b, -1)
        r[torch.arange(len(yy)), yy] -= 1
        gW, gb = r[:, :, None] * x[:, None, :], r
        factor = torch.clamp(C / (torch.sqrt((gW**2).sum((1, 2)) + (gb**2).sum(1)) + 1e-6), max=1.0)
        grads = [
            ((gW * factor[:, None, None]).sum(0) + sigma * C * torch.randn(W.shape, generator=g)) / B,
            ((gb * factor[:, None]).sum(0) + sigma * C * torch.randn(b.shape, generator=g)) / B,
        ]
        for i, (p, gr) in enumerate(zip(params, grads)):
            m1[i] = 0.9 * m1[i] + 0.1 * gr
            m2[i] = 0.999 * m2[i] + 0.001 * gr**2
            p -= lr * (m1[i] / (1 - 0.9**t)) / ((m2[i] / (1 - 0.999**t)).sqrt() + 1e-8)
    logits = Xte @ W.T + b
    return (
        float((logits.argmax(-1) == yte).float().mean()),
        float(torch.nn.functional.cross_entropy(logits, yte)),
        sigma,
        T,
    )


def main():
    torch.manual_seed(0)
    data = sentiment.load(validation=500)
    model, tok = models.build(models.ModelSpec(name="minilm-l6", max_len=48))
    model.eval()
    tr_mean, tr_cls = features(model, tok, data.train)
    va_mean, va_cls = features(model, tok, data.test)
    y = torch.tensor([e["label"] for e in data.train])
    yv = torch.tensor([e["label"] for e in data.test])
    print(
        f"N = {len(y)} training snippets, {len(yv)} validation; validation majority class "
        f"{max(float(yv.float().mean()), 1 - float(yv.float().mean())):.3f}"
    )
    print(
        "features | B | epochs | steps | head lr | validation accuracy (loss) at eps = inf / 8 / 3 / 1 | sigma at 8 / 3 / 1"
    )
    for name, X, Xv in (("mean", tr_mean, va_mean), ("cls", tr_cls, va_cls)):
        for B, epochs in ((256, 1), (256, 3), (512, 2)):
            for lr in (1e-3, 1e-2, 3e-2):
                runs = [dp_adam_head(X, y, Xv, yv, e, B, epochs, lr) for e in (math.inf, 8.0, 3.0, 1.0)]
                cells = " / ".join(f"{a:.3f} ({loss:.2f})" for a, loss, _, _ in runs)
                sig = " / ".join(f"{s:.3f}" for _, _, s, _ in runs[1:])
                print(f"{name} | {B} | {epochs} | {runs[0][3]} | {lr:g} | {cells} | {sig}", flush=True)


if __name__ == "__main__":
    main()
