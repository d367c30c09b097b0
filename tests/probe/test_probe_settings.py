"""One ProbeSettings value for every adapter (issue wave 5 · 0/5 item 4): attach_probe, Probe, functional_probe and
the Trainer callback take the same value or its fields as keywords, check every setting in one place, and cannot
drift apart (a setting added to ProbeSettings reaches all four)."""

import dataclasses

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api
from dpaudit.errors import DpauditError
from dpaudit.probe import ProbeSettings
from dpaudit.probe.hf import ProbeCallback


def _dp_optimizer():
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                                      data_loader=DataLoader(data, batch_size=8),
                                                      noise_multiplier=1.0, max_grad_norm=1.0)
    return model, opt, loader


def test_every_adapter_takes_the_same_value_and_the_same_keywords():
    s = ProbeSettings(sample_rate=0.2, m=16, seed=3, record_steps=False, dataset_size=40, on_fail=None)
    model, opt, _ = _dp_optimizer()
    probe = api.attach_probe(opt, s, model=model)
    assert probe.settings == s and probe.canaries.m == 16
    _, opt2, _ = _dp_optimizer()
    assert api.attach_probe(opt2, **{f.name: getattr(s, f.name) for f in dataclasses.fields(s)}).settings == s
    cb = ProbeCallback(s, save_to="x")
    assert cb.settings == s and ProbeCallback(sample_rate=0.2, record_steps=False).settings.record_steps is False
    f = api.functional_probe([(64,)], dataclasses.replace(s, record_steps=True, coordinates="model"),
                             clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=8)
    assert f.settings.m == 16 and f.canaries.m == 16
    # keywords over a value: the value is not changed
    assert api.attach_probe(_dp_optimizer()[1], s, m=8).settings.m == 8 and s.m == 16


@pytest.mark.parametrize("options,needle", [
    ({"sample_rate": 0.0}, "sample_rate"), ({"sample_rate": 0.1, "m": 1}, "m >= 2"),
    ({"sample_rate": 0.1, "coordinates": "rows"}, "coordinates"), ({"sample_rate": 0.1, "clip_canaries": -1}, "clip_canaries"),
    ({"sample_rate": 0.1, "on_fail": "stop"}, "on_fail"), ({"sample_rate": 0.1, "dataset_size": 0}, "dataset_size"),
    ({"sample_rate": 0.1, "sampler": "uniform"}, "sampler"), ({"sample_rate": 0.1, "kind": "wide"}, "kind"),
    ({"sample_rate": 0.1, "record_steps": "no"}, "record_steps"), ({"sample_rate": 0.1, "mm": 5}, "unknown probe setting 'mm'"),
    ({"m": 10}, "needs sample_rate"),
    # a negative seed crashed NumPy's generator when the probe attached; true read as seed 1
    ({"sample_rate": 0.1, "seed": -1}, "seed"), ({"sample_rate": 0.1, "seed": True}, "seed"),
])
def test_a_bad_setting_is_one_line_naming_it_in_every_adapter(options, needle):
    for make in (lambda: api.attach_probe(_dp_optimizer()[1], **options), lambda: ProbeCallback(**options),
                 lambda: api.functional_probe([(64,)], clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=8,
                                              **{k: v for k, v in options.items() if k not in ("coordinates",
                                                                                                "clip_canaries",
                                                                                                "record_steps")})
                 if not {"coordinates", "clip_canaries", "record_steps"} & set(options) else ProbeSettings.of(None, options)):
        with pytest.raises(DpauditError, match=needle) as e:
            make()
        assert "\n" not in str(e.value)


def test_the_functional_probe_refuses_settings_that_do_not_apply_to_it():
    with pytest.raises(DpauditError, match="do\\(es\\) not apply"):
        api.functional_probe([(64,)], sample_rate=0.1, coordinates="block", clipping_norm=1.0, noise_multiplier=1.0,
                             expected_batch_size=8)
    with pytest.raises(DpauditError, match="records every step"):
        api.functional_probe([(64,)], ProbeSettings(sample_rate=0.1, record_steps=False), clipping_norm=1.0,
                             noise_multiplier=1.0, expected_batch_size=8)
