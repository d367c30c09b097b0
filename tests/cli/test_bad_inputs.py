"""Bad and hostile inputs, one table across every command: each case exits 2 with one line on stderr naming the
problem (the `needle`), leaves nothing behind in its folder, and finishes within seconds (a hang would stop the
suite; the 60 s guard catches a slow path, it is not a performance target)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from dpaudit.cli import main
from dpaudit.errors import DpauditError
from tests.settings import TINY_MODEL, TINY_RUN

pytestmark = pytest.mark.filterwarnings("ignore")


# ---------------------------------------------------------------- fixtures: one healthy checkpoint and its report
@pytest.fixture(scope="module")
def healthy(tmp_path_factory, tiny_model_factory):
    from dpaudit import checkpoint
    from dpaudit.accounting.events import SubsampledGaussian
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.evaluation.steps import evaluate
    from dpaudit.report.write import write

    d = tmp_path_factory.mktemp("healthy")
    model, tok = tiny_model_factory()
    card = PrivacyCard(claim=Claim(epsilon=8.0, delta=1e-5), clipping_norm=1.0, expected_batch_size=10,
                       dataset_size=100, method="dp_adam",
                       events=[SubsampledGaussian(sample_rate=0.1, noise_multiplier=1.0, steps=100)])
    ck = checkpoint.write(d / "ck", model, tok, card, generate(CanaryPlan(m=20, length=4)), {})
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    write(r, d / "report")
    return d


def _mut_json(path: Path, edit) -> None:
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))


def _set(path, keys, value):
    def edit(d):
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return lambda ck: _mut_json(ck / path, edit)


def _raw(path, text):
    return lambda ck: (ck / path).write_text(text)


def _canaries(edit):
    return lambda ck: _mut_json(ck / "canaries.json", edit)


def _weights(fn):
    return lambda ck: fn(ck / "model" / "model.safetensors")


def _bytes(b: bytes):
    return _weights(lambda f: f.write_bytes(b))


def _truncate(f: Path):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _pickle_only(ck):
    (ck / "model" / "model.safetensors").unlink()
    (ck / "model" / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")


def _tensors(edit):
    """model.safetensors rewritten with ``edit(tensors)`` applied (a dict name -> tensor)."""
    def damage(ck):
        from safetensors.torch import load_file, save_file

        f = ck / "model" / "model.safetensors"
        t = load_file(f)
        edit(t)
        save_file(t, f, metadata={"format": "pt"})
    return damage


def _drop_layer(t):
    for k in [k for k in t if ".h.1." in k]:
        del t[k]


def _int8(t):
    import torch

    k = sorted(k for k in t if k.endswith("mlp.c_fc.weight"))[0]
    t[k] = t[k].to(torch.int8)


def _second_weights(ck):
    shutil.copy(ck / "model" / "model.safetensors", ck / "model" / "other.safetensors")


def _nan_weights(ck):
    from safetensors.torch import load_file, save_file

    f = ck / "model" / "model.safetensors"
    t = load_file(f)
    k = sorted(t)[0]
    t[k][0] = float("nan")
    save_file(t, f, metadata={"format": "pt"})


def _small_vocab(ck):
    _mut_json(ck / "model" / "config.json", lambda d: d.update(vocab_size=64))
    from safetensors.torch import load_file, save_file

    f = ck / "model" / "model.safetensors"
    t = {k: (v[:64].clone() if v.shape[0] == 512 else v) for k, v in load_file(f).items()}
    save_file(t, f, metadata={"format": "pt"})


def _long_canaries(ck):
    def edit(d):
        d["template"]["prefix"] = "word " * 200
        for c in d["canaries"]:
            c["text"] = d["template"]["prefix"] + c["secret"] + d["template"]["suffix"]
    _mut_json(ck / "canaries.json", edit)
    # a checkpoint from another tool (no manifest digest in its card): the context check is what refuses it
    _mut_json(ck / "privacy_card.json", lambda d: d.get("extra", {}).pop("manifest_digest", None))


def _plan_edited(d):
    """An evaluation plan written into the manifest after training (the card's digest is of the one without)."""
    from dpaudit.canaries import plan as eval_plan

    d["audit_plan"]["evaluation"] = eval_plan.planned(["loss"], "bonferroni", 0.5, 100)


def _external(edit):
    """A manifest edit on a checkpoint from another tool (no manifest digest in its card): the manifest's own
    checks are what refuse it."""
    def damage(ck):
        _mut_json(ck / "canaries.json", edit)
        _mut_json(ck / "privacy_card.json", lambda d: d.get("extra", {}).pop("manifest_digest", None))
    return damage


def _all_inserted(d):
    for c in d["canaries"]:
        c.update(inserted=True, sign=1, repetitions=1)


def _none_inserted(d):
    for c in d["canaries"]:
        c.update(inserted=False, sign=-1, repetitions=0)


def _dup(field):
    def edit(d):
        d["canaries"][1][field] = d["canaries"][0][field]
        if field == "secret":
            d["canaries"][1]["text"] = d["canaries"][0]["text"]
    return edit


def _first_inserted(edit):
    def run(d):
        edit(next(c for c in d["canaries"] if c["inserted"]), d)
    return run


def _secret_outside(c, d):
    c["secret"] = "x" * d["space"]["length"]
    c["text"] = d["template"]["prefix"] + c["secret"] + d["template"]["suffix"]


def _whitebox(scores, kind="dirac", signs=None):
    def write(ck):
        m = 20
        (ck / "gradient_canaries.json").write_text(
            json.dumps({"kind": kind, "signs": signs or [1, -1] * (m // 2), "scores": scores(m)}))
    return write


def _auto_map(ck):
    _mut_json(ck / "model" / "config.json", lambda d: d.update(auto_map={"AutoModelForCausalLM": "evil.Model"},
                                                                model_type="evil-model"))
    (ck / "model" / "evil.py").write_text("raise SystemExit('checkpoint code ran')\n")


def _py_file(ck):
    (ck / "model" / "modeling_evil.py").write_text("raise SystemExit('checkpoint code ran')\n")


def _tok_auto_map(ck):
    _mut_json(ck / "model" / "tokenizer_config.json", lambda d: d.update(auto_map={"AutoTokenizer": ["evil.Tok", None]}))


def _no_special_tokens(ck):
    """A bare BPE tokenizer: no BOS, EOS, PAD or UNK anywhere."""
    _mut_json(ck / "model" / "tokenizer_config.json",
              lambda d: [d.pop(k, None) for k in ("bos_token", "eos_token", "pad_token", "unk_token")])
    _mut_json(ck / "model" / "tokenizer.json", lambda d: d.update(added_tokens=[]))


def _bad_run_spec(ck):
    (ck / "run.json").write_text(json.dumps({"model": {"name": "tiny-gpt2", "n_embd": "wide"}}))


def _unknown_model_type(ck):
    _mut_json(ck / "model" / "config.json", lambda d: d.update(model_type="no-such-architecture"))


def _symlink_out(rel):
    """``rel`` inside the checkpoint replaced by a symlink to a copy outside it (another model could sit there)."""
    def damage(ck):
        src = ck / rel
        outside = ck.parent / "elsewhere" / rel
        outside.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(src), str(outside))
        src.symlink_to(outside.resolve(), target_is_directory=outside.is_dir())
    return damage


def _fifo(rel):
    return lambda ck: os.mkfifo(ck / rel)


def _steps_file(name, make=None):
    """A white-box record whose steps_file is ``name``; ``make(ck)`` first creates what it names."""
    def damage(ck):
        if make is not None:
            make(ck)
        m = 20
        (ck / "gradient_canaries.json").write_text(json.dumps(
            {"kind": "dirac", "signs": [1, -1] * (m // 2), "scores": [0.0] * m, "steps_file": name}))
    return damage


def _npy_header_only(ck):
    """A .npy whose header declares a (10^12, 20) float64 array (160 TB) over a few bytes."""
    import numpy as np

    header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f8")), "fortran_order": False, "shape": (10 ** 12, 20)}
    with open(ck / "steps.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\x00" * 64)


def _record_with(**entries):
    """A white-box record with ``entries`` replaced (the lists' elements are not typed by the schema of scalars)."""
    def damage(ck):
        (ck / "gradient_canaries.json").write_text(json.dumps({"kind": "dirac", "signs": [1, -1] * 10,
                                                               "scores": [0.0] * 20, **entries}))
    return damage


def _record_named(name):
    """A white-box record saved under file name ``name`` (its name becomes the test's name in every output)."""
    def damage(ck):
        (ck / name).write_text(json.dumps({"kind": "dirac", "signs": [1, -1] * 10, "scores": [0.0] * 20}))
    return damage


def _prefixed(prefix):
    """The weights saved from a training wrapper's state_dict: every name behind ``prefix``."""
    def edit(t):
        for k in list(t):
            t[prefix + k] = t.pop(k)
    return _tensors(edit)


def _no_tokenizer_files(ck):
    """The model saved without its tokenizer: transformers 5 builds an empty one from config.json alone."""
    for f in (ck / "model").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            f.unlink()


EVALUATE = [  # (id, how the healthy checkpoint is damaged, extra evaluate options, needle)
    # external shapes (a hostile round, 2026-12-01): an empty tokenizer scored every canary as no tokens and blamed
    # the canaries' template; a wrapper's state_dict was "no weights for lm_head.weight"
    ("model saved without its tokenizer", _no_tokenizer_files, [], "no usable tokenizer"),
    ("weights of an Opacus GradSampleModule", _prefixed("_module."), [], "GradSampleModule"),
    ("weights of a torch.compile module", _prefixed("_orig_mod."), [], "torch.compile"),
    ("weights of a DistributedDataParallel module", _prefixed("module."), [], "DistributedDataParallel"),
    ("model saved as final/, not model/", lambda ck: (ck / "model").rename(ck / "final"), [], "a model lies in final/"),
    ("a record's sign 1e308", _record_with(signs=[1e308] + [1, -1] * 9 + [1]), [], "'signs' (+1/-1)"),
    ("a record's online llr holding a string", _record_with(online={"llr": ["x"] * 20}), [], "online.llr"),
    ("a record whose file name carries markup", _record_named("gradient_canaries_**Verdict**<b>.json"), [],
     "rename the file"),
    ("a record whose file name carries a newline", _record_named("gradient_canaries_a\nFAIL.json"), [],
     "rename the file"),
    ("weights a symlink out of the checkpoint", _symlink_out("model/model.safetensors"), [], "outside the folder"),
    ("model folder a symlink out of the checkpoint", _symlink_out("model"), [], "outside the folder"),
    ("a FIFO in the checkpoint", _fifo("model/pipe"), [], "not a regular file"),
    ("steps_file an absolute path outside", _steps_file("/etc/hostname"), [], "points outside"),
    ("steps_file climbing out", _steps_file("../report/report.json"), [], "points outside"),
    ("steps_file naming no file", _steps_file("missing.npy"), [], "not a regular file"),
    (".npy header declaring 160 TB", _steps_file("steps.npy", _npy_header_only), [], "header declares"),
    ("auto_map in config", _auto_map, [], "auto_map"),
    ("python file beside the weights", _py_file, [], "never runs checkpoint code"),
    ("auto_map in tokenizer config", _tok_auto_map, [], "auto_map"),
    ("unknown model_type", _unknown_model_type, [], "cannot load the model"),
    ("corrupt safetensors", _bytes(b"\x00" * 64), [], "cannot load the model"),
    ("truncated safetensors", _weights(_truncate), [], "cannot load the model"),
    ("empty safetensors", _bytes(b""), [], "cannot load the model"),
    ("pickle weights only", _pickle_only, [], "never unpickles"),
    ("config.json not JSON", _raw("model/config.json", "{not json"), [], "not valid JSON"),
    ("generation_config.json with NaN", _raw("model/generation_config.json", '{"temperature": NaN}'), [],
     "non-finite"),
    ("generation_config.json a list", _raw("model/generation_config.json", "[1]"), [], "JSON object"),
    ("config.json a list", _raw("model/config.json", "[1, 2]"), [], "JSON object"),
    ("NaN weights", _nan_weights, [], "non-finite weights"),
    ("a layer's weights missing", _tensors(_drop_layer), [], "has no weights for"),
    ("config.json of a bigger model than the weights", _set("model/config.json", ["n_layer"], 40), [],
     "the config does not match the weights"),
    ("config.json with 10^5 layers", _set("model/config.json", ["n_layer"], 100000), [], "n_layer = 100000"),
    ("an extra tensor", _tensors(lambda t: t.update(extra=t[sorted(t)[0]].clone())), [], "does not have: extra"),
    ("int8 weights", _tensors(_int8), [], "not floating point"),
    ("a second .safetensors beside the weights", _second_weights, [], "expected one model.safetensors"),
    ("tokenizer larger than the model", _small_vocab, [], "tokenizer"),
    ("no EOS token for the bos_eos framing", _no_special_tokens, ["--canary-framing", "bos_eos", "--off-plan"],
     "no EOS token"),
    ("canary longer than the context", _long_canaries, [], "context"),
    ("tokenizer framing on a checkpoint of dpaudit's trainers (BOS + text + EOS)",
     lambda ck: (ck / "run.json").write_text(json.dumps({"model": {"name": "tiny-gpt2"}})),
     ["--canary-framing", "tokenizer"], "contradicts this checkpoint"),
    ("all canaries inserted", _external(_all_inserted), [], "every canary is inserted"),
    ("no canary inserted", _external(_none_inserted), [], "no canary is inserted"),
    ("duplicate canary ids", _canaries(_dup("id")), [], "share the id"),
    ("a canary user that is a list", _canaries(lambda d: d["canaries"][0].update(user=["a", "b"])), [],
     "user must be a string"),
    ("duplicate secrets", _canaries(_dup("secret")), [], "share the secret"),
    ("secret outside the space", _canaries(_first_inserted(_secret_outside)), [], "not in the declared space"),
    ("negative repetitions", _canaries(_first_inserted(lambda c, d: c.update(repetitions=-3))), [], "repetitions"),
    ("huge repetitions", _canaries(_first_inserted(lambda c, d: c.update(repetitions=10 ** 9))), [], "repetitions"),
    ("audit_plan k_pos ignored", _set("canaries.json", ["audit_plan", "k_pos"], 3), [], "k_pos/k_neg"),
    ("manifest m huge", _set("canaries.json", ["m"], 10 ** 9), [], "canaries.m"),
    ("manifest NaN", _raw("canaries.json", '{"schema_version": 1, "m": NaN}'), [], "non-finite"),
    # true where a number belongs: Python's bool is an int (true == 1), so a type check that forgets it passes
    ("canary sign true", _canaries(_first_inserted(lambda c, d: c.update(sign=True))), [], "'sign' -1 or 1"),
    ("canary inserted 1", _canaries(_first_inserted(lambda c, d: c.update(inserted=1))), [], "'inserted' true or false"),
    ("manifest guess_fraction true", _set("canaries.json", ["audit_plan", "guess_fraction"], True), [],
     "guess_fraction"),
    ("card steps true", _set("privacy_card.json", ["mechanism", "events", 0, "steps"], True), [],
     "mechanism.events[0]: steps"),
    ("card schema_version true", _set("privacy_card.json", ["schema_version"], True), [], "schema_version"),
    ("card rng seed true", _set("privacy_card.json", ["extra", "rng"], {"mode": "seeded", "seed": True}), [],
     "extra.rng.seed"),
    ("canary text edited", _canaries(lambda d: d["canaries"][0].update(text="something else")), [], "template"),
    ("evaluation plan edited after training", _canaries(_plan_edited), [], "not the manifest this model was trained with"),
    ("card epsilon Infinity", _raw("privacy_card.json", '{"schema_version": 1, "claim": {"epsilon": Infinity, '
                                                        '"delta": 1e-5}, "mechanism": {}}'), [], "non-finite"),
    ("card infinite noise multiplier", _set("privacy_card.json", ["mechanism", "events", 0, "noise_multiplier"],
                                             1e400), [], "non-finite"),
    ("card noise multiplier 1e308", _set("privacy_card.json", ["mechanism", "events", 0, "noise_multiplier"], 1e308),
     [], None),  # finite and legal: not bad input (checked apart below)
    ("card event type a list", _set("privacy_card.json", ["mechanism", "events", 0, "type"], ["x"]), [],
     "unknown privacy event type"),  # was exit 3 (unhashable type)
    ("card negative clipping norm", _set("privacy_card.json", ["mechanism", "clipping_norm"], -1), [], "clipping_norm"),
    # the entries of extra that dpaudit reads, each of its type (a hostile round, 2026-11-29: exit 3 before)
    # run.json is read against its schema wherever it is read (a hostile round, 2026-11-29: exit 3 before)
    ("run.json train_result seconds a string", _raw("run.json", '{"train_result": {"seconds": "x"}}'), [],
     "train_result/seconds"),
    ("run.json task source null", _raw("run.json", '{"task": {"name": "sentiment", "source": null}}'), [],
     "task.source"),
    ("run.json a list", _raw("run.json", "[]"), [], "a run record is a JSON object"),
    ("card claims epsilon 1e308", _set("privacy_card.json", ["claim", "epsilon"], 1e308), [], "claim.epsilon"),
    ("card extra.rng a string", _set("privacy_card.json", ["extra", "rng"], "seeded"), [], "extra.rng"),
    ("card extra.probe_runs a string", _set("privacy_card.json", ["extra", "probe_runs"], "abc"), [], "extra.probe_runs"),
    ("card extra.record_level without delta", _set("privacy_card.json", ["extra", "record_level"], {"epsilon": 1}), [],
     "extra.record_level"),
    ("card extra.manifest_digest a number", _set("privacy_card.json", ["extra", "manifest_digest"], 7), [],
     "extra.manifest_digest"),
    ("card dataset size zero", _set("privacy_card.json", ["mechanism", "dataset_size"], 0), [], "dataset_size"),
    ("card 10^9 steps", _set("privacy_card.json", ["mechanism", "events", 0, "steps"], 10 ** 9), [], "steps"),
    ("card with 10,000 events", lambda ck: _mut_json(ck / "privacy_card.json", lambda d: d["mechanism"].update(
        events=d["mechanism"]["events"] * 10_000)), [], "at most 1000 events"),
    ("card delta 1e-300", _set("privacy_card.json", ["claim", "delta"], 1e-300), [], "delta"),
    ("card epsilon string", _set("privacy_card.json", ["claim", "epsilon"], "8"), [], "claim.epsilon"),
    ("card missing", lambda ck: (ck / "privacy_card.json").unlink(), [], "privacy card not found"),
    ("NaN white-box scores", _whitebox(lambda m: [float("nan")] * m), [], "finite"),
    ("white-box record too short", _whitebox(lambda m: [0.0] * (m - 1)), [], "same length"),
    ("white-box record without kind", _whitebox(lambda m: [0.0] * m, kind=None), [], "'kind'"),
    ("white-box signs not +-1", _whitebox(lambda m: [0.0] * m, signs=[2] * 20), [], "'signs'"),
    ("NaN white-box scores, one shard", _whitebox(lambda m: [float("nan")] * m), ["--shard", "1/2"], "finite"),
    ("bad model spec in run.json", _bad_run_spec, ["--base-metrics"], "run.json"),
    ("confidence above 1", None, ["--confidence", "1.5", "--off-plan"], "confidence"),
    ("confidence NaN", None, ["--confidence", "nan", "--off-plan"], "confidence"),
    ("references absurd", None, ["--references", "1000000000", "--off-plan"], "references"),
    ("unknown attack", None, ["--attacks", "loss,telepathy", "--off-plan"], "unknown attack"),
    ("device absent", None, ["--device", "cuda:7"], "cuda"),
    ("shard malformed", None, ["--shard", "2of3"], "--shard"),
]


@pytest.fixture
def work(tmp_path, healthy):
    shutil.copytree(healthy / "ck", tmp_path / "ck")
    shutil.copytree(healthy / "report", tmp_path / "report")
    return tmp_path


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in d.rglob("*")}  # links as links


def _expect_refused(argv, needle, work, capsys, before=None):
    before = _tree(work) if before is None else before
    capsys.readouterr()
    t = time.time()
    code = main([str(a) for a in argv])
    took = time.time() - t
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert needle.lower() in err.lower(), err
    assert _tree(work) == before, "the command left something behind or changed its inputs"
    assert took < 60, took


@pytest.mark.parametrize("name,damage,extra,needle", [c for c in EVALUATE if c[3]], ids=[c[0] for c in EVALUATE if c[3]])
def test_evaluate_refuses(name, damage, extra, needle, work, capsys):
    if damage is not None:
        damage(work / "ck")
    _expect_refused(["evaluate", work / "ck", "--out", work / "out", "--quiet", *extra], needle, work, capsys)


def test_checkpoint_code_is_never_run_even_when_the_user_says_yes(work, monkeypatch, capsys):
    """`yes y | dpaudit evaluate` on a checkpoint with auto_map: refused before transformers could ask."""
    import io

    _auto_map(work / "ck")
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))
    _expect_refused(["evaluate", work / "ck", "--out", work / "out", "--quiet"], "auto_map", work, capsys)


# ---------------------------------------------------------------- --out
def _file(path: Path, sub: str | None = None) -> Path:
    path.write_text("x")
    return path / sub if sub else path


OUT = [
    ("out is an existing file", lambda w: _file(w / "file.txt"), "is a file"),
    ("out inside the checkpoint", lambda w: w / "ck" / "report", "inside the checkpoint"),
    ("out is the checkpoint", lambda w: w / "ck", "inside the checkpoint"),
    ("out under a file", lambda w: _file(w / "f", "sub"), "is a file"),
]


@pytest.mark.parametrize("name,target,needle", OUT, ids=[c[0] for c in OUT])
def test_evaluate_out_refused_before_work(name, target, needle, work, capsys):
    out = target(work)
    _expect_refused(["evaluate", work / "ck", "--out", out, "--quiet"], needle, work, capsys)


# ---------------------------------------------------------------- check / compare
def _report_edit(edit):
    def run(w):
        _mut_json(w / "report" / "report.json", edit)
        return w / "report" / "report.json"
    return run


def _report_raw(text):
    def run(w):
        (w / "report" / "report.json").write_text(text)
        return w / "report" / "report.json"
    return run


def _policy(text):
    def run(w):
        (w / "policy.toml").write_text(text)
        return ["--policy", w / "policy.toml"]
    return run


CHECK = [  # (id, report maker, extra args maker, needle)
    ("report epsilon Infinity", _report_raw('{"kind": "evaluation", "claim": {"epsilon": Infinity}}'), None,
     "non-finite"),
    ("report epsilon_lb NaN", lambda w: _nan_lb(w), None, "non-finite"),
    ("empty comparison", _report_raw('{"schema_version": 1, "kind": "comparison", "command": "x", "config": {}, '
                                     '"variants": {}}'), None, "no variants"),
    ("report missing verdict", _report_edit(lambda d: d.pop("verdict")), None, "verdict"),
    ("report verdict wrong type", _report_edit(lambda d: d.update(verdict="consistent")), None, "verdict"),
    ("report epsilon string inf with claim", _report_edit(lambda d: d["claim"].update(epsilon="inf")), None, "epsilon"),
    ("report not JSON", _report_raw("{{"), None, "not valid JSON"),
    ("report a list", _report_raw("[]"), None, "JSON object"),
    ("report of unknown kind", _report_edit(lambda d: d.update(kind="poem")), None, "kind"),
    ("report missing", lambda w: w / "nope.json", None, "not found"),
    ("policy NaN threshold", None, _policy("[rules]\nmax_claimed_epsilon = nan\n"), "finite"),
    ("policy inf threshold", None, _policy("[rules]\nmax_claimed_epsilon = inf\n"), "finite"),
    ("policy unknown rule", None, _policy("[rules]\nmax_claimed_epsilonn = 8\n"), "unknown"),
    ("policy empty accounting list", None, _policy("[rules]\naccounting = []\n"), "is empty"),
    ("policy empty verdict list", None, _policy("[rules]\nallowed_verdicts = []\n"), "is empty"),
    ("policy empty empirical list", None, _policy("[rules]\nempirical = []\n"), "is empty"),
    ("policy tolerance above 1", None, _policy("[rules]\naccounting_tolerance = 1e308\n"), "at most 1"),
    ("policy intended tolerance above 1", None, _policy("[rules]\nintended_tolerance = 2\n"), "at most 1"),
    ("policy not TOML", None, _policy("[rules\n"), "TOML"),
    ("policy missing", None, lambda w: ["--policy", w / "none.toml"], "not found"),
    ("policy rules not a table", None, _policy("rules = 3\n"), "must be a table"),
    ("policy not UTF-8", None, lambda w: (w / "p.toml").write_bytes(b"\xff\xfe[rules]\n") and ["--policy", w / "p.toml"],
     "not UTF-8"),
    ("a 5,001-digit number in the report", _report_raw('{"kind": "evaluation", "x": ' + "1" * 5001 + "}"), None,
     "cannot be read as dpaudit JSON"),
    # a hostile round (2026-11-29) found the fields the gate reads that the schema left untyped (exit 3 before)
    ("report checkpoint a string", _report_edit(lambda d: d.update(checkpoint="x")), None, "at checkpoint"),
    ("report accountant epsilon a string", _report_edit(lambda d: d["accounting"]["results"][0].update(epsilon="1")),
     None, "accounting/results/0/epsilon"),
    ("report accountant delta null", _report_edit(lambda d: d["accounting"]["results"][0].update(delta=None)), None,
     "accounting/results/0/delta"),
    ("report accounting tolerance null", _report_edit(lambda d: d["accounting"].update(tolerance=None)), None,
     "accounting/tolerance"),
    ("report row guesses null", _report_edit(lambda d: d["empirical"][0].update(k_pos=None)), None, "k_pos"),
    ("report attack name with markup", _report_edit(lambda d: d["empirical"][0].update(attack="<b>x</b>")), None,
     "empirical/0/attack"),
    ("report private claim without epsilon", _report_edit(lambda d: d["claim"].update(epsilon=None)), None, "claim"),
    ("report versions a string", _report_edit(lambda d: d["reproducibility"].update(versions="1")), None, "versions"),
    ("report row test count a string", _report_edit(lambda d: d["empirical"][0].update(bonferroni_tests="2")), None,
     "bonferroni_tests"),
]


def _nan_lb(w):
    (w / "report" / "report.json").write_text(
        (w / "report" / "report.json").read_text().replace('"epsilon_lb": ', '"epsilon_lb": NaN, "x": ', 1))
    return w / "report" / "report.json"


@pytest.mark.parametrize("name,report,extra,needle", CHECK, ids=[c[0] for c in CHECK])
def test_check_refuses(name, report, extra, needle, work, capsys):
    before = _tree(work)
    path = report(work) if report else work / "report" / "report.json"
    args = extra(work) if extra else []
    before = _tree(work)
    _expect_refused(["check", path, *args], needle, work, capsys, before)


def test_check_without_policy_fails_an_infinite_claim_report(work, capsys):
    """The default gate on a report whose card said epsilon = Infinity: refused as bad input, never exit 0."""
    _report_raw(json.dumps({"kind": "evaluation"})[:-1] + ', "claim": {"epsilon": Infinity}}')(work)
    _expect_refused(["check", work / "report" / "report.json"], "non-finite", work, capsys)


COMPARE = [
    ("compare a list", _report_raw("[]"), "JSON object"),
    ("compare missing claim", _report_edit(lambda d: d.pop("claim")), "claim"),
    ("compare NaN", lambda w: _nan_lb(w), "non-finite"),
    ("compare unknown kind", _report_edit(lambda d: d.update(kind="poem")), "kind"),
]


@pytest.mark.parametrize("name,report,needle", COMPARE, ids=[c[0] for c in COMPARE])
def test_compare_refuses(name, report, needle, work, capsys, healthy):
    shutil.copy(healthy / "report" / "report.json", work / "old.json")
    path = report(work)
    _expect_refused(["compare", work / "old.json", path], needle, work, capsys)


# ---------------------------------------------------------------- account / audit / card / canaries
NUMERIC = [
    (["account", "--sigma", "inf", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5", "--accountants",
      "rdp"], "sigma"),
    (["account", "--sigma", "nan", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"], "sigma"),
    (["account", "--sigma", "-1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"], "sigma"),
    (["account", "--sigma", "1", "--sample-rate", "0", "--steps", "100", "--delta", "1e-5"], "sample rate"),
    (["account", "--sigma", "1", "--sample-rate", "nan", "--steps", "100", "--delta", "1e-5"], "sample rate"),
    (["account", "--sigma", "1", "--sample-rate", "0.01", "--steps", "1000000000", "--delta", "1e-5",
      "--accountants", "prv"], "steps"),
    (["account", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-300", "--accountants",
      "prv"], "delta"),
    (["account", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "nan"], "delta"),
    (["account", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "0"], "delta"),
    (["account", "--target-epsilon", "inf", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
     "target epsilon"),
    (["account", "--target-epsilon", "nan", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
     "target epsilon"),
    (["audit", "many-run", "--tp", "50", "--fn", "0", "--fp", "0", "--tn", "50", "--delta", "-5"], "delta"),
    (["audit", "many-run", "--tp", "50", "--fn", "0", "--fp", "0", "--tn", "50", "--delta", "nan"], "delta"),
    (["audit", "many-run", "--tp", "50", "--fn", "0", "--fp", "0", "--tn", "50", "--confidence", "1.5"],
     "confidence"),
    (["audit", "many-run", "--tp", "50", "--fn", "0", "--fp", "0", "--tn", "50", "--confidence", "0.2"],
     "confidence"),
    (["audit", "many-run", "--tp", "-1", "--fn", "0", "--fp", "0", "--tn", "50"], "tp"),
    (["audit", "many-run", "--tp", "0", "--fn", "0", "--fp", "0", "--tn", "0"], "runs"),
    # past 2**63 SciPy's beta quantiles take no integer (a TypeError, exit 3, before)
    (["audit", "many-run", "--tp", "9" * 30, "--fn", "0", "--fp", "0", "--tn", "50"], "--tp"),
    (["audit", "many-run", "--tp", "5", "--fn", "0", "--fp", "0", "--tn", "9" * 30], "--tn"),
    (["audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "40", "--delta", "2"], "delta"),
    (["audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "40", "--confidence", "1"],
     "confidence"),
    (["audit", "one-run", "--canaries", "-100", "--guesses", "50", "--correct", "40"], "canaries"),
    (["audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "60"], "cannot exceed"),
    (["account", "--target-epsilon", "1e6", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"],
     "above 1000"),
    (["account", "--sigma", "1e-300", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"], "below 0.01"),
    # every accountant's arithmetic overflows (Opacus' RDP and PRV from ~1e8, all four from ~1e155): was exit 3
    (["account", "--sigma", "1e308", "--sample-rate", "1e-300", "--steps", "10", "--delta", "1e-5"], "above 1e+06"),
    (["account", "--sigma", "1e8", "--sample-rate", "0.01", "--steps", "10", "--delta", "1e-5"], "above 1e+06"),
    # the same ranges wherever a mechanism is typed in (audit plan and strategy took any sigma and q before)
    (["audit", "plan", "--sample-rate", "0.01", "--sigma", "1e300", "--steps", "100"], "above 1e+06"),
    (["audit", "plan", "--sample-rate", "0.01", "--sigma", "1", "--steps", "100", "--canary-rate", "5e-324"],
     "--canary-rate: sample rate"),
    (["audit", "strategy", "--mechanism", "subsampled:5e-324,1,10", "--canaries", "100", "--sims", "10"],
     "below 1e-300"),
    (["lmo", "search", "--epsilon", "nan", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"], "--epsilon"),
    (["lmo", "search", "--epsilon", "1", "--sample-rate", "0.01", "--steps", "1000000000", "--delta", "1e-5"],
     "steps"),
    # inside both older caps (m x sims <= 10^6, m x T <= 2 x 10^7 per audit) but about 22 minutes of draws
    (["audit", "strategy", "--mechanism", "subsampled:0.01,1,2000", "--canaries", "10000", "--sims", "100"],
     "simulated draws"),
]


@pytest.mark.parametrize("argv,needle", NUMERIC, ids=[" ".join(a[:2]) + f" #{i}" for i, (a, _) in enumerate(NUMERIC)])
def test_numeric_commands_refuse(argv, needle, tmp_path, capsys):
    _expect_refused(argv, needle, tmp_path, capsys)


def test_audit_checkpoints_validates_delta_and_confidence(work, capsys):
    for extra, needle in ((["--delta", "-5"], "delta"), (["--confidence", "1.5"], "confidence")):
        _expect_refused(["audit", "checkpoints", work / "ck", work / "ck", "--canary", "c00", *extra], needle, work,
                        capsys)


CARD = [
    (["--epsilon", "inf"], "epsilon"),
    (["--epsilon", "nan"], "epsilon"),
    (["--sigma", "inf"], "sigma"),
    (["--sigma", "1e200"], "above 1e+06"),
    (["--sample-rate", "5e-324"], "below 1e-300"),  # written, then `account --card` crashed in dp_accounting's PLD
    (["--steps", "0"], "steps"),
    (["--clipping-norm", "nan"], "clipping"),
    # a claim its own mechanism refutes (σ = 0.6, q = 0.01, T = 3000 spends ε ≈ 12.0, the help's example claimed 8):
    # written before, for the gate to find later
    (["--sigma", "0.6", "--steps", "3000"], "--epsilon 8 is an under-claim"),
]


@pytest.mark.parametrize("change,needle", CARD, ids=[" ".join(c) for c, _ in CARD])
def test_card_refuses(change, needle, tmp_path, capsys):
    base = {"--epsilon": "8", "--delta": "1e-5", "--sigma": "1", "--sample-rate": "0.01", "--steps": "100"}
    base.update(dict(zip(change[::2], change[1::2])))
    argv = ["card", *[x for kv in base.items() for x in kv], *[c for c in change if c not in base and
                                                               c not in base.values()]]
    _expect_refused([*argv, "--out", tmp_path / "card.json"], needle, tmp_path, capsys)


CANARIES = [
    (["--m", "1000000000"], "canaries.m"),
    (["--m", "20", "--repetitions", "1000000"], "repetitions"),
    (["--m", "20", "--length", "1000"], "length"),
    (["--m", "20", "--alphabet", "aa"], "alphabet"),
    (["--m", "20", "--confidence", "nan"], "confidence"),
]


@pytest.mark.parametrize("args,needle", CANARIES, ids=[" ".join(a) for a, _ in CANARIES])
def test_canaries_new_refuses(args, needle, tmp_path, capsys):
    _expect_refused(["canaries", "new", *args, "--out", tmp_path / "c.json"], needle, tmp_path, capsys)


# ---------------------------------------------------------------- run: every variant validated before any work
RUN_BASE = TINY_RUN.replace("[canaries]", "[train]\nepochs = 1\n[canaries]") + \
    '[[variants]]\nname = "ok"\ntarget_epsilon = inf\n'

# a user-level run (45 users of the chitchat sample, canary users included) whose first variant would train
USER_BASE = RUN_BASE.replace("[task]\n", '[task]\nname = "userlm"\nsource = "chitchat"\n').replace(
    "n_train = 120", "n_train = 40").replace("m = 20", "m = 10\nrecords_per_user = 2").replace(
    "epochs = 1\n", "epochs = 1\nbatch_size = 8\nuser_cap = 4\n").replace(
    'name = "ok"\n', 'name = "ok"\nmethod = "user_dp_sgd"\n')

RUN = [
    ("later variant impossible epsilon", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = -1\n', "epsilon"),
    ("later variant unreachable epsilon", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = 1\n'
     'batch_size = 1000\nepochs = 100000000\n', "out of reach"),
    ("later variant NaN epsilon", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = nan\n', "epsilon"),
    ("later variant unknown key", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilonn = 8\n', "unknown"),
    ("later variant unknown method", RUN_BASE + '[[variants]]\nname = "bad"\nmethod = "magic"\n', "method"),
    ("duplicate variant names", RUN_BASE + '[[variants]]\nname = "ok"\ntarget_epsilon = 8\n', "ok"),
    ("secure_rng not a bool", RUN_BASE.replace("epochs = 1", "epochs = 1\nsecure_rng = \"yes\""), "secure_rng"),
    ("NaN learning rate", RUN_BASE.replace("epochs = 1", "epochs = 1\nlr = nan"), "lr"),
    ("absurd canary count", RUN_BASE.replace("m = 20", "m = 100000000"), "canaries.m"),
    ("config not TOML", "[task\n", "TOML"),
    ("off_plan in a run config", RUN_BASE.replace("enumerate_limit = 0", "enumerate_limit = 0\noff_plan = true"),
     "evaluate.off_plan"),
    ("evaluate references below 10", RUN_BASE.replace("enumerate_limit = 0", "enumerate_limit = 0\nn_references = 5"),
     "n_references"),
    ("a method section on another method", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = 8\n'
     '[variants.frost]\ngamma = 0.5\n', "applies to method = 'dp_frost' only"),
    ("a flat method key", RUN_BASE + '[[variants]]\nname = "bad"\nmethod = "dp_frost"\nfrost_gamma = 0.5\n',
     "[train.frost]"),
    ("vocab_size 10^9", RUN_BASE.replace("vocab_size = 512", "vocab_size = 1000000000"), "model.vocab_size"),
    ("n_layer 10^5", RUN_BASE.replace("n_layer = 2", "n_layer = 100000"), "model.n_layer"),
    ("max_len 10^9", RUN_BASE.replace("max_len = 32", "max_len = 1000000000"), "model.max_len"),
    ("sizes beyond this machine's memory", RUN_BASE.replace("vocab_size = 512", "vocab_size = 900000").replace(
        "n_embd = 32", "n_embd = 60000").replace("n_head = 2", "n_head = 4"), "more than this machine's"),
    ("10^9 epochs", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = 3\nepochs = 1000000000\n', "steps"),
    ("1e308 epochs", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = 3\nepochs = 1e308\n', "steps"),
    ("1e308 epochs, non-private", RUN_BASE.replace("epochs = 1", "epochs = 1e308"), "steps"),
    ("1e308 epochs, a later user-wise variant", USER_BASE + '[[variants]]\nname = "bad"\nmethod = "user_dp_sgd"\n'
     'target_epsilon = 3\nepochs = 1e308\n', "45 users in batches of 8 is inf steps"),
    ("1e308 epochs, a later group-privacy variant", USER_BASE + '[[variants]]\nname = "bad"\nmethod = '
     '"group_privacy"\ntarget_epsilon = 3\nepochs = 1e308\n', "180 records in batches of 8 is inf steps"),
    # a target of 1e-9 trained for minutes and then failed on its claim (0.0, or -1e-9 after the group conversion)
    ("a target below 0.01, a later user-wise variant", USER_BASE + '[[variants]]\nname = "bad"\nmethod = '
     '"user_dp_sgd"\ntarget_epsilon = 1e-9\n', "is below 0.01"),
    ("a record-level target below 0.01 by group privacy", USER_BASE + '[[variants]]\nname = "bad"\nmethod = '
     '"group_privacy"\ntarget_epsilon = 0.02\n', "group privacy of 4 records (record-level epsilon 0.005)"),
    ("a later LMO variant without a claim", RUN_BASE + '[[variants]]\nname = "bad"\nmethod = "lmo_dp"\n'
     'target_epsilon = inf\n', "needs a finite target_epsilon"),
    ("a later LMO target under its analysis' floor", RUN_BASE + '[[variants]]\nname = "bad"\nmethod = "lmo_dp"\n'
     'target_epsilon = 0.1\ndelta = 1e-10\n', "the smallest the balle conversion can give"),
    # true where a number belongs (Python's bool is an int): batch_size = true trained with batches of 1
    ("batch_size true", RUN_BASE.replace("epochs = 1", "epochs = 1\nbatch_size = true"), "train.batch_size"),
    ("a later variant's batch_size true", RUN_BASE + '[[variants]]\nname = "bad"\ntarget_epsilon = 3\n'
     'batch_size = true\n', "train.batch_size"),
    ("a negative task seed", RUN_BASE.replace("[task]", "[task]\nseed = -1"), "task.seed"),
    ("a train seed past 2**64", RUN_BASE.replace("epochs = 1", "epochs = 1\nseed = 18446744073709551616"),
     "train.seed"),
    ("a negative model seed", RUN_BASE.replace("[model]", "[model]\ninit_seed = -1"), "model.init_seed"),
    ("a section that is a list", "train = [1]\n" + RUN_BASE.replace("[train]\nepochs = 1\n", ""), "[train] must be"),
    ("variants that are a table", RUN_BASE.split("[[variants]]")[0] + "[variants]\nname = \"x\"\n", "array of tables"),
    ("a variant name that is a path", RUN_BASE + '[[variants]]\nname = "a/../b"\ntarget_epsilon = 3\n', "name"),
    ("a 300-character variant name", RUN_BASE + f'[[variants]]\nname = "{"v" * 300}"\ntarget_epsilon = 3\n',
     "1 to 100 ASCII"),
    ("a variant name of non-ASCII digits", RUN_BASE + '[[variants]]\nname = "\u0663\u0664"\ntarget_epsilon = 3\n',
     "1 to 100 ASCII"),
]


@pytest.mark.parametrize("name,text,needle", RUN, ids=[c[0] for c in RUN])
def test_run_refuses_before_training(name, text, needle, tmp_path, capsys):
    (tmp_path / "cfg.toml").write_text(text)
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", tmp_path / "out", "--quiet"], needle, tmp_path, capsys)


@pytest.mark.parametrize("name,text,needle", RUN, ids=[c[0] for c in RUN])
def test_the_dry_run_refuses_what_the_run_refuses(name, text, needle, tmp_path, capsys):
    """`run --dry-run` plans what the run would do: a config the run refuses before training is refused by the dry run
    too, in one line (the fuzzer's config mode judges configs by their dry run; a user-level step count the dry run
    refused was trained by the run, 2026-11-29)."""
    (tmp_path / "cfg.toml").write_text(text)
    _expect_refused(["run", tmp_path / "cfg.toml", "--dry-run"], "", tmp_path, capsys)


def test_run_config_not_utf8_is_one_line(tmp_path, capsys):
    (tmp_path / "cfg.toml").write_bytes(b"\xff\xfe[task]\n")
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", tmp_path / "out", "--quiet"], "not UTF-8", tmp_path, capsys)


def test_run_out_existing_file_refused_before_training(tmp_path, capsys):
    (tmp_path / "cfg.toml").write_text(RUN_BASE)
    (tmp_path / "out").write_text("x")
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", tmp_path / "out", "--quiet"], "is a file", tmp_path,
                    capsys)


def test_run_out_holding_other_files_refused_before_training(tmp_path, capsys):
    """A run writes variant folders, REPORT.md and report.json: never among someone's files (a report.json of
    `dpaudit evaluate` is not a run either); hidden files alone, or an earlier run's folder, are accepted."""
    (tmp_path / "cfg.toml").write_text(RUN_BASE)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "report.json").write_text(json.dumps({"kind": "evaluation"}))
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", out, "--quiet"], "holds files and no earlier run",
                    tmp_path, capsys)
    from dpaudit.run_folder import RunFolder

    (out / "notes.txt").unlink()
    (out / "report.json").unlink()
    (out / ".gitkeep").write_text("")
    assert not RunFolder(out).holds_a_run()  # and empty but for a hidden file: accepted (nothing to mix with)
    (out / "dp-eps1" / "checkpoint").mkdir(parents=True)
    (out / "report.json").write_text(json.dumps({"kind": "comparison", "variants": {"dp-eps1": {}}}))
    assert not RunFolder(out).holds_a_run()  # looks like a run (a checkpoint/ folder, a comparison): it is not one
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", out, "--quiet"], "holds files and no earlier run",
                    tmp_path, capsys)
    RunFolder(out).mark()
    assert RunFolder(out).holds_a_run()  # dpaudit's marker: its own folder


def test_a_killed_runs_folder_is_still_its_own(tmp_path):
    """A run killed with SIGKILL leaves its marker and a variant folder holding only a hidden partial checkpoint:
    the next run (or --train-only) accepts it as its own, and the partial of the dead writer is removed."""
    from dpaudit.run.pipeline import _check_not_foreign
    from dpaudit.run_folder import MARKER, RunFolder

    out = tmp_path / "out"
    (out / "dp" / ".checkpoint.partial-abc").mkdir(parents=True)
    (out / "dp" / ".checkpoint.partial-abc" / ".dpaudit-owner").write_text("999999999")
    with pytest.raises(DpauditError, match="holds files and no earlier run"):
        _check_not_foreign(out)
    RunFolder(out).mark()
    assert (out / MARKER).is_file()
    _check_not_foreign(out)
    from dpaudit.folders import staged_folder

    with staged_folder(out / "dp" / "checkpoint") as stage:
        (stage / "x").write_text("x")
    assert sorted(p.name for p in (out / "dp").iterdir()) == ["checkpoint"]


def test_a_run_into_a_folder_another_run_is_writing_is_refused(tmp_path, capsys):
    """Two `dpaudit run`s into one --out would interleave their variants (each comparison naming the other's
    reports): while one holds the folder, the second is refused in one line and writes nothing; once it is
    released, the folder is free again."""
    from dpaudit.run_folder import MARKER, RunFolder

    (tmp_path / "cfg.toml").write_text(RUN_BASE)
    out = tmp_path / "out"
    out.mkdir()
    RunFolder(out).mark()
    with RunFolder(out).held():
        _expect_refused(["run", tmp_path / "cfg.toml", "--out", out, "--quiet"], "another `dpaudit run` is writing",
                        tmp_path, capsys)
        with pytest.raises(DpauditError, match="another `dpaudit run`"):
            with RunFolder(out).held():
                pass
    assert [p.name for p in out.iterdir()] == [MARKER]
    with RunFolder(out).held():  # released: free again
        pass


def test_a_linked_marker_is_not_dpaudits(tmp_path):
    from dpaudit.run_folder import MARKER, RunFolder

    out = tmp_path / "out"
    out.mkdir()
    real = tmp_path / "m.json"
    real.write_text(json.dumps({"kind": "dpaudit run", "schema_version": 1}))
    (out / MARKER).symlink_to(real)
    assert not RunFolder(out).holds_a_run()


def test_the_table_has_at_least_sixty_cases():
    n = (len([c for c in EVALUATE if c[3]]) + 2 + len(OUT) + len(CHECK) + 1 + len(COMPARE) + len(NUMERIC) + 2
         + len(CARD) + len(CANARIES) + len(RUN) + 2)
    assert n >= 60, n


def test_rule_held_out_writes_a_schema_valid_report(work, capsys):
    """The documented `--rule held_out` on a checkpoint with white-box canaries: a complete report, every attack row
    and bound present, accepted by `dpaudit check`'s schema validation."""
    import numpy as np

    from dpaudit.gate.policy import load_report

    rng = np.random.default_rng(0)
    signs = [1, -1] * 50
    (work / "ck" / "gradient_canaries.json").write_text(json.dumps(
        {"kind": "dirac", "signs": signs, "scores": [float(3 * x + rng.normal()) for x in signs]}))
    assert main(["evaluate", str(work / "ck"), "--out", str(work / "ho"), "--rule", "held_out", "--off-plan",
                 "--quiet"]) == 0
    r = load_report(work / "ho" / "report.json")
    assert r["threshold_rule"] == "held_out" and "whitebox_gradient" in r["attacks"]
    assert any(e["attack"] == "whitebox_gradient" for e in r["empirical"])


def test_unusable_cache_folder_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "cfg.toml").write_text(RUN_BASE)
    (tmp_path / "cache").write_text("a file, not a folder")
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path / "cache" / "sub"))
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", tmp_path / "out", "--quiet"], "DPAUDIT_CACHE", tmp_path,
                    capsys)


def test_out_dot_writes_into_the_current_folder_and_keeps_other_files(work, monkeypatch):
    """`--out .` (the current folder, which exists): the report files land there, other files stay, no temporary
    folder is left behind."""
    here = work / "here"
    here.mkdir()
    (here / "notes.txt").write_text("mine")
    monkeypatch.chdir(here)
    assert main(["evaluate", str(work / "ck"), "--out", ".", "--attacks", "loss", "--off-plan", "--quiet"]) == 0
    names = sorted(p.name for p in here.iterdir())
    assert "report.json" in names and "REPORT.md" in names and "notes.txt" in names
    assert not [n for n in names if "partial" in n]


def test_an_internal_error_is_one_line_and_exit_3(monkeypatch, tmp_path, capsys):
    """A bug (an unexpected exception) never reads as "a check failed" (1) nor as a pass: exit 3, one line."""
    from dpaudit.audit import one_run

    def boom(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(one_run, "epsilon_lower_bound", boom)
    code = main(["audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "40"])
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1 and "RuntimeError: boom" in err and "DPAUDIT_DEBUG" in err


@pytest.mark.parametrize("exists", [False, True])
def test_atomic_folder_leaves_the_target_as_it_was_on_failure(tmp_path, exists):
    from dpaudit.folders import atomic_folder

    out = tmp_path / "out"
    if exists:
        out.mkdir()
        (out / "report.json").write_text("old")
    def contents():  # a folder's own mtime changes when the temporary folder inside it comes and goes
        return {str(p.relative_to(tmp_path)): p.read_bytes() if p.is_file() else None for p in tmp_path.rglob("*")}

    before = contents()
    with pytest.raises(RuntimeError):
        with atomic_folder(out) as tmp:
            (tmp / "report.json").write_text("new, half written")
            raise RuntimeError("the work failed")
    assert contents() == before
    with atomic_folder(out) as tmp:
        (tmp / "report.json").write_text("new")
    assert (out / "report.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("exists", [False, True])
def test_staged_folder_replaces_whole_or_leaves_the_target_as_it_was(tmp_path, exists):
    """Checkpoints, deployments and caches are written whole: a failure leaves the target (and no stage) behind;
    ``replace=False`` keeps a folder another process finished first."""
    from dpaudit.folders import staged_folder

    dest = tmp_path / "ck"
    if exists:
        dest.mkdir()
        (dest / "old.json").write_text("old")
    with pytest.raises(RuntimeError):
        with staged_folder(dest) as stage:
            (stage / "new.json").write_text("half")
            raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["ck"] if exists else [])
    with staged_folder(dest, replace=False) as stage:
        (stage / "new.json").write_text("new")
    assert sorted(p.name for p in dest.iterdir()) == (["old.json"] if exists else ["new.json"])
    with staged_folder(dest) as stage:
        (stage / "newer.json").write_text("newer")
    assert sorted(p.name for p in dest.iterdir()) == ["newer.json"] and len(list(tmp_path.iterdir())) == 1


def test_a_failed_write_to_a_deep_new_path_leaves_no_empty_folders(tmp_path, monkeypatch):
    """--out a/b/c where a and b do not exist: a failure (a refusal, an error, ^C) inside the write removes the
    folders it created on the way (each was an "empty --out" left behind), and keeps any that something else wrote
    into meanwhile; the same for a whole run whose training fails."""
    from dpaudit.folders import atomic_folder, staged_folder

    for write in (atomic_folder, staged_folder):
        with pytest.raises(KeyboardInterrupt):
            with write(tmp_path / "a" / "b" / "c") as tmp:
                (tmp / "report.json").write_text("half")
                raise KeyboardInterrupt
        assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError):
        with atomic_folder(tmp_path / "a" / "b" / "c"):
            (tmp_path / "a" / "mine.txt").write_text("someone else's")
            raise RuntimeError("failed")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/mine.txt"]

    from dpaudit.run import pipeline

    def fail(*a, **k):
        raise RuntimeError("the trainer crashed")

    monkeypatch.setattr(pipeline, "_variants", fail)
    (tmp_path / "cfg.toml").write_text(RUN_BASE)
    with pytest.raises(RuntimeError):
        pipeline.run(tmp_path / "cfg.toml", tmp_path / "x" / "y" / "out", "dpaudit run")
    assert not (tmp_path / "x").exists()


def test_check_escapes_what_it_prints_from_a_report(work, capsys):
    """A report's strings cannot print lines of their own or drive the terminal (ANSI escapes, line breaks)."""
    from dpaudit.io import printable

    assert printable("a\nok: fake\x1b[32m\r\u2028") == "a\\nok: fake\\x1b[32m\\r\\u2028"
    r = json.loads((work / "report" / "report.json").read_text())
    r["checkpoint"]["variant"] = "v\nok: every claim verified\x1b[2J"
    (work / "report" / "report.json").write_text(json.dumps(r))
    capsys.readouterr()
    code = main(["check", str(work / "report" / "report.json")])
    out = capsys.readouterr().out
    assert code in (0, 1) and "\x1b" not in out and "\nok: every claim verified" not in out


def test_a_killed_writer_leaves_nothing_later_runs_keep(tmp_path):
    """A partial folder left by a process that died mid-write is removed by the next write; a live one is kept."""
    import subprocess
    import sys

    from dpaudit.folders import OWNER, atomic_folder

    out = tmp_path / "report"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out / ".dpaudit-partial-abc"
    stale.mkdir()
    (stale / OWNER).write_text(dead.stdout.strip())
    (stale / "report.json").write_text("{half")
    live = out / ".dpaudit-partial-live"
    live.mkdir()
    (live / OWNER).write_text(str(os.getpid()))
    with atomic_folder(out) as tmp:
        (tmp / "report.json").write_text("{}")
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in out.iterdir()) == [".dpaudit-partial-live", "report.json"]


def test_check_with_the_checkpoint_rederives_what_the_json_claims(work, capsys):
    """A report edited consistently (claim and accounting rows together) passes a JSON-only gate; with
    --checkpoint the gate re-derives them from the model's folder and fails it."""
    rep, ck = work / "report" / "report.json", work / "ck"
    capsys.readouterr()
    assert main(["check", str(rep), "--checkpoint", str(ck)]) == 0
    assert "re-derived from" in capsys.readouterr().out
    r = json.loads(rep.read_text())
    r["claim"]["epsilon"] = 1.0
    r["accounting"]["certified_epsilon"] = 0.99
    rep.write_text(json.dumps(r))
    capsys.readouterr()
    assert main(["check", str(rep), "--checkpoint", str(ck)]) == 1
    out = capsys.readouterr().out
    assert "the report's claim (epsilon) is not the privacy card's" in out
    assert "accounting certified_epsilon 0.99" in out
    r["checkpoint"]["hash"] = "0" * 16
    rep.write_text(json.dumps(r))
    capsys.readouterr()
    assert main(["check", str(rep), "--checkpoint", str(ck)]) == 1
    assert "was not made from this model" in capsys.readouterr().out


def test_a_parser_panic_is_one_line_exit_2(monkeypatch, capsys):
    """pyo3's PanicException (a Rust panic in tokenizers or safetensors on a hostile file) derives from
    BaseException: it must still be one line and exit 2, not a traceback and exit 1."""
    from dpaudit.audit import one_run

    class PanicException(BaseException):
        pass

    def boom(*a, **k):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(one_run, "epsilon_lower_bound", boom)
    code = main(["audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "40"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "panic" in err


def test_a_tiny_sigma_is_accounted_by_rdp_in_seconds(capsys, monkeypatch):
    """PRV and PLD need grids of GBs below sigma = 0.1 (18 GB and minutes at 0.05): they decline, RDP answers."""
    monkeypatch.setenv("DPAUDIT_ACCOUNTING_CACHE", "0")
    t = time.time()
    assert main(["account", "--sigma", "0.05", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert time.time() - t < 30 and "rdp      ε = 17046" in out and "prv      not applicable" in out


@pytest.mark.parametrize("code_name,text,fix", [("ENOSPC", "No space left on device", "free space"),
                                                ("EACCES", "Permission denied", "fix its permissions"),
                                                ("EPERM", "Operation not permitted", "fix its permissions")])
def test_a_full_disk_is_one_line_exit_2_and_the_report_folder_is_kept(work, monkeypatch, capsys, code_name, text,
                                                                      fix):
    """ENOSPC while writing a report: exit 2 in one line naming the problem, the existing report folder as it was.
    EACCES and EPERM too (a mount or ACL refusing what the mode bits allow, so the check before work passed): they
    were exit 3."""
    import errno

    from dpaudit.report import write as report

    before = _tree(work / "report")

    def full(*a, **k):
        raise OSError(getattr(errno, code_name), text)

    monkeypatch.setattr(report, "write", full)
    code = main(["evaluate", str(work / "ck"), "--out", str(work / "report"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and text in err and fix in err, err
    assert _tree(work / "report") == before


def test_a_bare_tokenizer_pads_and_scores_with_its_own_framing(work, capsys):
    """A tokenizer with no special tokens at all (a bare BPE): padded with id 0 (masked, never scored), the canaries
    framed by the tokenizer itself; a complete report, exit 0."""
    _no_special_tokens(work / "ck")
    code = main(["evaluate", str(work / "ck"), "--out", str(work / "bare"), "--quiet", "--attacks", "loss"])
    assert code == 0, capsys.readouterr().err
    r = json.loads((work / "bare" / "report.json").read_text())
    assert r["canary_plan"]["framing"] == "tokenizer" and len(r["attacks"]["loss"]["scores"]) == 20


def _cli(*args):
    import sys

    return [sys.executable, "-m", "dpaudit.cli", *args]


ONE_RUN = ("audit", "one-run", "--canaries", "100", "--guesses", "50", "--correct", "40")


def test_a_closed_stdout_is_one_line_exit_2():
    """`dpaudit ... >&-`: the results would vanish while the exit code says success."""
    import subprocess

    p = subprocess.run(_cli(*ONE_RUN), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       preexec_fn=lambda: os.close(1), timeout=120)
    assert p.returncode == 2 and p.stderr.strip().startswith("error: standard output is closed"), p.stderr


def test_a_reader_that_leaves_early_is_one_line_exit_2_not_a_failed_check():
    """`dpaudit ... | head -0`: click exits 1 on the broken pipe, which a CI job reads as "a check failed"."""
    import subprocess

    p = subprocess.Popen(_cli(*ONE_RUN), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # before the child has imported anything: its first write meets no reader
    err = p.stderr.read()
    assert p.wait(timeout=120) == 2, err
    assert len(err.strip().splitlines()) == 1 and "broken pipe" in err, err


@pytest.mark.parametrize("content,needle", [(None, "more than any dpaudit file"),  # a sparse 30 GB file, never read
                                            ('{"architectures": ["GPT2LMHeadModel"], "n_embd": NaN}', "non-finite"),
                                            ("[1, 2]", "JSON object")])
def test_run_model_path_config_json_hostile(content, needle, tmp_path, capsys):
    """`[model] path`: config.json is read size-capped and strict before anything else (a 30 GB one was read whole,
    a MemoryError reported as a dpaudit bug)."""
    m = tmp_path / "m"
    m.mkdir()
    if content is None:
        with open(m / "config.json", "wb") as fh:
            fh.truncate(30 * 2 ** 30)
    else:
        (m / "config.json").write_text(content)
    (tmp_path / "cfg.toml").write_text(RUN_BASE.replace(TINY_MODEL, f'[model]\npath = "{m}"\nmax_len = 32\n'))
    _expect_refused(["run", tmp_path / "cfg.toml", "--out", tmp_path / "out", "--quiet"], needle, tmp_path, capsys)


def test_a_refusal_during_training_leaves_no_empty_out(tmp_path, capsys, tiny_model_factory):
    """A `[model] path` folder refused only when the trainer loads it (a weight missing): exit 2, one line, and the
    --out folder the run created is gone again (it held nothing)."""
    from safetensors.torch import load_file, save_file

    model, tok = tiny_model_factory()
    m = tmp_path / "m"
    model.save_pretrained(m)
    tok.save_pretrained(m)
    w = load_file(m / "model.safetensors")
    w.pop(sorted(w)[-1])
    save_file(w, m / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "cfg.toml").write_text(RUN_BASE.replace(TINY_MODEL, f'[model]\npath = "{m}"\nmax_len = 32\n'))
    out = tmp_path / "new" / "out"
    assert main(["run", str(tmp_path / "cfg.toml"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "weights" in err, err
    assert not (tmp_path / "new").exists()


def test_a_native_panic_prints_one_line_not_its_backtrace(tmp_path):
    """A tokenizer file that makes the Rust parser panic: the panic's own lines (written straight to file
    descriptor 2, 136 of them for one hostile tokenizer) are held back and dropped; dpaudit's one line remains.
    A parse that succeeds keeps what the library wrote."""
    import subprocess
    import sys

    script = f"""
import os, sys
from dpaudit.tasks import models
class PanicException(BaseException):
    pass
def boom(*a, **k):
    os.write(2, b"thread '<unnamed>' panicked at tokenizers/src/x.rs:1:1:\\n" * 136)
    raise PanicException("called `Option::unwrap()` on a `None` value")
models.AutoTokenizer.from_pretrained = boom
from dpaudit.cli import main
from dpaudit.errors import DpauditError
sys.exit(main(["canaries", "new", "--m", "20", "--design", "bigram", "--tokenizer", {str(tmp_path)!r},
               "--out", {str(tmp_path / "c.json")!r}]))
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: a tokenizer or weights file made its parser panic"), line
    out = subprocess.run([sys.executable, "-c", "import os\nfrom dpaudit.io import native_stderr_held\n"
                          "with native_stderr_held():\n    os.write(2, b'kept\\n')\n"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.stderr == "kept\n"
