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
SKIPS = {
    "test_auth.py": "Queen's JWT auth stamps the token's subject on each message (producerSub); queen "
    "stores no producer identity, and 0.15-1.x's tests read Queen's server-internal tables and call "
    "its stored procedures directly. The gateway's own auth tests are tests/gateway/test_auth_gateway.py",
    "test_ack_commit.py::test_nack_below_cursor_is_rejected": "kept on purpose: Queen acks cumulatively "
    "(an ack commits every message before it), queen acknowledges each message on its own, so the "
    "earlier message is still unfinished and its nack applies",
    "test_ack_commit.py::test_ack_below_cursor_is_noop_flagged": "kept on purpose: as above, the earlier "
    "message is still unfinished, so its ack applies (a re-ack of a finished one is flagged noop)",
    "test_reads.py": "refused on purpose (400 offset_reads_unsupported): a queen partition is ordered by "
    "its messages' commit order, which offsets fixed at write time cannot follow without skipping "
    "messages; consumer groups read the same with nothing skipped (docs/gateway.md, \"Offset reads\")",
}

# Tests that do not pass against a distributed (Citus) queen, with the reason.
CITUS_SKIPS = {
    "test_pop.py::test_pop_with_commit_on_delivery_is_committed_at_delivery": "the message detail "
    "(queen_message) reads one server's tables; on Citus it refuses with 22023 (docs/scale-out.md)",
    "test_timers.py::test_a_scheduled_timer_is_delivered_as_a_message": "on Citus a timer's message "
    "gets its id from the worker that stores it when it fires: no id is promised at schedule time",
}
if os.environ.get("QUEEN_TEST_CITUS"):
    SKIPS.update(CITUS_SKIPS)


async def _clean():
    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(
            "SELECT queen_delete_queue(queue) FROM queen.queue_stats WHERE queue LIKE ANY($1::text[])",
            PATTERNS,
        )
        # The suites' key/value namespaces are fixed too ("a broker that has never seen them").
        await conn.execute("DELETE FROM queen.kv WHERE namespace LIKE 'test-%'")
        # Timers of the suites' queues (a queue that only has timers has no registry row), and
        # the permits of their locks.
        await conn.execute("DELETE FROM queen.timers WHERE queue LIKE ANY($1::text[])", PATTERNS)
        await conn.execute("DELETE FROM queen.kv WHERE namespace = 'queen-locks' AND key LIKE 'test-%'")
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
