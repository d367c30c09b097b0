"""Checkpoint directories (docs/architecture.md, "Contracts")::

    CHECKPOINT/
      model/              HF save_pretrained (safetensors) or a PEFT adapter
      base_model/         the base weights, when a LoRA adapter sits on a base that is not an asset
      privacy_card.json   the claim + the mechanism (dpaudit.card)
      canaries.json       the canary manifest (dpaudit.canaries)
      run.json            resolved config, seeds, data hash, package versions (optional for others' models)
      gradient_canaries.json  white-box canary plan and scores (optional; trainers/gradient_canaries.py)
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dpaudit.canaries import Manifest, load_manifest
from dpaudit.card import PrivacyCard, load_card
from dpaudit.errors import DpauditError
from dpaudit.io import jsonable, read_json

PACKAGES = ("dpaudit", "torch", "transformers", "peft", "opacus", "dp-accounting", "numpy", "scipy", "scikit-learn")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def machine() -> dict:
    import os

    return {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()}


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    card: PrivacyCard
    manifest: Manifest
    run: dict  # {} when run.json is absent (a checkpoint from another tool)

    def load_model(self):
        """(model, tokenizer), LoRA adapters merged into the base."""
        from dpaudit.tasks import models

        mdir = self.path / "model"
        if (mdir / "adapter_config.json").exists():
            from peft import PeftModel

            base_dir = self.path / "base_model"
            if base_dir.exists():
                base, tok = models.load_dir(base_dir)
            elif self.run.get("model", {}).get("name") == "smollm2-135m":
                base, tok = models.load_dir(models.assets.smollm2_dir())
            else:
                raise DpauditError(f"{mdir} holds a LoRA adapter but no base model is known; add base_model/")
            model = PeftModel.from_pretrained(base, mdir).merge_and_unload()
            return model.eval(), tok
        return models.load_dir(mdir)

    def hash(self) -> str:
        """sha256 over the checkpoint's weights, tokenizer, card and manifest (names and bytes), first 16 hex
        digits. run.json and gradient_canaries.json are left out: they hold timings and audit scores."""
        h = hashlib.sha256()
        for f in sorted(self.path.rglob("*")):
            if f.is_file() and f.suffix in (".safetensors", ".json") and f.name not in ("run.json", "gradient_canaries.json"):
                h.update(str(f.relative_to(self.path)).encode())
                h.update(f.read_bytes())
        return h.hexdigest()[:16]


def load(path: Path) -> Checkpoint:
    path = Path(path)
    if not path.is_dir():
        raise DpauditError(f"checkpoint directory {path} not found; pass a folder written by `dpaudit run` "
                           "or one with model/, privacy_card.json and canaries.json")
    if not (path / "model").is_dir():
        raise DpauditError(f"checkpoint {path} has no model/ folder; save the model there with save_pretrained")
    card = load_card(path / "privacy_card.json")
    manifest = load_manifest(path / "canaries.json")
    run = read_json(path / "run.json", "run record", "") if (path / "run.json").exists() else {}
    return Checkpoint(path, card, manifest, run)


def write(path: Path, model, tokenizer, card: PrivacyCard, manifest: Manifest, run: dict,
          base_model=None, extra_files: dict | None = None) -> Path:
    """Write a checkpoint atomically (to a temporary folder, renamed at the end)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    (tmp / "model").mkdir(parents=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    if base_model is not None:
        base_model.save_pretrained(tmp / "base_model")
        tokenizer.save_pretrained(tmp / "base_model")
    card.save(tmp / "privacy_card.json")
    manifest.save(tmp / "canaries.json")
    (tmp / "run.json").write_text(json.dumps(jsonable(run), indent=2, default=str) + "\n")
    for name, body in (extra_files or {}).items():
        (tmp / name).write_text(json.dumps(jsonable(body)) + "\n")
    if path.exists():
        import shutil

        shutil.rmtree(path)
    tmp.rename(path)
    return path
