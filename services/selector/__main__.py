import asyncio

from services.selector.main import main

asyncio.run(main())
