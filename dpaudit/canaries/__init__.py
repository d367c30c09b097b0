"""Canaries, before training: the manifest and its audit plan (``manifest``), making new ones (``making``), the
designed pools (``pools``), new tokens (``new_tokens``) and planting them into the training data (``planting``)."""
