"""Membership attacks: one module per family, each scoring one float per sample (higher = member).

Black-box attacks derive their scores from one shared forward pass (:mod:`.scoring`). An attack of your own
joins through :func:`register_attack` (docs/architecture.md, "Extension points"), without editing dpaudit.
Exposure (:mod:`.exposure`) scores candidate secrets instead of records; the final-weights scores
(:mod:`.final_weights`) read new-token canaries' own rows.
"""

from collections.abc import Callable

from dpaudit.attacks import final_weights, loss, min_k, min_k_plus, reference, zlib
from dpaudit.options import ATTACKS

BLACK_BOX = {m.NAME: m for m in (loss, zlib, min_k, min_k_plus, reference)}
ALL = (*BLACK_BOX, "exposure", *final_weights.NAMES)
assert ALL == ATTACKS, "dpaudit.options.ATTACKS and the attack modules disagree"


def register_attack(attack) -> Callable[[], None]:
    """Make an outputs-only attack of your own available to every evaluation plan, by name.

    Args:
        attack: a module or object with ``NAME`` (lowercase letters, digits and ``_``, not taken), ``NEEDS_MOMENTS``
            (bool: whether it reads the mean and spread of log p(z) over the vocabulary, Min-K%++ style) and
            ``from_features(feats, texts, reference_feats=None, **_) -> np.ndarray``: one score per canary from its
            token features (``feats[i].logp``: log-probabilities of the scored tokens), higher = member.

    Returns:
        A function that removes the registration again.

    Raises:
        DpauditError: the name is malformed or taken, or the protocol is incomplete.

    A registered attack never joins a default plan: name it in the plan fixed before training
    (``dpaudit canaries new --attacks loss,NAME`` or ``[evaluate] attacks``). Every attack of a plan is one more
    test of its Bonferroni family, so each widens the correction of all the others.
    """
    import re

    from dpaudit.errors import DpauditError
    from dpaudit.options import REGISTERED_ATTACKS, attack_names

    name = getattr(attack, "NAME", None)
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", name) or name.startswith("whitebox"):
        raise DpauditError(f"an attack's NAME must be lowercase letters, digits and _ (not whitebox*), got {name!r}")
    if name in attack_names():
        raise DpauditError(f"attack {name!r} is already registered; pick another NAME")
    if not isinstance(getattr(attack, "NEEDS_MOMENTS", None), bool) or not callable(getattr(attack, "from_features",
                                                                                            None)):
        raise DpauditError(f"attack {name!r} needs NEEDS_MOMENTS (a bool) and a callable from_features(feats, texts, "
                           "**_)")
    BLACK_BOX[name] = attack
    REGISTERED_ATTACKS[name] = "outputs only"

    def remove() -> None:
        BLACK_BOX.pop(name, None)
        REGISTERED_ATTACKS.pop(name, None)
    return remove
