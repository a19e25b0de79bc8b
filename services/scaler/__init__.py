"""The scaler: an autoscaled ModelDeployment's replica count, from the load the router reports (docs/autoscaling.md).

- `main.py`: the entry point
- `handlers.py`: the service: deployments and the router's load signals in, `ScaleDecided` out
- `projection.py`: what it knows: each deployment's autoscaling, provider and last decision; its recent load
- `decide.py`: the decision, pure: bounds, up at once, down after a delay, to and from zero
"""
