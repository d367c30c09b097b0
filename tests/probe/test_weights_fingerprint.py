"""The probe's record is tied to the weights saved beside it (dpaudit/probe/fingerprint.py, the mechanism check
``weights``): before this, a folder whose model was replaced (a non-private baseline saved beside the DP run's
records, a model trained further without the probe) evaluated with the record's passing checks.

Loops as users write them: Opacus on a Hugging Face GPT-2 saved with ``save_pretrained`` (tied embeddings, Opacus'
``_module.`` names gone), in float32 and cast to bf16 or fp16; LoRA adapters saved by PEFT and merged; then the
wrong weights, and damaged or hostile safetensors files, which are "not tested" with the reason, never a crash."""

from __future__ import annotations

import copy
import json
import struct
import warnings

import numpy as np
import pytest
import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api, safetensors_view
from dpaudit.errors import DpauditError
from dpaudit.evaluation import evidence, scoring
from dpaudit.probe import fingerprint

N, B = 96, 16


def _train(tiny_model_factory, folder, lora: bool = False, seed: int = 0):
    """An Opacus loop on a tiny GPT-2 (the README's one line to attach), its record and card saved in ``folder``;
    returns the model the user holds after training (unwrapped from Opacus)."""
    torch.manual_seed(seed)
    model, _ = tiny_model_factory(seed)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], lora_dropout=0.0))
    ids = torch.randint(0, 100, (N, 12))
    engine = PrivacyEngine(accountant="prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp_model, opt, loader = engine.make_private(
            module=model, optimizer=torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2),
            data_loader=DataLoader(TensorDataset(ids), batch_size=B), noise_multiplier=1.0, max_grad_norm=1.0)
    probe = api.attach_probe(opt, sample_rate=loader.sample_rate, m=50, seed=0, dataset_size=N)
    pos = torch.arange(12)
    for _ in range(2):
        for (xb,) in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            out = dp_model(input_ids=xb, labels=xb, position_ids=pos.repeat(len(xb), 1))
            out.loss.backward()
            opt.step()
    folder.mkdir(parents=True, exist_ok=True)
    probe.save(folder)
    api.card_from_opacus(engine, loader, opt, delta=1e-5, method="fingerprint").save(folder / "privacy_card.json")
    return model, api.card_from_opacus(engine, loader, opt, delta=1e-5, method="fingerprint")


def _weights(folder, card):
    (entry,) = [e.as_dict() for e in evidence.mechanism_checks(scoring.whitebox(folder), card)]
    (c,) = [c for c in entry["checks"] if c["check"] == "weights"]
    return c


def test_the_weights_the_probe_watched_pass_in_every_dtype_they_are_saved_in(tiny_model_factory, tmp_path):
    model, card = _train(tiny_model_factory, tmp_path)
    model.save_pretrained(tmp_path / "model")  # tied wte/lm_head saved once, under HF's names
    got = _weights(tmp_path, card)
    assert got["status"] == "pass", got
    assert got["finding"].startswith(f"{len(list(model.parameters()))} of the {len(list(model.parameters()))}")
    for dtype in (torch.bfloat16, torch.float16):  # a cast for serving: the same weights, rounded
        copy.deepcopy(model).to(dtype).save_pretrained(tmp_path / "model")
        assert _weights(tmp_path, card)["status"] == "pass", dtype


def test_other_weights_fail_and_name_the_tensor(tiny_model_factory, tmp_path):
    model, card = _train(tiny_model_factory, tmp_path / "run")
    other, _ = _train(tiny_model_factory, tmp_path / "other", seed=1)  # another run of the same loop
    other.save_pretrained(tmp_path / "run" / "model")
    got = _weights(tmp_path / "run", card)
    assert got["status"] == "fail" and "are not the weights the probe watched" in got["finding"], got
    with torch.no_grad():  # trained further without the probe: a little moves every coordinate
        for p in model.parameters():
            p.add_(1e-3 * torch.randn_like(p))
    model.save_pretrained(tmp_path / "run" / "model")
    assert _weights(tmp_path / "run", card)["status"] == "fail"
    from dpaudit.gate import mechanism_rules

    (entry,) = [e.as_dict() for e in evidence.mechanism_checks(scoring.whitebox(tmp_path / "run"), card)]
    (line,) = mechanism_rules.failures("run", {"mechanism_checks": [entry]}, None, False)
    assert "mechanism check 'weights'" in line and "deterministic" in line


