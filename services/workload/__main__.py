from runtime import entry
from services.workload.main import NAME, start

entry.main(NAME, start)
