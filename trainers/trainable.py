"""The trainable-parameter axis: all parameters, LoRA adapters (peft), or only a classifier's head
(``head``: the linear probe on a frozen encoder, the smallest-dimension point on this axis)."""

from __future__ import annotations

import copy

from peft import LoraConfig, get_peft_model

LORA_TARGETS = {"gpt2": (["c_attn"], True), "llama": (["q_proj", "v_proj"], False), "bert": (["query", "value"], False)}


TRAINABLE = ("full", "lora", "head")


def apply(model, trainable: str, lora_r: int = 8, lora_alpha: int = 16):
    """Returns (model to train, frozen copy of the base or None)."""
    if trainable == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model, None
    if trainable == "head":
        from dpaudit.errors import DpauditError
        from dpaudit.tasks.models import is_classifier

        if not is_classifier(model):
            raise DpauditError("train.trainable = 'head' needs a classifier model (minilm-l6, tiny-bert); "
                               "use 'full' or 'lora' for a causal LM")
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("classifier."))
        return model, None
    base = copy.deepcopy(model)
    targets, fan_in_fan_out = LORA_TARGETS[model.config.model_type]
    from dpaudit.tasks.models import is_classifier

    head = ["classifier"] if is_classifier(model) else None  # a new head is trained with the adapters
    cfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, target_modules=targets, fan_in_fan_out=fan_in_fan_out,
                     lora_dropout=0.0, bias="none", modules_to_save=head)
    return get_peft_model(model, cfg), base


def untie_embeddings(model) -> bool:
    """Give the LM head its own copy of the input embeddings (ghost clipping cannot handle shared
    parameters; Li et al. untie them too). Returns True when something was untied."""
    import torch

    out = model.get_output_embeddings()
    inp = model.get_input_embeddings()
    if out is None or out.weight is not inp.weight:
        return False
    out.weight = torch.nn.Parameter(inp.weight.detach().clone())
    model.config.tie_word_embeddings = False
    if hasattr(model, "_tied_weights_keys"):
        model._tied_weights_keys = []
    return True
