import asyncio

from services.storage.main import main

asyncio.run(main())
