"""Reports: the report dict (``build``), writing it (``write``), REPORT.md (``markdown``, ``mechanism``), plots,
``dpaudit table`` (``table``) and paired comparisons of accuracy (``paired``)."""
