"""train.autocast = "bf16" (a non-private run's forward and backward under bfloat16 autocast, for speed: AMX on
CPUs that have it, tensor cores on GPUs): the step really runs in bf16 while the weights, their gradients and the
optimizer stay float32, the run learns what the float32 run learns, and a private run refuses it in one line (the
DP step's per-sample norms, clipping and noise run in float32)."""

import pytest
import torch

from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment
from dpaudit.trainers import engine, units

TEXTS = ["a fine film", "dull and long , with nothing to say", "great fun", "the worst", "ok", "see you later"]


def test_the_setting_is_checked_and_refused_for_a_private_run():
    assert engine.EngineConfig().autocast == "off"
    with pytest.raises(DpauditError, match="train.autocast must be one of off, bf16, got 'fp16'"):
        engine.EngineConfig(autocast="fp16")
    with pytest.raises(DpauditError, match="applies to non-private runs only"):
        engine.EngineConfig(target_epsilon=8.0, autocast="bf16")


def test_the_step_runs_in_bf16_and_trains_like_float32(tiny_model_factory):
    seen = []
    losses = {}
    for mode in ("off", "bf16"):
        model, tok = tiny_model_factory()
        hook = model.lm_head.register_forward_hook(lambda m, i, out, mode=mode: seen.append((mode, out.dtype)))
        records = [sentiment.encode_text(TEXTS[i % len(TEXTS)], tok, 32) for i in range(12)]
        cfg = engine.EngineConfig(epochs=15, batch_size=4, lr=1e-2, autocast=mode)
        model, res = engine.train(model, records, cfg, tok.pad_token_id, 32)
        hook.remove()
        assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
        losses[mode] = res.losses
    assert {d for m, d in seen if m == "bf16"} == {torch.bfloat16} and {d for m, d in seen if m == "off"} == {
        torch.float32}
    end = {mode: sum(curve[-5:]) / 5 for mode, curve in losses.items()}  # the last five steps' mean loss
    for mode, curve in losses.items():  # both learn the same texts, whatever the precision (6.3 -> about 0.6)
        assert end[mode] < 0.2 * curve[0], (mode, curve)
    assert abs(end["bf16"] - end["off"]) < 0.1 * end["off"] + 0.1, end


def test_record_step_leaves_autocast_off_by_default(tiny_model_factory):
    model, tok = tiny_model_factory()
    assert units.RecordStep(model).autocast == "off"


def test_a_gpu_without_bfloat16_is_refused_in_one_line(tiny_model_factory, monkeypatch):
    model, _ = tiny_model_factory()
    monkeypatch.setattr(units, "model_device", lambda m: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(DpauditError, match="needs a GPU with bfloat16 support; cuda:0 has none"):
        units.RecordStep(model, autocast="bf16")
    units.RecordStep(model)  # float32 on the same device: fine
