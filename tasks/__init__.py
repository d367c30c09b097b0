"""Tasks (``dpaudit.tasks``): offline assets, base models and tokenizers, the tasks and their registry."""
