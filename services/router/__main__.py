from runtime import entry
from services.router.main import SERVICE

entry.main(SERVICE)
