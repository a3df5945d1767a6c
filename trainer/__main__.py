"""``python -m trainer CONFIG [--a.b v ...]``: run the bundled trainer (under torchrun, srun, or alone)."""

import os
import signal

# A Ctrl-C (or torch.distributed.run passing one on) while the imports below run would print a traceback per
# worker; leave with the shell's Ctrl-C code instead. main() installs the handler for the run itself.
signal.signal(signal.SIGINT, lambda signum, frame: os._exit(128 + signal.SIGINT))
# The launcher (torchrun's agent) as this process found it, before the imports below: main() stops at once if it
# is gone by the time its death signal is set (trainer.launch.die_with_launcher).
os.environ.setdefault("RECIPE_ADVISOR_LAUNCHER_PID", str(os.getppid()))

from trainer.launch import main  # noqa: E402 (after the handler, on purpose)

if __name__ == "__main__":
    main()
