"""`dpaudit run CONFIG --dry-run` (dpaudit/run/dry_run.py): every paper config of configs/paper/ resolves its plan with
small stand-in models of the same architectures (no weights read, nothing written), and the plan is the one the
trainer would run."""

import json
import math
import re
from pathlib import Path

import pytest
import torch

from dpaudit import accounting
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.run import dry_run
from dpaudit.tasks import models
from dpaudit.tasks.model_spec import ModelSpec
from tests.settings import TINY_RUN

ROOT = Path(__file__).resolve().parents[2]
PAPER = sorted((ROOT / "configs" / "paper").glob("*.toml"))
LMO = '''
[train]
method = "lmo_dp"
delta = 1e-5
batch_size = 24
[train.lmo]
noise = {a1 = 0.3, a2 = 0.2, a3 = 0.5, gamma_k = 2.0, gamma_theta = 0.5, exp_rate = 5.0, u_low = 0.5, u_high = 1.5}
[[variants]]
name = "lmo"
target_epsilon = 3.0
'''



@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """models/gpt2, models/roberta-base and models/roberta-large as small models of those architectures."""
    from transformers import RobertaConfig, RobertaModel

    d = tmp_path_factory.mktemp("paper")
    gpt, tok = models.build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=512))
    gpt.save_pretrained(d / "models" / "gpt2")
    tok.save_pretrained(d / "models" / "gpt2")
    torch.manual_seed(0)
    rob = RobertaModel(RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=300, pad_token_id=tok.eos_token_id))
    for name in ("roberta-base", "roberta-large"):
        rob.save_pretrained(d / "models" / name)
        tok.save_pretrained(d / "models" / name)
    # E2E's references must be read to be counted: 60 synthetic meaning representations stand in for the file
    import json

    from dpaudit.tasks import table2text

    (d / "data" / "e2e").mkdir(parents=True)
    rows = [{"mr": mr, "ref": ref} for mr, refs in table2text.generate(60, 0) for ref in refs]
    (d / "data" / "e2e" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_there_is_a_paper_config_per_seed_paper():
    assert [p.stem for p in PAPER] == ["chua_userlevel", "dp_frost_sst2_roberta", "li_e2e_gpt2", "li_sst2_roberta",
                                       "lmo_dp_sst2_roberta", "pmixed_wikitext_gpt2"]
    for p in PAPER:
        assert re.search(r"^# .*[Pp]aper", p.read_text(), flags=re.M), p  # the paper's numbers, in a comment


@pytest.mark.parametrize("path", [p for p in PAPER if p.stem != "lmo_dp_sst2_roberta"], ids=lambda p: p.stem)
def test_paper_configs_dry_run_with_stand_in_models(path, stand_ins, monkeypatch, capsys):
    monkeypatch.chdir(stand_ins)  # the configs name models/... and data/... relative to where they run
    plans, notes = dry_run.plan(path)
    out = dry_run.render(plans, notes)
    assert ("the data was not read" in out) == (path.stem != "li_e2e_gpt2") and "GiB" in out
    for p in plans:
        if p.method in ("dp_adam", "user_dp_sgd", "group_privacy") and p.claim is not None:
            assert p.claim <= p_target(path, p.name) + 1e-9  # never above the target the card will claim
            assert p.steps >= 1 and 0 < p.sample_rate <= 1


def p_target(path: Path, variant: str) -> float:
    from dpaudit.run import config

    return next(v.trainer.engine.target_epsilon for v in config.load(path).variants if v.name == variant)


def test_dry_run_plan_is_what_the_engine_would_run(tmp_path, capsys):
    """tiny.toml: the plan's q, steps and sigma are the engine's record plan and calibration."""
    from dpaudit.run import config
    from dpaudit.trainers import engine

    plans, notes = dry_run.plan(ROOT / "configs" / "tiny.toml")
    cfg = config.load(ROOT / "configs" / "tiny.toml")
    dp = next(p for p in plans if p.name == "dp-eps1")
    eng = next(v for v in cfg.variants if v.name == "dp-eps1").trainer.engine
    rp = engine.record_plan(dp.units, eng)
    assert (dp.batch, dp.sample_rate, dp.steps, dp.delta) == (rp.batch, rp.sample_rate, rp.steps, rp.delta)
    sigma = accounting.calibrate_sigma(1.0, rp.delta, rp.sample_rate, rp.steps, accountant=eng.accountant)
    assert f"σ = {sigma:.4g}" in dp.noise and dp.claim <= 1.0
    assert dp.params == dp.trainable > 0 and dp.memory_gb > 0
    nonpriv = next(p for p in plans if p.name == "non-private")
    assert nonpriv.claim is None and math.isclose(nonpriv.memory_gb * 2 ** 30, 16 * nonpriv.params)
    assert main(["run", str(ROOT / "configs" / "tiny.toml"), "--dry-run"]) == 0
    assert "dp-eps1" in capsys.readouterr().out
    assert main(["run", str(ROOT / "configs" / "tiny.toml")]) == 2  # no --out and no --dry-run


def test_dry_run_resolves_lmo_and_frost_noise(tmp_path):
    """LMO-DP's calibrated Laplace mixture and DP-FROST's two sigmas, as their trainers calibrate them (a fixed
    LMO noise shape scaled to the target; the paper config's full search is the same call, minutes long)."""
    cfg = tmp_path / "lmo.toml"
    cfg.write_text(TINY_RUN + LMO)
    (p,), _ = dry_run.plan(cfg)
    assert p.method == "lmo_dp" and "LMO Laplace mixture (lmo_paper)" in p.noise and p.claim <= 3.0 + 1e-6
    cfg.write_text(TINY_RUN + """
[train]
method = "dp_frost"
delta = 1e-5
batch_size = 24
[[variants]]
name = "frost"
target_epsilon = 2.0
""")
    (p,), _ = dry_run.plan(cfg)
    assert p.method == "dp_frost" and "σ_SGD" in p.noise and "σ_selection" in p.noise


def test_the_dry_run_asks_the_method_and_never_plans_one_as_another(tmp_path, monkeypatch):
    """The plan comes from the method's registry entry (trainers/methods.py, issue wave 5 · 0/5 item 2): a method
    with a plan of its own is shown as it states it; one that states none is refused in one line, never planned as
    DP-SGD (the wrong sigma and claim the dry run printed for a new method before)."""
    from dpaudit.trainers import methods, planning

    cfg = tmp_path / "lmo.toml"
    cfg.write_text(TINY_RUN + LMO)
    seen = []

    def own_plan(cfg, variant, n_records, users, manifest):
        seen.append((variant.name, n_records))
        return planning.MechanismPlan("record", n_records, 7, 7 / n_records, 11, 1e-5, "its own noise", 2.5)

    monkeypatch.setitem(methods.REGISTRY, "lmo_dp", methods.Method("lmo_dp", object(), snapshots=False, plan=own_plan))
    (p,), _ = dry_run.plan(cfg)
    assert seen == [("lmo", p.units)] and (p.batch, p.steps, p.noise, p.claim) == (7, 11, "its own noise", 2.5)
    monkeypatch.setitem(methods.REGISTRY, "lmo_dp", methods.Method("lmo_dp", object(), snapshots=False))
    with pytest.raises(DpauditError, match="states no plan of its mechanism") as e:
        dry_run.plan(cfg)
    assert "\n" not in str(e.value)
    assert main(["run", str(cfg), "--dry-run"]) == 2


_FSDP = 'grad_sample_mode = "ghost_fsdp"\n'


@pytest.mark.parametrize("extra,needle", [
    (_FSDP + 'gradient_canary_coordinates = "block"\n', "GPT-2's Conv1D"),
    (_FSDP + 'gradient_canary_coordinates = "block"\ntrainable = "lora"\n', "trainable = 'lora' is not supported"),
    (_FSDP, "gradient_canary_coordinates = 'block'"),
], ids=["ghost_fsdp on GPT-2", "ghost_fsdp with LoRA", "ghost_fsdp with model-coordinate canaries"])
def test_dry_run_refuses_what_the_sharded_run_refuses(extra, needle, tmp_path):
    """--dry-run answers for the run: a variant the sharded run would refuse (under torchrun) is refused here,
    in one line, not planned."""
    text = (ROOT / "configs" / "tiny.toml").read_text().replace("gradient_canaries = 500\n",
                                                                 "gradient_canaries = 500\n" + extra)
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(DpauditError, match=re.escape(needle)) as e:
        dry_run.plan(tmp_path / "c.toml", ("dp-eps1",))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("damage,needle", [
    (lambda d: (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()),
                                                          "auto_map": {"AutoModel": "x.Y"}})), "auto_map"),
    (lambda d: [f.unlink() for f in d.glob("*.safetensors")] and (d / "pytorch_model.bin").write_bytes(b"x"),
     "never unpickles"),
], ids=["auto_map", "pickle weights only"])
def test_dry_run_refuses_a_model_folder_the_run_refuses(damage, needle, tmp_path, tiny_model_factory):
    model, tok = tiny_model_factory()
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    damage(tmp_path / "m")
    text = (ROOT / "configs" / "tiny.toml").read_text()
    model_section = text[text.index("[model]"):text.index("[canaries]")]
    text = text.replace(model_section, f'[model]\npath = "{tmp_path / "m"}"\nmax_len = 48\n\n')
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(DpauditError, match=needle):
        dry_run.plan(tmp_path / "c.toml", ("dp-eps1",))


