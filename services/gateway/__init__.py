"""The gateway: the Gateway API control plane, in a cluster (Gateway API Inference Extension).

- `main.py`: the entry point (`python -m services.gateway`)
- `handlers.py`: the service: a running deployment's InferencePool, endpoint picker, HTTPRoute and router
  member written, `GatewayReady` and `status.gateway` decided; each Gateway's cross-namespace admission
- `projection.py`: what it knows: deployments with their selection and workload, Gateways, providers, the
  providers' own InferencePools (as the watcher observed them), who routes through which Gateway
- `decide.py`: the decisions, pure: which Gateway, which objects, which status; the allowedRoutes patch
"""
