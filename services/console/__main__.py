from runtime import entry
from services.console.main import NAME, start

entry.main(NAME, start, uses_kube=False)  # the pod has no token: it speaks to Kubernetes only as the user
