"""The trainable-parameter axis: all parameters, LoRA adapters (peft), only a classifier's head (``head``:
the linear probe on a frozen encoder, the smallest-dimension point on this axis), or a selected subset of
named parameters (:func:`select`, the mask DP-FROST's private selection phase will produce). The engine
trains whatever keeps ``requires_grad``; nothing else on this axis touches the loop."""

from __future__ import annotations

import copy

from peft import LoraConfig, get_peft_model

from dpaudit import options

# LoRA target modules per architecture: "attention" is Hu et al.'s choice (query/value projections; GPT-2's
# fused c_attn), "all-linear" adds every other linear map of the blocks (attention output and MLP).
LORA_TARGETS = {
    "gpt2": {"attention": ["c_attn"], "all-linear": ["c_attn", "c_proj", "c_fc"]},
    "llama": {"attention": ["q_proj", "v_proj"],
              "all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
    "bert": {"attention": ["query", "value"], "all-linear": ["query", "key", "value", "dense"]},
}
FAN_IN_FAN_OUT = {"gpt2": True, "llama": False, "bert": False}  # GPT-2's Conv1D stores weights transposed


def apply(model, trainable: str, lora_r: int = 8, lora_alpha: int = 16, lora_targets: str = "attention"):
    """Returns (model to train, frozen copy of the base or None)."""
    if trainable == "full":  # everything not frozen on purpose (freeze_tied_embeddings) trains
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
    targets, fan_in_fan_out = lora_target_modules(model, lora_targets)
    from dpaudit.tasks.models import is_classifier

    head = ["classifier"] if is_classifier(model) else None  # a new head is trained with the adapters
    cfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, target_modules=targets, fan_in_fan_out=fan_in_fan_out,
                     lora_dropout=0.0, bias="none", modules_to_save=head)
    return get_peft_model(model, cfg), base


def lora_target_modules(model, which: str) -> tuple[list[str] | str, bool]:
    """(target modules, fan_in_fan_out) for ``which`` (``attention`` or ``all-linear``): dpaudit's table for the
    bundled architectures, peft's per-architecture defaults (attention) or peft's ``all-linear`` for any other;
    fan_in_fan_out when the targets are GPT-2-style Conv1D layers (weights stored transposed)."""
    from dpaudit.errors import DpauditError

    mtype = model.config.model_type
    if mtype in LORA_TARGETS:
        return LORA_TARGETS[mtype][which], FAN_IN_FAN_OUT[mtype]
    if which == "all-linear":
        targets = "all-linear"
    else:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

        if mtype not in DEFAULTS:
            raise DpauditError(f"peft has no default LoRA targets for model type {mtype!r}; set train.lora_targets = "
                               "'all-linear'")
        targets = list(DEFAULTS[mtype])
    names = targets if isinstance(targets, list) else []
    conv1d = any(type(m).__name__ == "Conv1D" for n, m in model.named_modules() if n.split(".")[-1] in names)
    return targets, conv1d


def freeze_tied_embeddings(model) -> bool:
    """Freeze a tied input-embedding / LM-head matrix instead of untying it (Li et al.'s other option):
    ghost clipping then never sees the shared parameter, and no second vocabulary-sized matrix (and its
    Adam state) is created. Returns True when a tied matrix was frozen."""
    out = model.get_output_embeddings()
    inp = model.get_input_embeddings()
    if out is None or out.weight is not inp.weight:
        return False
    inp.weight.requires_grad_(False)
    return True


def prepare_tied(model, policy: str, mode: str, trainable: str) -> None:
    """The trainer's choice for tied embeddings: ``freeze`` (any mode, so non-private baselines train the
    same parameters) or ``untie`` (only when ghost clipping fine-tunes everything)."""
    if policy == "freeze":
        freeze_tied_embeddings(model)
    elif mode in options.GHOST_MODES and trainable == "full":
        untie_embeddings(model)  # ghost clipping needs unshared parameters


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


def select(model, names) -> list[str]:
    """Train only the parameters named in ``names`` (exact ``named_parameters`` names); freeze the rest.
    Returns the names kept, in model order. An unknown name is an error, not a silent no-op."""
    from dpaudit.errors import DpauditError

    wanted = set(names)
    known = {n for n, _ in model.named_parameters()}
    unknown = sorted(wanted - known)
    if unknown:
        raise DpauditError(f"parameter {unknown[0]!r} is not in the model; selectable names are those of "
                           "model.named_parameters()")
    if not wanted:
        raise DpauditError("an empty parameter selection trains nothing; select at least one parameter")
    kept = []
    for n, p in model.named_parameters():
        p.requires_grad_(n in wanted)
        if n in wanted:
            kept.append(n)
    return kept