def test_a_layout_conversion_keeps_the_pass_and_an_edited_tensor_fails_naming_the_rest(tiny_model_factory, tmp_path):
    """GPT-2's Conv1D (in, out) converted to Linear's (out, in), square matrices included, passes; fused attention
    split into q, k, v (each the shape of another matrix) leaves the fused tensor unread, not failed; one tensor
    replaced fails, and the finding says the others match."""
    from safetensors.torch import save_file

    model, card = _train(tiny_model_factory, tmp_path)
    (tmp_path / "model").mkdir()
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}  # this tiny GPT-2 is untied
    f = tmp_path / "model" / "model.safetensors"
    save_file({k: (v.t().contiguous() if v.ndim == 2 else v) for k, v in state.items()}, str(f))
    got = _weights(tmp_path, card)
    assert got["status"] == "pass" and "not in the files" not in got["finding"], got["finding"][:300]
    split = {}
    for k, v in state.items():
        if k.endswith("attn.c_attn.weight"):
            for part, x in zip("qkv", v.chunk(3, dim=1)):
                split[k.replace("c_attn", f"{part}_proj")] = x.t().contiguous()
        else:
            split[k] = v
    save_file(split, str(f))
    got = _weights(tmp_path, card)
    assert got["status"] == "pass" and "2 not in the files by shape" in got["finding"], got["finding"][:300]
    edited = dict(state)
    name = next(k for k in state if k.endswith("h.0.mlp.c_fc.weight"))
    edited[name] = torch.zeros_like(state[name])
    save_file(edited, str(f))
    got = _weights(tmp_path, card)
    assert got["status"] == "fail" and "others match" in got["finding"] and "(32, 128)" in got["finding"], got


def _train_ema(tiny_model_factory, folder, give, named: bool):
    """An Opacus loop that keeps an EMA of its iterates (torch.optim.swa_utils, post-processing) and releases it;
    ``give(probe, ema, model)`` saves the probe's record."""
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    torch.manual_seed(0)
    model, _ = tiny_model_factory(0)
    ids = torch.randint(0, 100, (N, 12))
    engine = PrivacyEngine(accountant="prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp_model, opt, loader = engine.make_private(
            module=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-2),
            data_loader=DataLoader(TensorDataset(ids), batch_size=B), noise_multiplier=1.0, max_grad_norm=1.0)
    probe = api.attach_probe(opt, sample_rate=loader.sample_rate, m=50, seed=0, dataset_size=N,
                             **({"model": model} if named else {}))
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    pos = torch.arange(12)
    for (xb,) in loader:
        if len(xb) == 0:
            continue
        opt.zero_grad()
        dp_model(input_ids=xb, labels=xb, position_ids=pos.repeat(len(xb), 1)).loss.backward()
        opt.step()
        ema.update_parameters(model)
    folder.mkdir(parents=True, exist_ok=True)
    ema.module.save_pretrained(folder / "model")  # the released model: the average, not the last iterate
    give(probe, ema, model)
    return api.card_from_opacus(engine, loader, opt, delta=1e-5, method="fingerprint")


