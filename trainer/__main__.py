"""``python -m trainer CONFIG [--a.b v ...]``: run the bundled trainer (under torchrun, srun, or alone)."""

import os
import signal

# A Ctrl-C (or torch.distributed.run passing one on) while the imports below run would print a traceback per
# worker; leave with the shell's Ctrl-C code instead. main() installs the handler for the run itself.
signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signal.SIGINT))

from trainer.launch import main  # noqa: E402 (after the handler, on purpose)

if __name__ == "__main__":
    main()
