from runtime import entry
from services.binding.main import SERVICE

entry.main(SERVICE)
