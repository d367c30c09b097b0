"""[model] path: any Hugging Face model folder, for every method that applies (issue wave 3 · 3/6, item 1).

Bundled models loaded by path are the bundled models; a Llama-style and a Qwen2-style causal LM (tied
embeddings) and a BERT encoder that the tests build and save train under dp_adam (full, LoRA with peft's
default targets, ghost clipping), DP-FROST, LMO-DP and user-level DP; bad folders are one line of bad input."""

import json
import tomllib

import pytest
import torch

from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.run import config
from dpaudit.tasks import models
from dpaudit.tasks.model_spec import ModelSpec


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from transformers import (
        BertModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    d = tmp_path_factory.mktemp("models")
    tok = models.public_bpe_tokenizer(512)
    ids = dict(bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    small = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=64)
    torch.manual_seed(0)
    for name, model in (("llama", LlamaForCausalLM(LlamaConfig(**small, num_key_value_heads=1, **ids,
                                                                     tie_word_embeddings=False))),
                        ("qwen2", Qwen2ForCausalLM(Qwen2Config(**small, num_key_value_heads=1, **ids,
                                                                 tie_word_embeddings=True)))):
        model.save_pretrained(d / name)
        tok.save_pretrained(d / name)
    bert, btok = models.build(ModelSpec(name="tiny-bert", n_embd=32, n_layer=2, n_head=2, max_len=32))
    BertModel(bert.config).save_pretrained(d / "bert")  # an encoder without a head
    btok.save_pretrained(d / "bert")
    gpt, gtok = models.build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32))
    gpt.save_pretrained(d / "tiny-gpt2")
    gtok.save_pretrained(d / "tiny-gpt2")
    return d


def _run(tmp_path, text: str, name: str = "out") -> dict:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(text)
    assert main(["run", str(cfg), "--out", str(tmp_path / name), "--quiet"]) == 0
    out = {}
    for f in (tmp_path / name).glob("*/report/report.json"):
        out[f.parent.parent.name] = json.loads(f.read_text())
    return out


SENTIMENT = """
[task]
n_train = 60
n_test = 20
[model]
path = "{path}"
max_len = 32
[canaries]
m = 10
[train]
epochs = 1
batch_size = 16
delta = 1e-5
lr = 5e-3
[evaluate]
attacks = ["loss"]
"""


def test_a_bundled_model_by_path_is_the_bundled_model(folders):
    by_name, _ = models.build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32))
    by_path, tok = models.build(ModelSpec(path=str(folders / "tiny-gpt2"), max_len=32))
    assert len(tok) == 512 and by_path.training
    for (n, a), (_, b) in zip(by_name.named_parameters(), by_path.named_parameters()):
        assert torch.equal(a, b), n


def test_llama_style_model_trains_full_lora_and_ghost(folders, tmp_path):
    text = SENTIMENT.format(path=folders / "llama") + "".join(
        f'[[variants]]\nname = "{n}"\ntarget_epsilon = 4.0\n{extra}\n'
        for n, extra in (("full", ""), ("lora", 'trainable = "lora"'), ("ghost", 'grad_sample_mode = "ghost"')))
    reps = _run(tmp_path, text)
    assert sorted(reps) == ["full", "ghost", "lora"]
    for r in reps.values():
        assert r["verdict"]["accounting"]["status"] == "verified"
    run = json.loads((tmp_path / "out" / "lora" / "checkpoint" / "run.json").read_text())
    assert run["model"] == {"name": "local", "max_len": 32, "init_seed": 0, "pooling": "cls",
                            "path": str(folders / "llama")}
    ada = json.loads((tmp_path / "out" / "lora" / "checkpoint" / "model" / "adapter_config.json").read_text())
    assert sorted(ada["target_modules"]) == ["q_proj", "v_proj"]  # peft's default for llama


@pytest.mark.parametrize("method", ["dp_frost", "lmo_dp"])
def test_frost_and_lmo_on_a_qwen2_style_model(folders, tmp_path, method):
    section = {"dp_frost": "[train.frost]\ngamma = 0.3\nsample_rate = 0.25\nrounds = 2\n",
               "lmo_dp": "[train.lmo]\nnoise = {a1 = 0.3, a2 = 0.2, a3 = 0.5, gamma_k = 2.0, gamma_theta = 0.5, "
                         "exp_rate = 5.0, u_low = 0.5, u_high = 1.5}\n"}[method]
    text = SENTIMENT.format(path=folders / "qwen2").replace("[train]\n", f'[train]\nmethod = "{method}"\n')
    text = text.replace("[evaluate]", section + "[evaluate]") + '[[variants]]\nname = "v"\ntarget_epsilon = 4.0\n'
    reps = _run(tmp_path, text)
    assert reps["v"]["claim"]["epsilon"] == pytest.approx(4.0, abs=0.05)


def test_user_level_dp_on_a_llama_style_model(folders, tmp_path):
    text = f"""
[task]
name = "userlm"
n_train = 12
n_test = 4
[model]
path = "{folders / 'llama'}"
max_len = 32
[canaries]
m = 10
[train]
epochs = 1
batch_size = 4
delta = 1e-5
user_cap = 2
[evaluate]
attacks = ["loss"]
[[variants]]
name = "user"
method = "user_dp_sgd"
target_epsilon = 4.0
"""
    reps = _run(tmp_path, text)
    assert reps["user"]["claim"]["unit"] == "user"


