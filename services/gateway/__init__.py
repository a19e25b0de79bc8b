"""The gateway: InferencePoolMembers probed every tick, and the OpenAI-compatible router over them.

- `handlers.py`: the service: events in (members, its own health decisions), probes as reconciles
- `projection.py`: what it knows: members, their last recorded health, live traffic counters
- `decide.py`: the decisions, pure: health from a probe, which member takes a request, the token estimate
- `probe.py`: the probe I/O (HTTP, or a compute agent over NATS)
- `router.py`, `upstream.py`, `echo.py`, `signal.py`: the data plane
- `computeagent.py`: `jetway compute-agent`, run beside a model server for operator-signal members
- `main.py`: the entry point
"""