def test_a_loop_that_releases_an_ema_of_its_iterates_gives_it_at_save(tiny_model_factory, tmp_path):
    """An EMA of DP iterates is post-processing: a loop that releases it is honest. Not given at save, the check
    fails and says how to give it; given (as the AveragedModel, by the names the probe knows, or as tensors in the
    optimizer's order), it passes and says these are the given weights."""
    card = _train_ema(tiny_model_factory, tmp_path / "last", lambda p, e, m: p.save(tmp_path / "last"), named=False)
    got = _weights(tmp_path / "last", card)
    assert got["status"] == "fail" and "weights=ema" in got["finding"], got["finding"][:300]
    for how, named, give in (("module", True, lambda p, e, m: p.save(tmp_path / "module", weights=e)),
                             ("tensors", False, lambda p, e, m: p.save(tmp_path / "tensors",
                                                                       weights=list(e.module.parameters())))):
        card = _train_ema(tiny_model_factory, tmp_path / how, give, named=named)
        got = _weights(tmp_path / how, card)
        assert got["status"] == "pass" and "the loop gave at save" in got["finding"], (how, got["finding"][:300])


def test_weights_given_at_save_that_do_not_fit_are_one_line(tiny_model_factory, tmp_path):
    def bad(weights, named, match):
        def give(probe, ema, model):
            with pytest.raises(DpauditError, match=match):
                probe.save(tmp_path / "x", weights=weights(ema))
        _train_ema(tiny_model_factory, tmp_path / "x", give, named=named)

    bad(lambda e: e, False, "attach_probe")  # names unknown to the probe
    bad(lambda e: list(e.module.parameters())[:-1], False, "tensors; the DP optimizer trains")
    bad(lambda e: [torch.zeros(3)] * len(list(e.module.parameters())), False, "must be a float tensor of shape")
    bad(lambda e: {"lm_head.weight": torch.zeros(1)}, True, "holds 0 tensors of the name and shape")
    bad(lambda e: {k: "x" for k, _ in e.module.named_parameters()}, True, "holds 0 tensors of the name and shape")
    for junk in (5, "model.safetensors", torch.zeros(3), None.__class__):
        bad(lambda e, j=junk: j, False, "weights= must be a module")


def test_names_correspond_across_opacus_peft_ddp_and_compile_on_whole_parts():
    same = fingerprint.names_match
    assert same("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight",
                "_module.base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight")
    assert same("transformer.wte.weight", "module._orig_mod.transformer.wte.weight")
    assert same("model.layers.3.mlp.up_proj.weight", "layers.3.mlp.up_proj.weight")
    assert not same("transformer.h.10.attn.c_attn.weight", "0.attn.c_attn.weight")
    assert not same("transformer.h.10.attn.c_attn.weight", "transformer.h.0.attn.c_attn.weight")