def test_an_encoder_gets_a_seeded_head(folders, tmp_path):
    spec = ModelSpec(path=str(folders / "bert"), max_len=32)
    assert spec.kind == "encoder" and spec.is_classifier
    a, _ = models.build(spec)
    b, _ = models.build(spec)
    assert torch.equal(a.classifier.weight, b.classifier.weight)  # init_seed fixes the new head
    text = f"""
[task]
n_train = 60
n_test = 20
objective = "classifier"
[model]
path = "{folders / 'bert'}"
max_len = 32
[canaries]
m = 10
labels = 2
[train]
epochs = 1
batch_size = 16
delta = 1e-5
[[variants]]
name = "head"
trainable = "head"
target_epsilon = 4.0
"""
    reps = _run(tmp_path, text)
    assert "accuracy" in reps["head"]["metrics"]


def test_bad_model_paths_are_one_line_errors(folders, tmp_path):
    def parse(model: str):
        return config.parse(tomllib.loads(f"[model]\n{model}\n[[variants]]\nname = 'a'\n"))

    with pytest.raises(DpauditError, match="not a folder"):
        parse(f'path = "{tmp_path / "nowhere"}"')
    with pytest.raises(DpauditError, match="offline"):
        parse('path = "some-org/some-model"')  # the suite runs with HF_HUB_OFFLINE=1
    with pytest.raises(DpauditError, match="both 'name' and 'path'"):
        parse(f'name = "tiny-gpt2"\npath = "{folders / "llama"}"')
    (tmp_path / "noarch").mkdir()
    (tmp_path / "noarch" / "config.json").write_text("{}")
    with pytest.raises(DpauditError, match="architectures"):
        parse(f'path = "{tmp_path / "noarch"}"')
    with pytest.raises(DpauditError, match="vocab_size applies to"):
        parse(f'path = "{folders / "llama"}"\nvocab_size = 100')
    with pytest.raises(DpauditError, match="exceeds the context"):
        models.build(ModelSpec(path=str(folders / "llama"), max_len=128))


def test_docs_configs_parse_with_a_stand_in_model(folders):
    """Every TOML block of docs/your_model.md is a valid config once its folder names a real model."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "your_model.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 7
    methods = set()
    for b in blocks:
        b = b.replace('"my-model"', f'"{folders / "llama"}"').replace('"my-encoder"', f'"{folders / "bert"}"')
        cfg = config.parse(tomllib.loads(b))
        methods |= {v.trainer.method for v in cfg.variants}
        assert cfg.model.name == "local"
    assert methods == {"dp_adam", "user_dp_sgd", "group_privacy", "dp_frost", "lmo_dp", "pmixed"}


def test_an_architecture_the_per_sample_machinery_cannot_serve_is_one_line_and_lora_trains_it(tmp_path, capsys):
    """OPT's learned positions are called with an integer that Opacus' hooks and ghost clipping take for a tensor:
    the first step failed with AttributeError (exit 3, a "dpaudit bug"). Now one line naming the machinery and the
    ways round it, nothing written; its own advice (LoRA, the positions frozen) trains it."""
    from transformers import OPTConfig, OPTForCausalLM

    tok = models.public_bpe_tokenizer(512)
    torch.manual_seed(0)
    OPTForCausalLM(OPTConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                             ffn_dim=64, max_position_embeddings=64, word_embed_proj_dim=32)).save_pretrained(tmp_path / "opt")
    tok.save_pretrained(tmp_path / "opt")
    base = SENTIMENT.format(path=tmp_path / "opt")
    cfg = tmp_path / "hooks.toml"
    cfg.write_text(base.replace("[train]\n", '[train]\ngrad_sample_mode = "hooks"\n')
                   + '[[variants]]\nname = "dp"\ntarget_epsilon = 4.0\n')
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(tmp_path / "hooks"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "the first training step failed in Opacus' per-sample gradients" in err and "trainable = 'lora'" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "hooks").exists()
    reps = _run(tmp_path, base.replace("[train]\n", '[train]\ngrad_sample_mode = "hooks"\ntrainable = "lora"\n')
                + '[[variants]]\nname = "dp"\ntarget_epsilon = 4.0\n', "lora")
    assert reps["dp"]["verdict"]["accounting"]["status"] == "verified"


def test_a_failure_outside_the_per_sample_machinery_stays_an_internal_error():
    from dpaudit.trainers import step_failure

    def ours():
        raise AttributeError("a dpaudit bug")
    try:
        ours()
    except AttributeError as e:
        assert step_failure.where(e) is None and step_failure.explained(e, "the first training step") is None


def test_a_sentencepiece_tokenizer_without_its_package_names_the_package(tmp_path):
    """A Llama 2 or T5 folder as the hub long held them (tokenizer.model, no tokenizer.json): transformers' own
    error named tiktoken. The line names sentencepiece and the two fixes."""
    import importlib.util

    if importlib.util.find_spec("sentencepiece") is not None:
        pytest.skip("sentencepiece is installed here: such a folder loads")
    from dpaudit.tasks.models import load_tokenizer, public_bpe_tokenizer

    public_bpe_tokenizer(256).save_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x05hello")
    conf = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**conf, "tokenizer_class": "LlamaTokenizer"}))
    with pytest.raises(DpauditError, match=r"SentencePiece model \(tokenizer.model\) .*pip install sentencepiece"):
        load_tokenizer(tmp_path)
