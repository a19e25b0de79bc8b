"""The storage service: `spec.model.storage.volumes` made real.

- `handlers.py`: the service: deployments in, storage plans out
- `decide.py`: the plan, pure: PVCs, pod volumes and mounts, the model-download Job, conditions
- `main.py`: the entry point
"""
