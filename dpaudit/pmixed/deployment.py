"""A PMixED deployment: the public model, N LoRA adapters fine-tuned on disjoint partitions, the privacy
parameters and the query budget, in one folder, answering queries only the way its guarantee covers.

Folder (docs/contracts.md, "PMixED deployment")::

    pmixed.json          what the deployment is: adapters, N, q, alpha, T, (eps_G, delta), partition rule
    privacy_card.json    the claim (unit = partition, add/remove one partition) and its pmixed_prediction event
    canaries.json        the canary manifest (which partition holds each inserted canary)
    run.json             how it was trained
    base_model/          the public model p0 (weights: never committed)
    adapters/pNN/        one LoRA adapter per partition (weights: never committed)
    ledger.json          the query budget: {"queries": T, "spent": k} (dpaudit.pmixed.ledger)
    transcript.jsonl     every answered query: context ids, the realised subset, beta, lambdas, the token

Answering (Alg. 1): S_t ~ Poisson(q) over the models without replacement (one independent coin per model),
beta for the realised |S_t| (:func:`dpaudit.accounting.pmixed_rdp.beta_star`), lambda_i by the feasible-side
bisection (:mod:`dpaudit.pmixed.mixing`), y_t drawn from the full mixture at temperature 1. Nothing else is
released: no probabilities, no top-k, no other temperature. Every query is reserved in the ledger before
its output is computed, so the (T+1)-th is refused, also from another process.
"""

from __future__ import annotations

import json
import secrets
import warnings
from pathlib import Path

import torch

from dpaudit.errors import DpauditError
from dpaudit.io import read_json
from dpaudit.pmixed import mixing
from dpaudit.pmixed.ledger import Ledger
from dpaudit.pmixed.spec import SPEC, PMixedSpec  # noqa: F401 - PMixedSpec re-exported
from dpaudit.tokens import bos_id

TRANSCRIPT = "transcript.jsonl"
SCHEMA_VERSION = 1


