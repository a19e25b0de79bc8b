from runtime import entry
from services.storage.main import SERVICE

entry.main(SERVICE)
