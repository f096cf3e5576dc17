"""A flood of unauthenticated readers, as its own process (so its CPU is not Sickbay's event loop's):

    python -m tests.perf.read_flood URL CLIENTS NODES

CLIENTS concurrent connections, each looping over the read routes (`GET /`, `/api/v1/nodes`,
`/api/v1/nodes/gpu-NNNN` for a random one of NODES nodes) until the process is terminated. Prints
"flooding" once every client has its first answer, and on SIGTERM the answers it got, by status.
Used by `bench_read_flood`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import signal
import sys

import aiohttp


async def reader(session: aiohttp.ClientSession, base: str, nodes: int, seen: collections.Counter[int],
                 first: asyncio.Event, pending: list[int]) -> None:  # fmt: skip
    answered = False
    while True:
        pick = random.random()
        if pick < 1 / 3:
            path = "/"
        elif pick < 2 / 3:
            path = "/api/v1/nodes"
        else:
            path = f"/api/v1/nodes/gpu-{random.randrange(nodes):04d}"
        try:
            async with session.get(base + path) as response:
                await response.read()
                seen[response.status] += 1
        except aiohttp.ClientError:
            seen[0] += 1
            await asyncio.sleep(0.01)
        if not answered:
            answered = True
            pending[0] -= 1
            if pending[0] == 0:
                first.set()


async def flood(base: str, clients: int, nodes: int) -> None:
    seen: collections.Counter[int] = collections.Counter()
    first = asyncio.Event()
    pending = [clients]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    connector = aiohttp.TCPConnector(limit=clients, limit_per_host=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            asyncio.create_task(reader(session, base, nodes, seen, first, pending)) for _ in range(clients)
        ]
        await first.wait()
        print("flooding", flush=True)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({str(k): v for k, v in sorted(seen.items())}), flush=True)


if __name__ == "__main__":
    url, count, fleet = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    asyncio.run(flood(url.rstrip("/"), count, fleet))
