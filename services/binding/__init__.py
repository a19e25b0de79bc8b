"""The binding service: AgentProviderConfig readiness, AgentDeployment model bindings, agent workloads.

- `main.py`: the entry point
- `handlers.py`: the service: frameworks, agents, models and Gateways in; readiness and bindings out, agent
  workloads written in a cluster
- `projection.py`: what it knows: agent frameworks, agents, the models and Gateways they bind to
- `decide.py`: the decisions, pure: is a framework ready, what an agent binds to, its status
- `render.py`: an agent's workload objects, pure (a Deployment and Service, a Job, or a kagent Agent)
"""
