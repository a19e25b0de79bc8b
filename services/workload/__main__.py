from runtime import entry
from services.workload.main import SERVICE

entry.main(SERVICE)
