"""Non-private pre-training of the tiny GPT-2 stand-in for a public pretrained model (``model.pretrain_steps``).

The data and the cache belong to the task layer (:func:`dpaudit.tasks.models.build`); the training is the
engine's, so it lives here: tasks never import trainers (docs/architecture.md, Layout).
"""

from __future__ import annotations

from dpaudit.tasks import models

BATCH = 32
LR = 1e-3


def build(spec: models.ModelSpec):
    """(model, tokenizer) for ``spec``, pre-training (and caching) the tiny GPT-2 when asked and not cached."""
    return models.build(spec, pretrain=_train)


def _train(model, records: list[dict], spec: models.ModelSpec):
    """``spec.pretrain_steps`` non-private engine steps of batch 32 over ``records``."""
    from dpaudit.trainers import engine

    epochs = spec.pretrain_steps * BATCH / len(records)
    cfg = engine.EngineConfig(epochs=epochs, batch_size=BATCH, lr=LR, seed=spec.init_seed)
    model, _ = engine.train(model, records, cfg, model.config.pad_token_id, spec.max_len)
    return model
