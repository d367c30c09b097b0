"""train.secure_rng: the mechanism's noise and sampling come from a secret OS-entropy seed (two runs of the same
config differ; seeded runs repeat exactly), Opacus' secure_mode Gaussian is on, the card says which, and no
noise seed reaches run.json or the report of a secure run."""

import dataclasses
import json

import torch

from dpaudit.tasks import sentiment
from dpaudit.trainers import engine

TEXTS = ["a fine film", "dull and long", "great fun", "My account number is 123456.", "the worst", "ok"]


def _train(factory, **kw):
    model, tok = factory()
    records = [sentiment.encode_text(TEXTS[i % len(TEXTS)], tok, 32) for i in range(24)]
    cfg = engine.EngineConfig(target_epsilon=8.0, batch_size=6, epochs=1, lr=1e-2, **kw)
    model, _ = engine.train(model, records, cfg, tok.pad_token_id, 32)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def test_seeded_runs_repeat_and_secure_runs_do_not(tiny_model_factory, monkeypatch):
    a, b = _train(tiny_model_factory), _train(tiny_model_factory)
    assert torch.equal(a, b)  # the published seed regenerates the noise
    seen = []
    real = engine.secure_noise

    def spy(opt, cfg):
        out = real(opt, cfg)
        seen.append(opt.secure_mode)
        return out

    monkeypatch.setattr(engine, "secure_noise", spy)
    c, d = _train(tiny_model_factory, secure_rng=True), _train(tiny_model_factory, secure_rng=True)
    assert not torch.equal(c, d) and not torch.equal(c, a)  # the seed is fresh and secret each time
    assert seen == [True, True]  # Opacus' floating-point-safe Gaussian


def test_secure_run_writes_no_noise_seed(tmp_path):
    from dpaudit.cli import main
    from tests.settings import TINY_RUN

    cfg = TINY_RUN.replace("[canaries]", "[train]\nepochs = 1\nsecure_rng = true\n[canaries]") + \
        '[[variants]]\nname = "dp"\ntarget_epsilon = 8\n'
    (tmp_path / "cfg.toml").write_text(cfg)
    assert main(["run", str(tmp_path / "cfg.toml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    ck = tmp_path / "out" / "dp" / "checkpoint"
    card = json.loads((ck / "privacy_card.json").read_text())
    assert card["extra"]["rng"]["mode"] == "secure" and "seed" not in card["extra"]["rng"]
    run = json.loads((ck / "run.json").read_text())
    assert run["seeds"]["mechanism"].startswith("secret")
    tr = run["train_result"]  # un-noised statistics of the private data are not released either
    assert tr["loss_per_step"] is None and tr["clipping"] is None and "un-noised" in tr["withheld"]
    report = json.loads((tmp_path / "out" / "dp" / "report" / "report.json").read_text())
    assert report["claim"]["rng"]["mode"] == "secure"
    assert report["reproducibility"]["seeds"]["mechanism"].startswith("secret")
    assert "Noise: secure" in (tmp_path / "out" / "dp" / "report" / "REPORT.md").read_text()


def test_seeded_card_says_it_is_not_for_release(tiny_model_factory):
    from dpaudit.trainers.fit import rng_extra

    eng = dataclasses.replace(engine.EngineConfig(target_epsilon=8.0), seed=5)
    assert rng_extra(eng)["rng"] == {"mode": "seeded", "seed": 5, "note": rng_extra(eng)["rng"]["note"]}
    assert "not for release" in rng_extra(eng)["rng"]["note"]
