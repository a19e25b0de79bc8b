from runtime import entry
from services.gateway.main import NAME, start

entry.main(NAME, start)