def test_a_tensor_of_a_dtype_newer_than_the_reader_is_skipped_not_the_file(tmp_path):
    """safetensors keeps adding dtypes (F8_E8M0, F4, C64): a file holding one is still read for its floats, and a
    tensor whose offsets leave the file still makes it unreadable whatever its dtype."""
    from safetensors.numpy import save_file

    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "u": np.zeros(4, dtype=np.uint8)},
              str(tmp_path / "w.safetensors"))
    data = (tmp_path / "w.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["u"]["dtype"] = "F8_E8M0"
    body = json.dumps(header).encode()
    (tmp_path / "new.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + data[8 + n:])
    (e,) = safetensors_view.entries(tmp_path / "new.safetensors")
    assert e.name == "w" and e.values(np.array([0, 5, 11])).tolist() == [0.0, 5.0, 11.0]
    header["u"]["data_offsets"] = [0, 10 ** 9]
    body = json.dumps(header).encode()
    (tmp_path / "bad.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + data[8 + n:])
    with pytest.raises(safetensors_view.Unreadable, match="do not fit the file"):
        safetensors_view.entries(tmp_path / "bad.safetensors")


def _raw(path, header: dict, data: bytes) -> None:
    body = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)


def test_tensors_must_tile_the_data_as_the_format_requires(tmp_path):
    """The format (and the safetensors package at load) requires the byte ranges to cover the data with no hole or
    overlap: a header pointing many names at the same bytes is unreadable, not compared once per name."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    data = np.arange(8, dtype=np.float32).tobytes()
    ok = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
          "b": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]},
          "empty": {"dtype": "F32", "shape": [0], "data_offsets": [32, 32]}}
    _raw(tmp_path / "ok.safetensors", ok, data)
    assert sorted(load_file(str(tmp_path / "ok.safetensors"))) == ["a", "b", "empty"]  # the package reads it too
    assert [e.name for e in safetensors_view.entries(tmp_path / "ok.safetensors")] == ["a", "b", "empty"]
    aliased = {**ok, **{f"alias{i}": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]} for i in range(3)}}
    hole = {"a": ok["a"], "b": {**ok["b"], "dtype": "F16", "shape": [4], "data_offsets": [16, 24]}}
    for what, header, match in (("aliased", aliased, "overlap at byte 16"), ("hole", hole, "cover 24 of its 32")):
        _raw(tmp_path / f"{what}.safetensors", header, data)
        with pytest.raises(safetensors_view.Unreadable, match=match):
            safetensors_view.entries(tmp_path / f"{what}.safetensors")
        with pytest.raises(SafetensorError):  # the package itself refuses the same files
            load_file(str(tmp_path / f"{what}.safetensors"))


def test_a_header_of_thousands_of_one_shape_costs_a_bounded_number_of_reads(tiny_model_factory, tmp_path,
                                                                           monkeypatch):
    """A hostile (or giant, unnamed) model with thousands of tensors of a recorded shape: the comparisons stop at
    MAX_READS with "not tested", never a gate that runs for hours; an honest model reads about once per tensor."""
    model, card = _train(tiny_model_factory, tmp_path)
    model.save_pretrained(tmp_path / "model")
    reads = []
    real = safetensors_view.Entry.values
    monkeypatch.setattr(safetensors_view.Entry, "values", lambda self, *a: reads.append(1) or real(self, *a))
    assert _weights(tmp_path, card)["status"] == "pass"
    watched = len(json.loads((tmp_path / "gradient_canaries.json").read_text())["probe"]["weights"]["tensors"])
    assert len(reads) <= 4 * watched, (len(reads), watched)
    shape = json.loads((tmp_path / "gradient_canaries.json").read_text())["probe"]["weights"]["tensors"][-1]["shape"]
    n = int(np.prod(shape))
    many = {f"t{i}": {"dtype": "F32", "shape": shape, "data_offsets": [4 * n * i, 4 * n * (i + 1)]} for i in range(300)}
    (tmp_path / "model" / "model.safetensors").unlink()
    _raw(tmp_path / "model" / "model.safetensors", many, np.full(300 * n, 7.0, dtype=np.float32).tobytes())
    monkeypatch.setattr(fingerprint, "MAX_READS", 100)
    reads.clear()
    got = _weights(tmp_path, card)
    assert got["status"] == "not tested" and "more tensors of the recorded shapes than 100" in got["finding"], got
    assert len(reads) == 100


def test_lora_adapters_pass_and_a_merged_model_is_not_tested(tiny_model_factory, tmp_path):
    model, card = _train(tiny_model_factory, tmp_path, lora=True)
    model.save_pretrained(tmp_path / "model")  # adapter_model.safetensors: PEFT's names, not Opacus' or the probe's
    assert _weights(tmp_path, card)["status"] == "pass"
    model.merge_and_unload().save_pretrained(tmp_path / "model")
    (tmp_path / "model" / "adapter_model.safetensors").unlink()
    got = _weights(tmp_path, card)
    assert got["status"] == "not tested" and "merged LoRA adapter" in got["finding"], got


def test_no_weights_or_unreadable_weights_are_not_tested(tiny_model_factory, tmp_path):
    model, card = _train(tiny_model_factory, tmp_path)
    got = _weights(tmp_path, card)
    assert got["status"] == "not tested" and "no .safetensors file" in got["finding"]
    model.save_pretrained(tmp_path / "model")
    f = tmp_path / "model" / "model.safetensors"
    good = f.read_bytes()
    (n,) = struct.unpack("<Q", good[:8])
    header = json.loads(good[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    big = {**header, name: {**header[name], "data_offsets": [0, 10 ** 12]}}
    body = json.dumps(big).encode()
    cases = {"truncated": good[:5], "huge header length": struct.pack("<Q", 2 ** 62) + good[8:],
             "offsets past the end": struct.pack("<Q", len(body)) + body + good[8 + n:],
             "not JSON": struct.pack("<Q", 4) + b"\xff\xfe{[" + good[12:]}
    for what, data in cases.items():
        f.write_bytes(data)
        got = _weights(tmp_path, card)
        assert got["status"] == "not tested" and "not a readable safetensors file" in got["finding"], (what, got)


def test_the_typed_boundary_refuses_a_damaged_fingerprint(tiny_model_factory, tmp_path):
    _, card = _train(tiny_model_factory, tmp_path)
    f = tmp_path / "gradient_canaries.json"
    record = json.loads(f.read_text())
    w = record["probe"]["weights"]
    assert w["per_tensor"] == fingerprint.PER_TENSOR and all(len(t["index"]) >= 1 for t in w["tensors"])
    for bad in ({"schema_version": 1, "tensors": "x"}, {"schema_version": True, "tensors": w["tensors"]},
                {**w, "tensors": [{**w["tensors"][0], "values": [True] * len(w["tensors"][0]["index"])}]},
                {**w, "tensors": [{**w["tensors"][0], "index": [10 ** 9]}]}, {**w, "given": "yes"},
                {**w, "tensors": [{**w["tensors"][0], "values": ["1.0"] * len(w["tensors"][0]["index"])}]}):
        f.write_text(json.dumps({**record, "probe": {**record["probe"], "weights": bad}}))
        with pytest.raises(DpauditError, match="probe.weights"):
            scoring.whitebox(tmp_path)


def test_the_reader_gives_safetensors_own_values_in_every_float_dtype(tmp_path):
    """The hand-written reader (no torch, no whole tensor) against the safetensors package's own load."""
    from safetensors.torch import load_file, save_file

    g = torch.Generator().manual_seed(0)
    tensors = {f"t_{str(d).removeprefix('torch.')}": torch.randn(7, 5, generator=g).to(d)
               for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16)}
    tensors["ints"] = torch.arange(6, dtype=torch.int32)
    save_file(tensors, str(tmp_path / "w.safetensors"))
    loaded = load_file(str(tmp_path / "w.safetensors"))
    idx = np.array([0, 3, 17, 34])
    for e in safetensors_view.entries(tmp_path / "w.safetensors"):
        if e.name == "ints":
            assert not e.is_float
            continue
        want = loaded[e.name].reshape(-1)[torch.as_tensor(idx)].to(torch.float64).numpy()
        np.testing.assert_array_equal(e.values(idx), want)
        assert e.shape == (7, 5)


def _functional(tmp_path, weights: bool, arrays: bool = False):
    """A hand-written DP-SGD step on a linear model with the functional probe's two calls (docs/probe.md "Any
    loop"), its final weights given to save or not; torch tensors, or NumPy arrays (a JAX loop's shape)."""
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.claim.card import Claim, PrivacyCard

    g = torch.Generator().manual_seed(0)
    N, q, C, sigma = 200, 0.1, 1.0, 1.0
    x, y = torch.randn(N, 64, generator=g), torch.randn(N, generator=g)
    params = {"w": torch.zeros(64), "b": torch.zeros(())}
    probe = api.functional_probe({k: v.shape for k, v in params.items()}, sample_rate=q, clipping_norm=C,
                                 noise_multiplier=sigma, expected_batch_size=q * N, m=20, seed=0, dataset_size=N)
    steps = 40
    for _ in range(steps):
        idx = torch.nonzero(torch.rand(N, generator=g) < q).flatten()
        r = x[idx] @ params["w"] + params["b"] - y[idx]
        grads = {"w": r[:, None] * x[idx], "b": r}
        scale = torch.clamp(C / torch.sqrt((grads["w"] ** 2).sum(1) + grads["b"] ** 2 + 1e-12), max=1.0)
        clipped = {"w": (scale[:, None] * grads["w"]).sum(0), "b": (scale * grads["b"]).sum()}
        clipped = probe.add_canaries(clipped, records=len(idx))
        update = {k: (v + sigma * C * torch.randn(v.shape, generator=g)) / (q * N) for k, v in clipped.items()}
        probe.observe(update)
        params = {k: params[k] - 0.1 * update[k] for k in params}
    tmp_path.mkdir(parents=True, exist_ok=True)
    given = {k: v.numpy() for k, v in params.items()} if arrays else params
    probe.save(tmp_path, **({"weights": given} if weights else {}))
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in params.items()}, str(tmp_path / "model.safetensors"))
    event = SubsampledGaussian(q, sigma, steps, "poisson")
    return probe, PrivacyCard(claim=Claim(epsilon=50.0, delta=1e-5), events=[event], clipping_norm=C,
                              expected_batch_size=q * N, dataset_size=N)