def partition_of(key: str, n_models: int, salt: str = "pmixed") -> int:
    """The data-independent partition rule: a hash of the unit's id (never its index or its content), so
    adding or removing one user changes one partition only."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{salt}:{key}".encode()).digest()[:8], "big") % n_models


def is_deployment(path: Path) -> bool:
    return (Path(path) / SPEC).is_file()


def check_decoding(temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                   greedy: bool = False) -> None:
    """The guarantee covers ancestral sampling from the full mixture at temperature 1 only (§5.1)."""
    if temperature != 1.0:
        raise DpauditError(f"temperature {temperature} voids PMixED's guarantee (it covers sampling at temperature 1 "
                           "only); drop the option")
    if top_k is not None:
        raise DpauditError("top-k sampling voids PMixED's guarantee (it covers the full mixture only); drop top_k")
    if top_p is not None:
        raise DpauditError("top-p sampling voids PMixED's guarantee (it covers the full mixture only); drop top_p")
    if greedy:
        raise DpauditError("greedy decoding voids PMixED's guarantee (it covers sampling only); drop greedy")


class Deployment:
    """Load with :meth:`load`; answer with :meth:`generate`. The evaluator's view (distributions, never
    released) is :meth:`next_token_logprobs`."""

    def __init__(self, path: Path, spec: PMixedSpec, model, tokenizer, adapters: list[str], device):
        self.path, self.spec, self.model, self.tokenizer, self.adapters = Path(path), spec, model, tokenizer, adapters
        self.device = device
        self.ledger = Ledger(self.path, spec.queries)  # T from pmixed.json, never from the ledger file

    @classmethod
    def load(cls, path: Path, device: str | None = None) -> Deployment:
        path = Path(path)
        if not is_deployment(path):
            raise DpauditError(f"{path} is not a PMixED deployment ({SPEC} missing); train one with "
                               "`dpaudit run` and method = 'pmixed'")
        d = read_json(path / SPEC, "PMixED deployment", "")
        if d.get("schema_version") != SCHEMA_VERSION:
            raise DpauditError(f"{path / SPEC}: schema_version {d.get('schema_version')!r} is not supported (this "
                               f"dpaudit reads {SCHEMA_VERSION})")
        spec = PMixedSpec.from_dict(d["spec"], str(path / SPEC))
        adapters = d.get("adapters")
        if not isinstance(adapters, list) or not all(isinstance(a, str) and a for a in adapters):
            raise DpauditError(f"{path / SPEC}: 'adapters' must be a list of folder names inside the deployment")
        if len(adapters) != spec.n_models:
            raise DpauditError(f"{path / SPEC}: {len(adapters)} adapters listed for N = {spec.n_models}")
        from dpaudit.io import check_contained, contained

        for a in adapters:  # inside the deployment (no absolute path, no ../, no symlink out), then complete
            contained(path, f"{a}/adapter_config.json", f"{path / SPEC}: adapter")
            check_contained(path / a, f"adapter {a}")
        check_contained(path / "base_model", "base model")
        Ledger(path, spec.queries).state()  # no readable ledger, or one whose T is not pmixed.json's: no answers
        from dpaudit.tasks import models

        base, tok = models.load_dir(path / "base_model")
        from dpaudit import device as devices

        dev = devices.resolve(device or "auto", "device")
        with warnings.catch_warnings():  # transformers' deprecation notices inside peft: not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            model = models.load_adapters(base, [path / a for a in adapters], [f"p{k:04d}" for k in range(len(adapters))])
        return cls(path, spec, model.to(dev).eval(), tok, adapters, dev)

    def _name(self, k: int) -> str:
        return f"p{k:04d}"

    @torch.inference_mode()
    def _logits(self, ids: torch.Tensor, k: int | None) -> torch.Tensor:
        """Next-token logits at every position of ``ids`` (B, L) under model k (None = the public model)."""
        if k is None:
            with self.model.disable_adapter():
                return self.model(input_ids=ids).logits
        self.model.set_adapter(self._name(k))
        return self.model(input_ids=ids).logits

    def next_token_logprobs(self, ids: torch.Tensor, models: list[int] | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log p0, log p_k for k in ``models``) in float64 at every position of one sequence ``ids`` (L,):
        shapes (L, V) and (len(models), L, V). The evaluator's view: never released by a deployment."""
        models = list(range(self.spec.n_models)) if models is None else models
        x = ids.to(self.device).view(1, -1)
        lp0 = mixing.log_probs(self._logits(x, None)[0])
        lps = [mixing.log_probs(self._logits(x, k)[0]) for k in models]
        return lp0, (torch.stack(lps) if lps else lp0.new_empty((0,) + tuple(lp0.shape)))

    def sample_subset(self, generator: torch.Generator) -> list[int]:
        """S_t: every model kept independently with probability q (Poisson, no duplicates)."""
        coins = torch.rand(self.spec.n_models, generator=generator, device=generator.device)
        return [int(i) for i in torch.nonzero(coins < self.spec.sample_rate).flatten().tolist()]

    def answer_distribution(self, lp0: torch.Tensor, lps: torch.Tensor, subset: list[int]
                            ) -> tuple[torch.Tensor, float, list[float]]:
        """Alg. 1 for one query: (log p of the mixture, beta, lambdas of the members) from the distributions of
        the public model and of the subset's members (``lps`` in the order of ``subset``)."""
        if not subset:
            return lp0, 0.0, []
        beta = self.spec.betas[len(subset) - 1]
        lam = mixing.solve_lambda(lps, lp0, beta * self.spec.alpha, self.spec.alpha)
        return mixing.mixture(lps, lp0, lam), beta, [float(x) for x in lam]

    def generator(self, seed: int | None) -> torch.Generator:
        """A generator on the deployment's device; ``seed=None`` seeds it from the OS's secure randomness
        (release use: the seed is never stored), an integer makes a run reproducible (evaluation only)."""
        g = torch.Generator(device=self.device)
        g.manual_seed(secrets.randbits(63) if seed is None else int(seed))
        return g

    def generate(self, prompt: str, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None, greedy: bool = False, seed: int | None = None) -> str:
        """Continue ``prompt`` by ``max_new_tokens`` sampled tokens, each one query of the budget. Refuses,
        before answering anything, what voids the guarantee or what the budget cannot cover."""
        check_decoding(temperature, top_k, top_p, greedy)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise DpauditError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        steps = self.ledger.reserve(max_new_tokens)  # spent now, whatever happens next
        g = self.generator(seed)
        ids = [bos_id(self.tokenizer)] + self.tokenizer(prompt, add_special_tokens=False).input_ids
        out = []
        from dpaudit.io import open_append

        with open_append(self.path / TRANSCRIPT, "the deployment's transcript") as log:
            for t in steps:
                subset = self.sample_subset(g)
                x = torch.tensor(ids[-self.spec.max_len:], device=self.device)  # the last max_len tokens
                lp0, lps = self.next_token_logprobs(x, subset)
                logp, beta, lam = self.answer_distribution(lp0[-1], lps[:, -1], subset)
                y = int(torch.multinomial(torch.exp(logp), 1, generator=g).item())
                log.write(json.dumps({"t": t, "context": ids, "subset": subset, "beta": beta, "lambdas": lam,
                                      "token": y}) + "\n")
                ids.append(y)
                out.append(y)
                if y == self.tokenizer.eos_token_id:
                    break
        return self.tokenizer.decode(out)


def read_transcript(path: Path) -> list[dict]:
    f = Path(path) / TRANSCRIPT
    return [json.loads(line) for line in f.read_text().split("\n") if line.strip()] if f.exists() else []


def write_spec(folder: Path, spec: PMixedSpec, adapters: list[str]) -> None:
    from dpaudit.io import write_text

    write_text(Path(folder) / SPEC, json.dumps({"schema_version": SCHEMA_VERSION, "kind": "pmixed_deployment",
                                                 "spec": spec.to_dict(), "adapters": adapters}, indent=1) + "\n")
