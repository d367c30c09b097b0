"""dpaudit: audit and evaluation of differentially private fine-tuning (the stage packages below; the public calls in :mod:`dpaudit.api`)."""
