from runtime import entry
from services.selector.main import NAME, start

entry.main(NAME, start)
