"""Offline assets: found, verified, missing ones explained; SmolLM2 converted once and usable (slow)."""

import pytest

from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.tasks import assets


def test_all_assets_present(capsys):
    assert all(s.ok for s in assets.check_all()), [s for s in assets.check_all() if not s.ok]
    assert main(["assets"]) == 0
    assert "rotten-tomatoes" in capsys.readouterr().out


def test_missing_asset_says_how_to_install(monkeypatch, capsys):
    fake = assets.Asset("fake", "fake-pkg", "no_such_module_xyz", "", "nothing", no_deps=True)
    monkeypatch.setitem(assets.ASSETS, "fake", fake)
    with pytest.raises(DpauditError, match="pip install --no-deps fake-pkg"):
        assets.locate("fake")
    assert main(["assets"]) == 1
    assert "MISSING fake" in capsys.readouterr().out


def test_cache_dir_moves_with_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path / "c"))
    assert assets.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()


@pytest.mark.slow
def test_smollm2_converts_and_generates(monkeypatch, tmp_path):
    import torch

    from dpaudit.tasks import models

    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path))
    path = assets.smollm2_dir()
    assert (path / "model.safetensors").exists() and (path / "tokenizer.json").exists()
    model, tok = models.build(models.ModelSpec(name="smollm2-135m"))
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert "Paris" in tok.decode(out[0])
    # a DP-LoRA step runs on the pretrained Llama model (tied embeddings frozen under LoRA)
    from dpaudit.tasks import sentiment
    from dpaudit.trainers import engine, trainable

    model, _ = trainable.apply(model, "lora", lora_r=4, lora_alpha=8)
    recs = [sentiment.encode_example(e, tok, "lm", 32) for e in sentiment.load(n_train=16).train]
    cfg = engine.EngineConfig(target_epsilon=8.0, delta=1e-5, epochs=0.25, batch_size=4)
    model, res = engine.train(model, recs, cfg, tok.pad_token_id, 32)
    assert res.steps == 1 and res.epsilon <= 8.0 and torch.isfinite(torch.tensor(res.losses[0]))
