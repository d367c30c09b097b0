"""train.autocast = "bf16" (a non-private run's forward and backward under bfloat16 autocast, for speed: AMX on
CPUs that have it, tensor cores on GPUs): the step really runs in bf16 while the weights, their gradients and the
optimizer stay float32, the run learns what the float32 run learns, and a private run refuses it in one line (the
DP step's per-sample norms, clipping and noise run in float32)."""

import pytest
import torch

from dpaudit import device
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


def test_the_step_runs_in_bf16_and_trains_like_float32(tiny_model_factory, monkeypatch):
    monkeypatch.setattr(device, "cpu_bf16_native", lambda: True)  # the bf16 path on every CPU (emulated: slower)
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


def test_a_cpu_without_native_bf16_trains_in_float32_and_says_so(tiny_model_factory, monkeypatch, capsys):
    """PyTorch emulates bf16 on a CPU without AVX512-BF16 or AMX (an AVX2-only CPU ran the demo's baseline at about
    24 s a step): the run trains in float32 instead, says so on stderr and records it in run.json's train_result."""
    monkeypatch.setattr(device, "cpu_bf16_native", lambda: False)
    model, tok = tiny_model_factory()
    seen = []
    model.lm_head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    records = [sentiment.encode_text(TEXTS[i % len(TEXTS)], tok, 32) for i in range(8)]
    model, res = engine.train(model, records, engine.EngineConfig(epochs=1, batch_size=4, autocast="bf16"),
                              tok.pad_token_id, 32)
    assert seen and set(seen) == {torch.float32}
    assert "train.autocast = 'bf16' not applied: this CPU has no native bfloat16" in res.precision_note
    assert res.summary()["precision_note"] == res.precision_note
    assert "note: train.autocast = 'bf16' not applied" in capsys.readouterr().err
    model, res = engine.train(model, records, engine.EngineConfig(epochs=1, batch_size=4), tok.pad_token_id, 32)
    assert res.precision_note is None  # float32 asked for: nothing to say


def test_the_decision_follows_the_cpu(monkeypatch):
    cpu = torch.device("cpu")
    assert device.bf16_autocast(cpu, "off") == ("off", None)
    monkeypatch.setattr(device, "cpu_bf16_native", lambda: True)
    assert device.bf16_autocast(cpu, "bf16") == ("bf16", None)
    monkeypatch.setattr(device, "cpu_bf16_native", lambda: False)
    used, why = device.bf16_autocast(cpu, "bf16")
    assert used == "off" and "float32 instead" in why
    monkeypatch.undo()
    import platform

    if platform.machine() == "x86_64":  # this machine's own answer is the instruction sets torch reports
        assert device.cpu_bf16_native() == bool(torch.cpu._is_avx512_bf16_supported()
                                                or torch.cpu._is_amx_tile_supported())
