"""What queen-mq 0.15.0's test suite expects and its sdist does not ship (scripts/gateway-test
copies this file next to the suite's tests at run time; the suite itself is never committed).

- The `client` fixture: a Queen client pointed at the gateway (QUEEN_URL).
- The database clean-up the suite assumes (Queen's own conftest deletes the queues whose names
  its tests use before a run): here through queen's SQL API, as the superuser (QUEEN_TEST_PG_DSN).
- test_auth.py is skipped, with the reason: it tests Queen's JWT auth server and reads Queen's
  server-internal tables and stored procedures directly, not the HTTP API.
"""

import asyncio
import os

import asyncpg
import pytest
import pytest_asyncio
from queen import Queen

URL = os.environ.get("QUEEN_URL", "http://localhost:6632")
DSN = os.environ.get("QUEEN_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# The queue name patterns Queen's own conftest cleans.
PATTERNS = ["test-%", "edge-%", "pattern-%", "workflow-%"]

SKIPS = {
    "test_auth.py": "Queen's JWT auth (producerSub stamped from the token): needs Queen's auth "
    "server, and these tests read Queen's server-internal tables and call its stored procedures "
    "(queen.push_messages_v2, queen.pop_specific_batch) directly, not through the HTTP API",
}


async def _clean():
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(
            "SELECT queen_delete_queue(queue) FROM queen.queue_stats WHERE queue LIKE ANY($1::text[])",
            PATTERNS,
        )
    finally:
        await conn.close()


def pytest_sessionstart(session):
    asyncio.run(_clean())


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = SKIPS.get(item.path.name)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# The suite's pyproject sets asyncio_default_fixture_loop_scope = "session"; the client must live
# on the loop of the test that uses it (its httpx client is closed on that loop).
@pytest_asyncio.fixture(loop_scope="function")
async def client():
    queen = Queen(URL)
    yield queen
    await queen.close()
