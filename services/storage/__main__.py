from runtime import entry
from services.storage.main import NAME, start

entry.main(NAME, start)
