"""Device placement: auto/cpu/cuda resolved once, refused clearly where the machine lacks it; the engine and the
evaluator run on the parameters' device (the CUDA rows run only where a GPU is visible)."""

import math

import pytest
import torch

from dpaudit import device
from dpaudit.errors import DpauditError
from dpaudit.trainers.engine import EngineConfig

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_resolve_cpu_and_auto_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve("cpu") == torch.device("cpu")
    assert device.resolve("auto") == torch.device("cpu")
    for name in ("cuda", "cuda:0"):
        with pytest.raises(DpauditError, match="no CUDA device is visible"):
            device.resolve(name, "train.device")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "", "CPU", 0, None])
def test_unknown_device_names_are_refused(bad):
    with pytest.raises(DpauditError, match="must be auto, cpu, cuda or cuda:N"):
        device.check(bad)
    with pytest.raises(DpauditError, match="train.device"):
        EngineConfig(device=bad)


def test_dp_training_refuses_half_precision_parameters(tiny_model_factory):
    from dpaudit.trainers.engine import check_fp32

    model, _ = tiny_model_factory()
    check_fp32(list(model.parameters()), private=True)  # float32: fine
    model = model.to(torch.bfloat16)
    check_fp32(list(model.parameters()), private=False)  # non-private: any dtype
    with pytest.raises(DpauditError, match="float32"):
        check_fp32(list(model.parameters()), private=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_run_and_evaluate_refuse_cuda_here_before_any_work(tmp_path, capsys):
    from dpaudit.cli import main
    from tests.settings import TINY_RUN

    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY_RUN + "[train]\ndevice = \"cuda\"\n[[variants]]\nname = \"a\"\ntarget_epsilon = 8\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA device is visible" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert main(["evaluate", str(tmp_path), "--out", str(tmp_path / "rep"), "--device", "cuda"]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def _train_tiny(tiny_model_factory, dev: str, seed: int = 0):
    from dpaudit.tasks import sentiment
    from dpaudit.trainers import engine

    model, tok = tiny_model_factory()
    model = model.to(device.resolve(dev))
    recs = [sentiment.encode_text(e["sentence"], tok, 32) for e in sentiment.load(n_train=64).train]
    cfg = EngineConfig(target_epsilon=4.0, delta=1e-5, epochs=1, batch_size=16, lr=1e-3, seed=seed,
                       gradient_canaries=8, device=dev)
    return engine.train(model, recs, cfg, tok.pad_token_id, 32)


def test_engine_trains_on_the_parameters_device(tiny_model_factory):
    model, res = _train_tiny(tiny_model_factory, "cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert res.private and math.isfinite(res.epsilon) and len(res.losses) == res.steps


@CUDA
def test_engine_on_cuda_gives_the_same_card_and_canary_record(tiny_model_factory):
    """The mechanism (q, sigma, steps, hence the card) does not depend on the device; the run itself is
    reproducible on the same device (the noise generator lives there)."""
    m_cpu, r_cpu = _train_tiny(tiny_model_factory, "cpu")
    m_gpu, r_gpu = _train_tiny(tiny_model_factory, "cuda")
    m_gpu2, r_gpu2 = _train_tiny(tiny_model_factory, "cuda")
    assert all(p.device.type == "cuda" for p in m_gpu.parameters())
    assert (r_gpu.sample_rate, r_gpu.noise_multiplier, r_gpu.steps) == (r_cpu.sample_rate, r_cpu.noise_multiplier,
                                                                         r_cpu.steps)
    assert r_gpu.epsilon == r_cpu.epsilon
    assert len(r_gpu.gradient_canaries["scores"]) == 8
    for a, b in zip(m_gpu.parameters(), m_gpu2.parameters()):
        assert torch.allclose(a, b, atol=1e-5)
