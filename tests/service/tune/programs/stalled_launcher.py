"""A trial that stalls as a hung torch.distributed.run does: a launcher whose workers sit in sessions of their own
(as torch's agent starts them) and never finish. Writes the workers' pids to the file given as argv[1]."""

import subprocess
import sys
import time

workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True)
           for _ in range(2)]
with open(sys.argv[1], "w") as fh:
    fh.write(" ".join(str(w.pid) for w in workers))
time.sleep(3600)
