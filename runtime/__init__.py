"""The runtime every service uses the same way.

- `bus.py`: the NATS connection and the streams; `eventstore.py`: typed events appended and read back
- `service.py`: the service loop (`Service`, `Runner`); `replica.py` and `leases.py`: replicas sharing partitions
- `snapshots.py`: projections stored and restored; `desired.py`: the desired-state fold and withdrawal
- `resources.py`: the composed view of every resource; `rerun.py`: recorded inputs fed to installed code
- `kube.py`, `kubewriter.py`, `writer.py`: the Kubernetes client and the writes services make through it
- `entry.py`: one way to start a service process; `metrics.py`: the Prometheus metrics it serves on `/metrics`
- `telemetry.py`, `logs.py`, `process.py`, `secrets.py`, `natsserver.py`: tracing and OTLP metrics, JSON logs,
  the heap, the secret store, the embedded NATS server
"""
