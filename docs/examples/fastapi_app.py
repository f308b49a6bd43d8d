"""A FastAPI service that consumes a group: the lifespan runs the listener.

    RSC_COORDINATOR_URL=ws://127.0.0.1:8765 RSC_REDIS_URL=redis://127.0.0.1:6379/0 \
        uvicorn fastapi_app:app --port 8000

Each message of prefix `orders` (group `billing`) is counted in the Redis hash
`orders:handled` with an asyncio Redis client; GET /health reports the members.
Ctrl-C (SIGINT) or SIGTERM stops uvicorn, whose lifespan exit drains in-flight
messages and leaves the group.
"""

import os
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import FastAPI, Response

from rsc.member.aio import listener

COORDINATOR_URL = os.environ.get("RSC_COORDINATOR_URL", "ws://127.0.0.1:8765")
REDIS_URL = os.environ.get("RSC_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("RSC_PREFIX", "orders")
GROUP = os.environ.get("RSC_GROUP", "billing")

db = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)


@listener(PREFIX, GROUP, coordinator_url=COORDINATOR_URL, redis_url=REDIS_URL,
          runtime_max_concurrency=8)
async def handle(message):
    # runs on the application's loop: any asyncio client works here
    await db.hincrby(f"{PREFIX}:handled", message.value, 1)


@asynccontextmanager
async def lifespan(app: FastAPI):
    async with handle.running():  # members joined (or joining in the background)
        yield
    await db.aclose()  # after the drain: the last handlers have written


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health(response: Response):
    status = handle.status()
    if not status["running"]:
        response.status_code = 503
    return status
