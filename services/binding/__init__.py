"""The binding service: AgentProviderConfig readiness, AgentDeployment model bindings, agent workloads."""
