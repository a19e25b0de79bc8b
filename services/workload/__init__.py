"""The workload service: the provider's objects for each ModelDeployment.

- `handlers.py`: the service: selections and storage plans in, rendered objects out;
  self-registration of the built-in providers
- `projection.py`: what it knows: deployments with their selection, storage plan and render
- `decide.py`: the decision, pure: render, re-render, switch providers, withdraw
- `render/`: one module per provider (vllm, llmd, dynamo, kaito, kuberay)
- `providers.py`: the built-in InferenceProviderConfigs
- `main.py`: the entry point
"""
