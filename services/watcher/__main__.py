from runtime import entry
from services.watcher.main import NAME, start

entry.main(NAME, start)
