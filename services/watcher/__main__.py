import asyncio

from services.watcher.main import main

asyncio.run(main())
