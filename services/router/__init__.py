"""The router: the data plane. InferencePoolMembers probed every tick, and the OpenAI-compatible router over them.

It talks to no Kubernetes API: members come from the event stream, their credentials from the secret store.

- `main.py`: the entry point (`python -m services.router`), and `build` for `jetway up`
- `handlers.py`: the service: members in, a probe per reconcile (and per tick), health decisions out
- `projection.py`: what it knows: members, their last recorded health, live traffic counters
- `decide.py`: the decisions, pure: health from a probe, which member takes a request, the token estimate
- `probe.py`: the probe I/O (HTTP, or a compute agent over NATS)
- `proxy.py`: the HTTP edge, the OpenAI-compatible router; `upstream.py` its connection pool to members
- `keys.py`: client keys, pure: the keys document, lookup by hash, allowed models, rpm/tpm limits, refusals;
  `keyfile.py` reads the document again when it changes
- `echo.py`: the echo backend; `signal.py`: requests to operator-signal members over NATS
- `computeagent.py`: `jetway compute-agent`, run beside a model server for operator-signal members
"""
