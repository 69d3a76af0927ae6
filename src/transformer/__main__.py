"""`python -m transformer ...`: the command line, defined in transformer.cli (chapter 13)."""

import sys

from transformer.cli import main

if __name__ == "__main__":
    sys.exit(main())
