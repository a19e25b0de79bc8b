"""The watcher's decisions, pure: no I/O.

- `apply.py`: what applying a manifest changes (created, configured, unchanged, refused) and the answer
- `ingest.py`: from an object the cluster shows to the event worth recording (Kubernetes mode)
- `status.py`: what to write back to the cluster: status per owner, the cleanup verdict
"""
