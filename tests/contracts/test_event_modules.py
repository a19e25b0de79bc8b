"""Every contracts module that registers decision types is one the decoder imports: a reader that has not
imported the service (`jetway events`, `jetway replay`, the console) still reads every event."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from contracts import events

CONTRACTS = Path(events.__file__).parent


def test_every_registering_module_is_one_the_decoder_loads() -> None:
    registering = sorted(f"contracts.{p.stem}" for p in CONTRACTS.glob("*.py") if re.search(r"^register\(", p.read_text(), re.MULTILINE))
    assert registering and set(registering) <= set(events.EVENT_MODULES), set(registering) - set(events.EVENT_MODULES)


def test_a_fresh_process_decodes_a_scaler_decision_without_importing_the_scaler() -> None:
    script = (
        "import sys\n"
        "from contracts import events\n"
        "from contracts.scaling import ScaleDecided\n"
        "envelope = events.new_envelope('jetway.evt.0.modeldeployment.ns.m.scaler', ScaleDecided(replicas=2), producer='scaler')\n"
        "sys.stdout.buffer.write(events.encode(envelope))\n"
    )
    # the decision is encoded in one process and decoded in another that never imports contracts.scaling itself
    encoded = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert encoded.returncode == 0, encoded.stderr.decode()[-2000:]
    decoded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom contracts import events\nprint(type(events.decode(sys.stdin.buffer.read()).event).__name__)",
        ],
        input=encoded.stdout,
        capture_output=True,
        check=False,
    )
    assert decoded.stdout.decode().strip() == "ScaleDecided", decoded.stderr.decode()[-2000:]
