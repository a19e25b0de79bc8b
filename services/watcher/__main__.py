from runtime import entry
from services.watcher.main import SERVICE

entry.main(SERVICE)
