#!/usr/bin/env bash
# Run here, where PyPI is reachable, before a GPU benchmark call: downloads the wheels of what the
# trainer needs and the lent machine lacks (Python 3.12, manylinux x86-64) into benchmarks/gpu/wheels
# (ignored by git), checks they travel well under the 64 MiB a call carries, and prints the `carry`
# path and the command of the call.
#
#   bash benchmarks/gpu/fetch_wheels.sh [--dry-run] [--dest DIR] [--python-version X.Y]
#
# --dry-run prints the downloads without fetching anything. The logic is benchmarks/gpu/wheels.py.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$HERE/wheels.py" fetch "$@"
