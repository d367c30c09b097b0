"""Direct engine runs on MiniLM LoRA: accuracy on a validation split held out from training."""

import json
import math
import sys
import time

import numpy as np
import torch

from dpaudit.tasks import models, sentiment
from dpaudit.trainers import engine, trainable
from dpaudit.trainers.engine import EngineConfig

torch.set_num_threads(2)
sigma_override = float(sys.argv[1])  # <0: calibrate to eps
C = float(sys.argv[2])
lr = float(sys.argv[3])
mode = sys.argv[4]
tr = sys.argv[5]
B = int(sys.argv[6])
epochs = float(sys.argv[7])
n_train = int(sys.argv[8])
eps = float(sys.argv[9]) if len(sys.argv) > 9 else 1000.0
data = sentiment.load(n_train=n_train, validation=500)
spec = models.ModelSpec(name="minilm-l6", max_len=48)
model, tok = models.build(spec)
model, base = trainable.apply(model, tr)
recs = [sentiment.encode_example(e, tok, "classifier", 48) for e in data.train]
if sigma_override >= 0:
    engine.accounting.calibrate_sigma = lambda *a, **k: sigma_override
    engine.accounting.compute = lambda *a, **k: type("R", (), {"epsilon": math.inf})()
    engine.SubsampledGaussian = lambda **k: None
cfg = EngineConfig(
    target_epsilon=eps,
    delta=1e-5,
    epochs=epochs,
    batch_size=B,
    lr=lr,
    clipping_norm=C,
    grad_sample_mode=mode,
    max_physical_batch_size=64,
)
t = time.time()
try:
    m, res = engine.train(model, recs, cfg, tok.pad_token_id, 48)
except Exception as e:
    print("ERR", e)
    raise
acc = sentiment.accuracy(m, tok, data.test, max_len=48)

L = [x for x in res.losses if x == x]
print(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "acc": acc,
            "sigma": res.noise_multiplier,
            "steps": res.steps,
            "loss_first": float(np.mean(L[:8])),
            "loss_last": float(np.mean(L[-8:])),
            "mean_fraction_clipped": (res.clipping or {}).get("mean_fraction_clipped"),
            "s": round(time.time() - t),
        }
    )
)
