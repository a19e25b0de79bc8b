from runtime import entry
from services.selector.main import SERVICE

entry.main(SERVICE)
