"""`python -m transformer ...`: the command line, defined in transformer.cli (appendix 19)."""

import sys
import time

STARTED = time.perf_counter()  # before torch is imported: a run's wall time counts from here

from transformer.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(started=STARTED))
