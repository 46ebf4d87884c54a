"""What queen-mq's test suites (tests/gateway/suites) expect and their sdists do not ship
(scripts/gateway-test copies this file next to each suite's tests at run time; the suites
themselves are never committed).

- The `client` fixture: a Queen client pointed at the gateway (QUEEN_URL).
- The database clean-up the suite assumes (Queen's own conftest deletes the queues whose names
  its tests use before a run): here through queen's SQL API, as the superuser (QUEEN_TEST_PG_DSN).
- The tests that do not pass against queen are skipped, each with its reason (SKIPS).
"""

import asyncio
import os

import asyncpg
import pytest
import pytest_asyncio
from queen import Queen

URL = os.environ.get("QUEEN_URL", "http://localhost:6632")
DSN = os.environ.get("QUEEN_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")

# The queue name patterns Queen's own conftest cleans, and the fixed queues of the suites'
# docs tests (which expect a fresh broker: each suite runs after another against this one).
PATTERNS = ["test-%", "edge-%", "pattern-%", "workflow-%", "orders", "payments"]

# Tests of the suites that do not pass against queen, each with the reason (docs/gateway.md,
# "Tested by Queen's own client suites"): a file, or file::test. The same names in every
# version that has them.
NOT_YET = "not built yet (issue 24 continues): "
SKIPS = {
    "test_auth.py": "Queen's JWT auth stamps the token's subject on each message (producerSub); queen "
    "stores no producer identity, and 0.15-1.x's tests read Queen's server-internal tables and call "
    "its stored procedures directly. The gateway's own auth tests are tests/gateway/test_auth_gateway.py",
    "test_ack_commit.py::test_nack_below_cursor_is_rejected": "kept on purpose: Queen acks cumulatively "
    "(an ack commits every message before it), queen acknowledges each message on its own, so the "
    "earlier message is still unfinished and its nack applies",
    "test_ack_commit.py::test_ack_below_cursor_is_noop_flagged": "kept on purpose: as above, the earlier "
    "message is still unfinished, so its ack applies (a re-ack of a finished one is flagged noop)",
    "test_timers.py": NOT_YET + "timers (/api/v1/timers)",
    "test_transaction_kv_timers.py::test_a_timer_rides_the_bundle_and_fires": NOT_YET + "timers",
    "test_transaction_kv_timers.py::test_a_timer_cancel_rides_the_bundle": NOT_YET + "timers",
    "test_locks.py": NOT_YET + "locks and semaphores (/api/v1/locks)",
    "test_reads.py": NOT_YET + "offset reads (/api/v1/fetch, /api/v1/partitions/changed)",
    "test_pop.py::test_pop_with_commit_on_delivery_is_committed_at_delivery": NOT_YET
    + "message detail (GET /api/v1/messages/{partitionId}/{transactionId})",
}


async def _clean():
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(
            "SELECT queen_delete_queue(queue) FROM queen.queue_stats WHERE queue LIKE ANY($1::text[])",
            PATTERNS,
        )
        # The suites' key/value namespaces are fixed too ("a broker that has never seen them").
        await conn.execute("DELETE FROM queen.kv WHERE namespace LIKE 'test-%'")
    finally:
        await conn.close()


def pytest_sessionstart(session):
    asyncio.run(_clean())


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = SKIPS.get(item.path.name) or SKIPS.get(f"{item.path.name}::{item.name}")
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


# The suite's pyproject sets asyncio_default_fixture_loop_scope = "session"; the client must live
# on the loop of the test that uses it (its httpx client is closed on that loop).
@pytest_asyncio.fixture(loop_scope="function")
async def client():
    queen = Queen(URL)
    yield queen
    await queen.close()
