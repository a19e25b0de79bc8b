"""The selector: the engine and the provider of each ModelDeployment.

- `handlers.py`: the service: deployments and provider configs in, selections out
- `projection.py`: what it knows: deployments, provider configs and their readiness, its decisions
- `decide.py`: the decision, pure: AI Runway's selection algorithm, CEL rules by priority
- `main.py`: the entry point
"""
