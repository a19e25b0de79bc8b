"""`python -m testbed.cluster`: build (cached) and start the test control plane, print how to use
it, and keep it running until Ctrl-C."""

from __future__ import annotations

import signal
import sys

from testbed.cluster.build import BuildFailed, build
from testbed.cluster.controlplane import ControlPlane, ControlPlaneError


def main() -> int:
    try:
        plane = ControlPlane(build()).start()
    except (BuildFailed, ControlPlaneError) as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    print(f"control plane at {plane.server}; logs in {plane.work}")
    print(f"export KUBECONFIG={plane.kubeconfig}")
    print("Ctrl-C stops it", flush=True)
    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        signal.sigwait(signals)
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
