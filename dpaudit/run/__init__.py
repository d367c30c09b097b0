"""Stage 0, ``dpaudit run CONFIG``: the config (``config``), its dry run (``dry_run``) and the pipeline that trains
every variant and evaluates it (``pipeline``)."""
