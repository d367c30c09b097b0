"""The CI gate, without torch: ``dpaudit check`` (``policy``), re-deriving a verdict from a report
(``rederive``) and ``dpaudit compare`` (``compare``)."""
