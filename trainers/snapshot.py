"""Snapshots of a training run, and resuming from the latest one (docs/scaling.md#resume).

Every ``every`` logical steps the engine saves everything the rest of the run depends on: the trainable weights,
the optimizer state, every random stream (data sampler, noise, dropout, white-box canaries), the losses and
clipping statistics so far, and the privacy ledger (the events spent by the steps taken). A resumed run restores
all of it, so the steps it re-takes after the snapshot draw the very same batches and the very same noise as the
lost ones did: nothing computed after the snapshot was ever written out, and its re-computation releases nothing
new. The final card therefore equals the uninterrupted run's, and so does the ledger.

Layout: ``FOLDER/step-<t>/`` (``tensors.safetensors`` + ``state.json``, written to a temporary folder and
renamed), ``FOLDER/LATEST`` (the name of the newest complete one, replaced atomically). A snapshot of another
run (a different config, manifest, data or phase: ``fingerprint``) is refused, never loaded. No pickle: tensors
go through safetensors, the rest through JSON.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dpaudit.errors import DpauditError

FORMAT = 1


@dataclass(frozen=True)
class Snapshots:
    folder: Path
    every: int  # logical steps between snapshots (0: none)
    fingerprint: str  # what the run is: config, variant, manifest, data, phase
    resume: bool = False  # continue from the latest snapshot when one exists

    def latest(self) -> Path | None:
        f = self.folder / "LATEST"
        if not f.exists():
            return None
        d = self.folder / f.read_text().strip()
        if not (d / "state.json").exists() or not (d / "tensors.safetensors").exists():
            raise DpauditError(f"{self.folder} names snapshot {d.name!r} but it is incomplete; remove {self.folder} "
                               "to train the variant from its start")
        return d

    def load(self) -> tuple[dict, dict] | None:
        """(state, tensors) of the latest snapshot when resuming, else None. Refuses another run's snapshot."""
        if not self.resume:
            return None
        d = self.latest()
        if d is None:
            return None
        try:
            state = json.loads((d / "state.json").read_text())
        except (OSError, ValueError) as e:
            raise DpauditError(f"{d}/state.json cannot be read ({e}); remove {self.folder} to train the variant from "
                               "its start") from None
        if not isinstance(state, dict):
            raise DpauditError(f"{d}/state.json is not a snapshot; remove {self.folder} to start over")
        if state.get("digest") != _digest(state, d / "tensors.safetensors"):
            raise DpauditError(f"the snapshot in {d} changed after it was written (its digest does not match: an "
                               "edited state, ledger or tensors); remove the snapshot folder to start over")
        if state.get("format") != FORMAT or state.get("fingerprint") != self.fingerprint:
            raise DpauditError(f"the snapshot in {self.folder} belongs to a different run (config, canaries, data or "
                               "method changed since it was written); resume with the same config, or remove "
                               f"{self.folder} to start over")
        from safetensors.torch import load_file

        try:
            return state, load_file(str(d / "tensors.safetensors"), device="cpu")
        except Exception as e:  # safetensors raises its own error types on a damaged file
            raise DpauditError(f"{d}/tensors.safetensors cannot be read ({type(e).__name__}); remove {self.folder} "
                               "to start over") from None

    def due(self, step: int, last: bool) -> bool:
        return bool(self.every) and not last and step % self.every == 0

    def save(self, step: int, state: dict, tensors: dict[str, torch.Tensor]) -> Path:
        from safetensors.torch import save_file

        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"step-{step:09d}"
        tmp = self.folder / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / "tensors.safetensors"))
        body = {"format": FORMAT, "fingerprint": self.fingerprint, "step": step, **state}
        body["digest"] = _digest(json.loads(json.dumps(body)), tmp / "tensors.safetensors")
        (tmp / "state.json").write_text(json.dumps(body))
        _fsync_dir(tmp)
        final = self.folder / name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        pointer = self.folder / ".LATEST.tmp"
        pointer.write_text(name)
        os.replace(pointer, self.folder / "LATEST")  # the switch: before it the previous snapshot is the latest
        for old in self.folder.glob("step-*"):
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def clear(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _digest(state: dict, tensors: Path) -> str:
    """sha256 of a snapshot's state (less the digest) and its tensors' bytes: an edit after it was written (fewer
    steps in the ledger, other weights) is refused on resume. It detects accidents and casual edits, not someone who
    recomputes it (docs/security.md); the step count is also checked against the optimizer's own (restore)."""
    import hashlib

    h = hashlib.sha256(json.dumps({k: v for k, v in state.items() if k != "digest"}, sort_keys=True).encode())
    try:
        with open(tensors, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return ""
    return h.hexdigest()


def _fsync_dir(d: Path) -> None:
    for f in d.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


# ---- what the engine's objects hold, as (JSON state, tensors) -------------------------------------------------

def params_state(module, tensors: dict) -> None:
    for name, p in module.named_parameters():
        if p.requires_grad:
            tensors[f"param/{name}"] = p.detach()


def restore_params(module, tensors: dict) -> None:
    names = [n for n, p in module.named_parameters() if p.requires_grad]
    missing = [n for n in names if f"param/{n}" not in tensors]
    if missing:
        raise DpauditError(f"the snapshot lacks trainable parameter {missing[0]!r}; remove the snapshot folder to "
                           "start over")
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.requires_grad:
                p.copy_(tensors[f"param/{name}"].to(p.device, p.dtype))


def optimizer_state(opt, tensors: dict) -> dict:
    sd = opt.state_dict()
    plain: dict = {}
    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"optim/{idx}/{key}"] = value
            else:
                plain.setdefault(str(idx), {})[key] = value
    return {"keys": {str(i): sorted(e) for i, e in sd["state"].items()}, "plain": plain}


def restore_optimizer(opt, state: dict, tensors: dict) -> None:
    sd = opt.state_dict()
    restored = {}
    for idx, keys in state["keys"].items():
        entry = {}
        for key in keys:
            entry[key] = tensors[f"optim/{idx}/{key}"] if f"optim/{idx}/{key}" in tensors else state["plain"][idx][key]
        restored[int(idx)] = entry
    opt.load_state_dict({"state": restored, "param_groups": sd["param_groups"]})


def generator_state(name: str, g: torch.Generator, tensors: dict) -> None:
    tensors[f"rng/{name}"] = g.get_state()


def restore_generator(name: str, g: torch.Generator, tensors: dict) -> None:
    g.set_state(tensors[f"rng/{name}"])


def global_rng_state(tensors: dict) -> None:
    """torch's global streams (dropout): the CPU one and, where used, every CUDA device's."""
    tensors["rng/torch_cpu"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/torch_cuda{i}"] = s


def restore_global_rng(tensors: dict) -> None:
    torch.set_rng_state(tensors["rng/torch_cpu"])
    cuda = sorted(k for k in tensors if k.startswith("rng/torch_cuda"))
    if cuda:
        torch.cuda.set_rng_state_all([tensors[k] for k in sorted(cuda, key=lambda k: int(k[len("rng/torch_cuda"):]))])


def numpy_rng_state(rng: np.random.Generator) -> dict:
    return rng.bit_generator.state


def restore_numpy_rng(rng: np.random.Generator, state: dict) -> None:
    rng.bit_generator.state = state


@dataclass
class RunParts:
    """The objects of one engine run whose state a snapshot holds (:func:`dpaudit.trainers.engine.train`)."""

    module: torch.nn.Module
    optimizer: object
    generators: dict  # name -> torch.Generator (data sampler, noise)
    numpy_rngs: dict  # name -> np.random.Generator (user sampler)
    canaries: list | None
    stats: object | None  # ClipStats
    ledger: object  # steps -> list of event dicts: the privacy spent by that many logical steps
    stream: object | None = None  # data.Poisson / data.Shuffled: where the record batches are

    def collect(self, step: int, losses: list[float]) -> tuple[dict, dict]:
        tensors: dict = {}
        params_state(self.module, tensors)
        state = {"optimizer": optimizer_state(self.optimizer, tensors), "losses": losses,
                 "ledger": {"steps": step, "events": self.ledger(step)},
                 "numpy_rngs": {k: numpy_rng_state(g) for k, g in self.numpy_rngs.items()}}
        for name, g in self.generators.items():
            generator_state(name, g, tensors)
        global_rng_state(tensors)
        if self.canaries:
            state["canaries"] = [c.snapshot(f"canary/{i}", tensors) for i, c in enumerate(self.canaries)]
        if self.stats is not None:
            state["clip_stats"] = {"fraction_clipped": self.stats.fraction_clipped,
                                   "median_norm": self.stats.median_norm}
        if self.stream is not None:
            if self.stream.pass_start is None:
                raise DpauditError("the batch sampler has no seeded generator: this run cannot be snapshotted")
            tensors["rng/pass_start"] = self.stream.pass_start
            state["taken"] = self.stream.taken
        return state, tensors

    def restore(self, state: dict, tensors: dict) -> tuple[int, list[float]]:
        step = int(state["step"])
        if state["ledger"] != {"steps": step, "events": self.ledger(step)}:
            raise DpauditError("the snapshot's privacy ledger does not match this run's mechanism; remove the snapshot "
                               "folder to start over")
        if len(state.get("losses", [])) != step:
            raise DpauditError(f"the snapshot records {len(state.get('losses', []))} step losses for step {step}; it was "
                               "edited: remove the snapshot folder to start over")
        restore_params(self.module, tensors)
        restore_optimizer(self.optimizer, state["optimizer"], tensors)
        counts = {int(st["step"]) for st in getattr(self.optimizer, "state", {}).values()
                  if isinstance(st, dict) and "step" in st}
        if counts and counts != {step}:  # the optimizer counted its own steps: the ledger cannot claim fewer
            raise DpauditError(f"the snapshot's ledger says {step} steps but its optimizer state took {sorted(counts)}; "
                               "the snapshot was edited: remove the snapshot folder to start over")
        for name, g in self.generators.items():
            restore_generator(name, g, tensors)
        for name, g in self.numpy_rngs.items():
            restore_numpy_rng(g, state["numpy_rngs"][name])
        restore_global_rng(tensors)
        for i, c in enumerate(self.canaries or []):
            c.restore(f"canary/{i}", state["canaries"][i], tensors)
        if self.stats is not None:
            self.stats.fraction_clipped = list(state["clip_stats"]["fraction_clipped"])
            self.stats.median_norm = list(state["clip_stats"]["median_norm"])
        if self.stream is not None:
            self.stream.restore(tensors["rng/pass_start"], state["taken"])
        return step, [float(x) for x in state["losses"]]
