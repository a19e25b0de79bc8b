import asyncio

from services.workload.main import main

asyncio.run(main())
