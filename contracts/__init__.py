"""Contracts: types only, no I/O. What the services, the CLI and the cluster agree on.

- `modeldeployment.py`, `providerconfig.py`, `agents.py`, `poolmember.py`, `meta.py`, `quantity.py`: the five
  kinds as pydantic models; `kinds.py` names them; `documents.py` reads manifests
- `admission.py` and `rules/`: admission (defaults, validation, update rules); `problems.py`: its error shape
- `events.py`, `pipeline.py`, `gateway.py`, `binding.py`, `cluster.py`: the events, typed msgspec structs
- `subjects.py`: event subjects, facets and partitions; `conditions.py`: status conditions compared
- `gatewayapi.py`, `objects.py`: Gateway API views and the labels of what Jetway writes
- `natsauth.py`: each service's NATS user and rights; `schemagen.py`, `schemas/`: the generated JSON Schemas
"""