@pytest.mark.parametrize("arrays", [False, True], ids=["tensors", "numpy"])
def test_the_functional_probe_ties_its_record_to_the_final_weights_it_is_given(tmp_path, arrays):
    _, card = _functional(tmp_path / "given", weights=True, arrays=arrays)
    assert _weights(tmp_path / "given", card)["status"] == "pass"
    from safetensors.torch import save_file

    save_file({"w": torch.ones(64), "b": torch.ones(())}, str(tmp_path / "given" / "model.safetensors"))
    assert _weights(tmp_path / "given", card)["status"] == "fail"  # other weights beside its record
    _, card = _functional(tmp_path / "not-given", weights=False)
    got = _weights(tmp_path / "not-given", card)
    assert got["status"] == "not tested" and "probe.save(folder, weights=params)" in got["finding"], got


def test_the_functional_probe_refuses_weights_that_are_not_its_tensors(tmp_path):
    probe, _ = _functional(tmp_path / "a", weights=True)
    for bad, needle in (({"w": torch.zeros(5), "b": torch.zeros(())}, "must be a float tensor of the probe's shape"),
                        ({"w": torch.zeros(64)}, "must be a dict with the keys"),
                        ({"w": torch.zeros(64, dtype=torch.int64), "b": torch.zeros(())}, "must be a float tensor")):
        with pytest.raises(DpauditError, match=needle):
            probe.save(tmp_path / "b", weights=bad)


