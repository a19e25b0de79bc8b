from runtime import entry
from services.router.main import NAME, start

entry.main(NAME, start, uses_kube=False)
