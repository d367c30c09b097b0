"""Every committed config parses with today's code, so a reproduction command in a README still runs."""

from pathlib import Path

import pytest

from dpaudit.gate.policy import load_policy
from dpaudit.run import config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# sub-folders too, but configs/paper/, which names the user's own model folders (tests/run/test_dry_run.py)
RUN_CONFIGS = sorted(p for p in CONFIGS.rglob("*.toml") if p.name != "policy.toml" and p.parent.name != "paper")


def test_there_are_configs():
    assert len(RUN_CONFIGS) >= 10


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_parses(path):
    cfg = config.load(path)
    names = [v.name for v in cfg.variants]
    assert names and len(names) == len(set(names))


def test_policy_parses_and_is_the_default_one():
    """`dpaudit check` without --policy applies exactly the documented default policy."""
    assert load_policy(CONFIGS / "policy.toml") == load_policy(None)


BASE = """
[task]
name = "{task}"
[model]
name = "tiny-gpt2"
[train]
{train}
[[variants]]
name = "a"
{a}
[[variants]]
name = "b"
{b}
"""


def _parse(train="", a="", b="", task="sentiment"):
    import tomllib

    return config.parse(tomllib.loads(BASE.format(task=task, train=train, a=a, b=b)))


@pytest.mark.parametrize("where,train,a,b,task,msg", [
    ("variant", "", "user_cap = 4", "", "sentiment", "train.user_cap applies to the user-level methods"),
    ("train", "selection = 'longest'", "", "", "sentiment", "train.selection applies to the user-level methods"),
    ("variant", "", "lora_r = 4", "trainable = 'lora'", "sentiment", "train.lora_r applies to trainable = 'lora'"),
    ("train", "lora_targets = 'all-linear'", "", "", "sentiment", "train.lora_targets applies to trainable = 'lora'"),
    ("variant", "method = 'user_dp_sgd'", "grad_sample_mode = 'ghost'", "", "userlm",
     "grad_sample_mode applies to record-level DP training as 'ghost'"),
    ("variant", "", "tied_embeddings = 'untie'", "", "sentiment", "tied_embeddings applies to 'freeze', or 'untie'"),
    ("variant", "", "gradient_canary_kind = 'sparse'", "", "sentiment", "gradient_canary_kind applies to"),
    ("variant", "", "head_lr = 0.01", "", "sentiment", "head_lr applies to classifier models"),
    ("variant", "method = 'user_dp_sgd'", "autocast = 'bf16'", "", "userlm",
     "autocast applies to record-level non-private runs"),
])
def test_options_that_do_not_apply_are_refused(where, train, a, b, task, msg):
    with pytest.raises(config.DpauditError, match=msg):
        _parse(train, a, b, task)


def test_options_that_apply_to_some_variant_are_kept():
    cfg = _parse("lora_r = 4\ngrad_sample_mode = 'ghost'", "trainable = 'lora'", "target_epsilon = inf")
    assert cfg.variants[0].trainer.lora_r == 4
    _parse("", "grad_sample_mode = 'ghost'\ntied_embeddings = 'untie'", "tied_embeddings = 'freeze'")
    _parse("method = 'user_dp_sgd'\nuser_cap = 2", "grad_sample_mode = 'hooks'", "method = 'group_privacy'",
           task="userlm")
    _parse("", "gradient_canaries = 10\ngradient_canary_kind = 'sparse'")


def test_check_reads_a_report_without_torch():
    """`dpaudit check` must stay light (CI gates run it on every commit): it may not import torch, opacus or
    transformers (benchmarks/bench_check.py measures its load time)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; from dpaudit.cli import main; "
            "rc = main(['check', 'reports/demo/dp-eps8/report/report.json', '--policy', 'configs/policy.toml']); "
            "heavy = [m for m in ('torch', 'opacus', 'transformers', 'dp_accounting') if m in sys.modules]; "
            "print(rc, heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout + out.stderr


def test_reading_every_config_imports_no_torch():
    """Parsing and validating a run config is light (docs/architecture.md, Options): torch, transformers, opacus,
    peft and datasets are blocked in a fresh interpreter and every committed config still loads."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys, glob\n"
            "for m in ('torch', 'transformers', 'opacus', 'peft', 'datasets'): sys.modules[m] = None\n"
            "from dpaudit.run import config\n"
            f"files = [f for f in sorted(glob.glob({str(root / 'configs' / '**' / '*.toml')!r}, recursive=True))"
            " if 'policy' not in f and '/paper/' not in f]\n"
            "for f in files: config.load(f)\n"
            "print(len(files))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) >= 15