def test_files_that_are_not_regular_are_never_opened(tiny_model_factory, tmp_path):
    """A FIFO named model.safetensors would block a read and /dev/zero never end one: each is "not tested", at
    once, never opened (dpaudit evaluate and check --checkpoint read these files)."""
    import os

    _, card = _train(tiny_model_factory, tmp_path)
    (tmp_path / "model").mkdir()
    f = tmp_path / "model" / "model.safetensors"
    for make in (lambda: os.mkfifo(f), lambda: f.symlink_to("/dev/zero"), lambda: f.mkdir()):
        make()
        got = _weights(tmp_path, card)
        assert got["status"] == "not tested" and "not a regular file" in got["finding"], got
        f.rmdir() if f.is_dir() and not f.is_symlink() else f.unlink()


def test_dpaudit_runs_own_checkpoint_is_tied_to_its_weights(run_dir):
    """The session's end-to-end `dpaudit run` (tests/conftest.py): the DP variant's record, written by the engine's
    probe, matches the weights the run saved (model/model.safetensors), at evaluation."""
    report = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    (entry,) = report["mechanism_checks"]
    checks = {c["check"]: c for c in entry["checks"]}
    assert checks["weights"]["status"] == "pass", checks["weights"]
    record = json.loads((run_dir / "dp" / "checkpoint" / "gradient_canaries.json").read_text())
    n = len(record["probe"]["weights"]["tensors"])
    assert checks["weights"]["finding"].startswith(f"{n} of the {n} tensors the probe watched match")
