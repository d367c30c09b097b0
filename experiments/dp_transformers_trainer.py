"""dp-transformers' own trainer, as shipped, with the probe attached (issue wave 5 · 3/5 item 5).

dp-transformers 1.0.0 (Microsoft, the newest release on the package index) trains with ``OpacusDPTrainer``: its
``ShuffledAuthorSampler`` draws shuffled fixed-size batches (``drop_last``), while its accountants (Opacus' RDP and
``prv_accountant``) account the run as Poisson subsampling at q = B / N. The probe should fail ``sampling`` on it
(the class Cebere et al. count as the first bug of DP libraries), and pass when the same trainer draws its batches
with the package's own ``PoissonAuthorSampler``.

The package declares ``torch <= 1.12.1`` and was written for transformers 4; it is installed with ``--no-deps``
(requirements-dp-transformers.txt) and run on transformers 5 through the smallest shim that lets its code run
unchanged (:func:`shim`, three lines of difference, each stated there). Nothing in its sampling, clipping, noise or
accounting is changed.

    python experiments/dp_transformers_trainer.py --sampler shuffled --out out/dpt-shipped

writes the model, its privacy card (dp-transformers' own accounting) and the probe's records into that folder; the
mechanism checks are what tests/probe/test_dp_transformers_trainer.py and the conformance suite read from it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch


def shim() -> None:
    """The three places dp-transformers 1.0.0 meets transformers 5, each bridged without touching what it computes:

    1. ``Trainer.training_step`` gained ``num_items_in_batch``: the subclass accepts it and calls dp-transformers'
       own body, which reads ``use_cuda_amp``, ``use_cpu_amp``, ``use_apex`` and ``deepspeed`` (attributes
       transformers 5 removed): they are given their transformers-4 values for a CPU/fp32 run (all off).
    2. Accelerate hands callbacks its ``AcceleratedOptimizer``; dp-transformers' ``DPCallback`` calls
       ``signal_skip_step`` on it: the wrapper forwards the call to the Opacus optimizer it holds.
    3. ``Trainer._get_train_sampler`` now takes the dataset: dp-transformers' override takes none; its own
       ``get_train_dataloader`` (which calls it without one) is what runs, so the argument is accepted and ignored.
    """
    from accelerate.optimizer import AcceleratedOptimizer
    from dp_transformers import dp_utils

    if not hasattr(AcceleratedOptimizer, "signal_skip_step"):
        AcceleratedOptimizer.signal_skip_step = lambda self, do_skip=True: self.optimizer.signal_skip_step(do_skip)
    cls = dp_utils.OpacusDPTrainer
    if getattr(cls, "_dpaudit_shim", False):
        return
    body, sampler = cls.training_step, cls._get_train_sampler

    def training_step(self, model, inputs, num_items_in_batch=None):
        for name in ("use_cuda_amp", "use_cpu_amp", "use_apex", "deepspeed"):
            if not hasattr(self, name):
                setattr(self, name, False)
        return body(self, model, inputs)

    cls.training_step = training_step
    cls._get_train_sampler = lambda self, train_dataset=None: sampler(self)
    cls._dpaudit_shim = True


class Records(torch.utils.data.Dataset):
    """N random token sequences (a causal LM's records), labels = inputs."""

    def __init__(self, n: int, length: int, vocab: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i].tolist()}


def run(sampler: str, out: Path, *, n: int = 256, batch: int = 16, epochs: float = 3.0, sigma: float = 1.0,
        clip: float = 1.0, seed: int = 0, delta: float = 1e-5, m: int = 200, on_fail: str | None = "warn"):
    """Train a tiny GPT-2 with dp-transformers' ``OpacusDPTrainer`` (``sampler``: ``shuffled``, the package's
    default, or ``poisson``, its ``PoissonAuthorSampler`` at the rate it accounts), the probe (``m`` canaries)
    attached by ``ProbeCallback``; save the model, its privacy card (the mechanism dp-transformers' RDP accountant
    recorded: Poisson at q = B / N, sigma, one event per step) and the probe's records into ``out``. Returns
    (probe, card, out). Over 8 parameters: the sampler and folder, then keyword settings of a run, each a number."""
    shim()
    from dp_transformers import PoissonAuthorSampler, PrivacyArguments, TrainingArguments
    from dp_transformers.dp_utils import DataCollatorForPrivateCausalLanguageModeling, OpacusDPTrainer
    from tokenizers import Tokenizer, models
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from dpaudit.accounting import SubsampledGaussian, compute
    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.claim.opacus_card import probe_runs
    from dpaudit.probe.hf import ProbeCallback

    torch.manual_seed(seed)
    vocab = 64
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)},
                                                                               unk_token="t0")),
                                  pad_token="t0", eos_token="t0")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                       tie_word_embeddings=False, bos_token_id=0, eos_token_id=0))
    data = Records(n, 12, vocab, seed)
    args = TrainingArguments(output_dir=str(out / "trainer"), per_device_train_batch_size=batch,
                             num_train_epochs=epochs, learning_rate=1e-3, lr_scheduler_type="constant",
                             report_to=[], save_strategy="no", logging_strategy="no", remove_unused_columns=False,
                             disable_tqdm=True, use_cpu=True, seed=seed)
    privacy = PrivacyArguments(noise_multiplier=sigma, per_sample_max_grad_norm=clip, target_delta=delta)
    q = batch / n
    probe_cb = ProbeCallback(sample_rate=q, dataset_size=n, m=m, seed=seed, save_to=out, on_fail=on_fail)

    class Trainer(OpacusDPTrainer):
        def _get_train_sampler(self, train_dataset=None):
            if sampler == "poisson":  # the package's own Poisson sampler, at the rate its accountants assume
                return PoissonAuthorSampler(self.author_mapping, self.sampling_probability)
            return super()._get_train_sampler()

    trainer = Trainer(model=model, args=args, train_dataset=data, privacy_args=privacy,
                      data_collator=DataCollatorForPrivateCausalLanguageModeling(tok))
    trainer.add_callback(probe_cb)  # dp-transformers passes its own callbacks to the Trainer: one more is added
    trainer.train()
    # the card dp-transformers' own accounting describes: one Poisson event per step at q = B / N
    hist = trainer.rdp_accountant.history
    steps = sum(s for _, _, s in hist)
    event = SubsampledGaussian(q, sigma, steps, "poisson")
    eps = compute([event], delta, "prv").epsilon
    out.mkdir(parents=True, exist_ok=True)
    trainer.model._module.save_pretrained(out)
    tok.save_pretrained(out)
    card = PrivacyCard(claim=Claim(epsilon=eps, delta=delta), events=[event], clipping_norm=clip,
                       expected_batch_size=batch, dataset_size=n, method="dp-transformers 1.0.0 OpacusDPTrainer",
                       extra={"probe_runs": probe_runs(trainer.optimizer),
                              "dp_transformers": {"sampler": sampler, "rdp_epsilon": trainer.get_rdp_epsilon()}})
    card.save(out / "privacy_card.json")
    return probe_cb.probe, card, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sampler", choices=("shuffled", "poisson"), default="shuffled",
                   help="shuffled: dp-transformers' default ShuffledAuthorSampler; poisson: its PoissonAuthorSampler")
    p.add_argument("--out", type=Path, required=True, help="folder for the model, its card and the probe's records")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, the model and the trainer")
    a = p.parse_args(argv)
    probe, card, _ = run(a.sampler, a.out, seed=a.seed)
    print(json.dumps({"sampler": a.sampler, "steps": probe.steps, "claimed_epsilon": card.claim.epsilon,
                      **card.extra["dp_transformers"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
