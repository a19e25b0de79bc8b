"""The watcher: ingest of desired state, the one writer of every resource's `spec`.

Standalone it serves the apply API and records each admitted manifest as a `ResourceApplied` event (and the
built-in providers' registrations); in a cluster it follows the Kubernetes API, writes status and finalizers
back, and serves the admission webhook.

- `main.py`: the entry point
- `handlers.py`: the service: every event folded; applies, deletes and what the cluster shows recorded
- `projection.py`: what it knows: every resource with its composed status, what the cluster last showed
- `decide/`: the decisions, pure: what an apply changes (`apply.py`), which cluster change is worth an
  event (`ingest.py`), what status to write back (`status.py`)
- `api.py`: the apply API (HTTP); `webhook.py` and `certs.py`: the admission webhook and its certificate
- `cluster.py`: the cluster side (list-then-watch per kind, status and finalizer writes), leased per kind
"""
