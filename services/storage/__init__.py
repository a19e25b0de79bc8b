"""The storage service: `spec.model.storage.volumes` made real.

- `main.py`: the entry point
- `handlers.py`: the service: deployments in, storage plans out; PVCs and the download Job written in a cluster
- `projection.py`: what it knows: each deployment, its last plan, what the cluster reports of its PVCs and Job
- `decide.py`: the plan, pure: PVCs, pod volumes and mounts, the model-download Job, conditions
"""
