"""``python -m dpaudit.cli`` (what ``torchrun -m dpaudit.cli`` runs)."""

import sys

from dpaudit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
