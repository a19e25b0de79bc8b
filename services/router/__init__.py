"""The router: the data plane. InferencePoolMembers probed every tick, and the OpenAI-compatible router over them.

It talks to no Kubernetes API: members come from the event stream, their credentials from the secret store.

- `main.py`: the entry point (`python -m services.router`), and `build` for `jetway up`
- `handlers.py`: the service: members in, a probe per reconcile (and per tick), health decisions out
- `projection.py`: what it knows: members, their last recorded health, live traffic counters
- `decide.py`: the prober's decision, pure: health from a probe
- `probe.py`: the probe I/O (HTTP, or a compute agent over NATS)
- `protocol.py`: the HTTP/1.1 server: connections, their limits, the drain; it knows nothing of what it serves
- `app.py`: the OpenAI-compatible router served there: routes, admission by client key, dispatch to a member
- `policy.py`: the choice of member, pure: which members may take a request, which one does (the routing policy)
- `hold.py`: requests held for a model starting from zero, released in arrival order when a member is ready
- `relay.py`: an upstream's answer passed to the client as it comes; `upstream.py` the connection pool to members
- `apis.py`: the forwarded APIs, the member formats they need, their error shapes
- `keys.py`: client keys, pure: the keys document, lookup by hash, allowed models, rpm/tpm limits, refusals;
  `keyfile.py` reads the document again when it changes
- `echo.py`: the echo backend; `signal.py`: requests to operator-signal members over NATS
- `computeagent.py`: the compute agent, a program of its own (`python -m services.router.computeagent`, or
  `jetway compute-agent`), run beside a model server for operator-signal members
"""
