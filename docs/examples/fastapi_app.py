"""A FastAPI service that consumes a group: the lifespan runs the listener.

    RSC_COORDINATOR_URL=ws://127.0.0.1:8765 RSC_REDIS_URL=redis://127.0.0.1:6379/0 \
        uvicorn fastapi_app:app --port 8000

Each message of prefix `orders` (group `billing`) is counted in the Redis hash
`orders:handled` with an asyncio Redis client. GET /healthz and GET /readyz give the
listener's D7 verdicts for a liveness and a readiness probe (503 with the reason when not),
GET /health reports the members.
Ctrl-C (SIGINT) or SIGTERM stops uvicorn, whose lifespan exit drains in-flight
messages and leaves the group.
"""

import os
from contextlib import asynccontextmanager

import redis.asyncio
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

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


@app.get("/healthz")
async def healthz():
    """Liveness: 503 only when a restart should cure it (a member kept out of its group
    while the coordinator answers and would admit it, or the listener stopped on its own)."""
    status = handle.status()
    return JSONResponse({"healthy": status.healthy, "reason": status.reason or None},
                        status_code=200 if status.healthy else 503)


@app.get("/readyz")
async def readyz():
    """Readiness: 200 while every member is in its group now."""
    status = handle.status()
    return JSONResponse({"ready": status.ready, "reason": status.reason or None},
                        status_code=200 if status.ready else 503)


@app.get("/health")
async def health(response: Response):
    status = handle.status()
    if not status.running:
        response.status_code = 503
    return status.to_json()
