"""Membership attacks: one module per family, each scoring one float per sample (higher = member).

Black-box attacks derive their scores from one shared forward pass (:mod:`.scoring`); adding an
attack is one module with ``from_features`` and one line in ``BLACK_BOX``. Exposure
(:mod:`.exposure`) scores candidate secrets instead of records.
"""

from dpaudit.attacks import final_weights, loss, min_k, min_k_plus, reference, zlib
from dpaudit.options import ATTACKS

BLACK_BOX = {m.NAME: m for m in (loss, zlib, min_k, min_k_plus, reference)}
ALL = (*BLACK_BOX, "exposure", *final_weights.NAMES)
assert ALL == ATTACKS, "dpaudit.options.ATTACKS and the attack modules disagree"
