import asyncio

from services.gateway.main import main

asyncio.run(main())
