"""The watcher: ingest of desired state.

Standalone, it serves the apply API (`api.py`) and records each admitted manifest as a
`ResourceApplied` event; in a cluster it watches the Kubernetes API (issue: Kubernetes mode).

- `handlers.py`: the service: the events it consumes and how it folds them
- `projection.py`: what it knows: every resource, its status, when members were last probed
- `apply.py`: the decision: created, configured, unchanged, or refused (pure)
- `api.py`: the HTTP edge: routes, bearer token, error bodies
- `main.py`: the entry point
"""