def test_a_step_count_past_the_cap_is_refused_before_any_work(tmp_path):
    """A non-private variant has no accountant to cap its steps: 10^9 epochs are refused in one line by the plan
    (and by the run's preflight) instead of training for ever."""
    text = (ROOT / "configs" / "tiny.toml").read_text().replace("epochs = 4", "epochs = 1000000000")
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(DpauditError, match="more than 1e\\+08; lower train.epochs"):
        dry_run.plan(tmp_path / "c.toml", ("non-private",))
    assert main(["run", str(tmp_path / "c.toml"), "--out", str(tmp_path / "out"), "--variant", "non-private",
                 "--quiet"]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("config,variants,reports", [
    ("userlevel_chitchat", ("group-eps8", "group-eps1", "userwise-eps8"), "userlevel_chitchat"),
    ("dp_frost_sentiment", ("frost-eps1-rdp", "random-eps0p5"), "dp_frost_sentiment"),
    ("lmo_dp_sentiment", ("lmo-eps3", "laplace-fixed-eps0p63", "gauss-eps3"), "lmo_dp"),
    ("pmixed_chitchat", ("pmixed-eps8", "dp-lora-eps8"), "pmixed"),
    ("demo", ("dp-eps8",), "demo"),
], ids=["user-level", "dp_frost", "lmo_dp", "pmixed", "dp_adam"])
def test_the_plan_is_the_noise_and_claim_its_committed_card_records(config, variants, reports):
    """The dry run's sigma and claim are the card's, for the methods whose claim is not the plain Gaussian's. Group
    privacy trains record-level DP-SGD at the record-level target whose conversion to groups of k is the user's
    (epsilon / k, and a delta divided by the lemma's sum): the dry run printed the sigma of the user-level target
    (0.8163 against the 4.228 the run trained with, at epsilon 8 and k = 8). User-wise DP-SGD and DP-FROST printed
    their target (8.0) where the card claims what the accountant gives at the calibrated noise (7.99)."""
    plans, _ = dry_run.plan(ROOT / "configs" / f"{config}.toml", variants)
    assert len(plans) == len(variants)
    for p in plans:
        card = json.loads((ROOT / "reports" / reports / p.name / "checkpoint" / "privacy_card.json").read_text())
        for sigma in (e["noise_multiplier"] for e in card["mechanism"]["events"] if "noise_multiplier" in e):
            assert f"{sigma:.4g}" in p.noise, (p.name, p.noise, sigma)
        if card.get("method") == "group_privacy":
            assert f"record-level ε = {card['extra']['record_level']['epsilon']:.4g}" in p.noise, p.noise
        # to the accountants' float reproducibility across CPUs: an AMD EPYC without AVX-512 gave the user-level and
        # LMO claims 1e-8 apart from the committed cards (PRV's own error is 1e-2); target vs claim differ by 1e-4
        assert math.isclose(p.claim, card["claim"]["epsilon"], rel_tol=1e-6), (p.name, p.claim, card["claim"])
        assert p.delta == card["claim"]["delta"]


def test_the_dry_run_says_a_cpu_without_bf16_trains_the_baseline_in_float32(monkeypatch):
    """configs/demo.toml's baseline asks for bf16 autocast; on a CPU that only emulates bf16 the run trains in float32
    (dpaudit.device.bf16_autocast), and the dry run says so before any training."""
    from dpaudit import device

    monkeypatch.setattr(device, "cpu_bf16_native", lambda: False)
    _, notes = dry_run.plan(ROOT / "configs" / "demo.toml", ("non-private",))
    assert any(n.startswith("non-private: train.autocast = 'bf16' not applied") and "float32 instead" in n
               for n in notes), notes
    monkeypatch.setattr(device, "cpu_bf16_native", lambda: True)
    _, notes = dry_run.plan(ROOT / "configs" / "demo.toml", ("non-private",))
    assert not any("autocast" in n for n in notes), notes
