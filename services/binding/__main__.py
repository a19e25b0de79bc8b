from runtime import entry
from services.binding.main import NAME, start

entry.main(NAME, start)
