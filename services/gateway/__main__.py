from runtime import entry
from services.gateway.main import SERVICE

entry.main(SERVICE)
