"""``dpaudit evaluate``: the typed steps (``steps``), their options (``options``) and plan (``plan``), scoring
(``scoring``, ``shards``), the evidence (``evidence``) and the many-run audit of checkpoints (``checkpoint_audit``)."""
