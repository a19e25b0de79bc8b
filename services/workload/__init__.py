"""The workload service: the provider's objects for each ModelDeployment.

- `main.py`: the entry point
- `handlers.py`: the service: selections and storage plans in, rendered objects out (written in a
  cluster); self-registration of the built-in providers
- `projection.py`: what it knows: deployments with their selection, storage plan and render
- `decide.py`: the decision, pure: render, re-render, switch providers, withdraw; `observe.py`: status from
  what the cluster reports; `images.py`: Direct vLLM's image, decided
- `render/`: one module per provider (vllm, llmd, dynamo, kaito, kuberay)
- `providers.py`: the built-in InferenceProviderConfigs; `registry.py`: image tags resolved at the registry
"""
