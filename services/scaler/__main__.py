from runtime import entry
from services.scaler.main import SERVICE

entry.main(SERVICE)
