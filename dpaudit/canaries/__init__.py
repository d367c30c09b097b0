"""Canaries, before training: what to make (``design``: the plan of canaries), the manifest and its audit plan
(``manifest``) with the evaluation plan fixed in it (``plan``), making new ones (``making``), the designed pools
(``pools``), new tokens (``new_tokens``) and planting them into the training data (``planting``)."""
