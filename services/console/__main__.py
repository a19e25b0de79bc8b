from runtime import entry
from services.console.main import SERVICE

entry.main(SERVICE)
