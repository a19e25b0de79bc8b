from runtime import entry
from services.selector.main import NAME, start

entry.main(NAME, start, uses_kube=False)  # NATS only: its pod mounts no token
