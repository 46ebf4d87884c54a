"""The gateway's own behaviour, beyond what Queen's client suite checks: errors that tell a
client whether to retry, transactions that refuse an ack whose lease was lost, a waiting pop
cancelled when its client goes away, the DLQ's filters, seek, configure's replace semantics,
/health and /metrics. Run by scripts/gateway-test against the gateway it starts; the database
is checked directly (QUEEN_TEST_PG_DSN, as the superuser)."""

import asyncio
import base64
import json
import os
import uuid
from datetime import datetime

import asyncpg
import httpx
import pytest

URL = os.environ.get("QUEEN_URL", "http://localhost:6632")
DSN = os.environ.get("QUEEN_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def name(what):
    return f"test-gw-{what}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def http():
    async with httpx.AsyncClient(base_url=URL, timeout=30) as c:
        yield c


@pytest.fixture
async def db():
    conn = await asyncpg.connect(DSN)
    yield conn
    await conn.close()


async def until(check, what, seconds=20):
    """Await a condition (no fixed sleeps): poll `check` until it is true."""
    for _ in range(int(seconds * 20)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def push(http, queue, *payloads, partition="Default"):
    r = await http.post("/api/v1/push", json={"items": [
        {"queue": queue, "partition": partition, "payload": p} for p in payloads]})
    assert r.status_code == 201, r.text
    return r.json()


async def pop(http, queue, **params):
    params = {"batch": 1, "wait": "false", **params}
    r = await http.get(f"/api/v1/pop/queue/{queue}", params=params)
    assert r.status_code in (200, 204), r.text
    return r.json()["messages"] if r.status_code == 200 else []


def ack_of(m, status="completed", **extra):
    return {"transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": status, **extra}


async def test_bad_input_is_4xx_with_the_error(http):
    cases = [
        ("POST", "/api/v1/push", {}, 400, "items array is required"),
        ("POST", "/api/v1/push", {"items": [{"queue": 5}]}, 400, "items[0].queue must be a string"),
        ("POST", "/api/v1/push", {"items": [{"queue": "test-gw-x", "traceId": "nope"}]}, 400, "traceId"),
        ("POST", "/api/v1/ack", {"transactionId": "t"}, 400, "partitionId is required"),
        ("POST", "/api/v1/ack", {"transactionId": "t", "partitionId": "nope"}, 400, "partitionId"),
        ("POST", "/api/v1/ack/batch", {"acknowledgments": 3}, 400, "acknowledgments array is required"),
        ("POST", "/api/v1/transaction", {"operations": []}, 400, "operations array cannot be empty"),
        ("POST", "/api/v1/transaction", {"operations": [{"type": "nap"}]}, 400, "operations[0].type"),
        ("POST", "/api/v1/lease/not-a-uuid/extend", None, 400, "leaseId must be a uuid"),
        ("POST", "/api/v1/configure", {"options": {}}, 400, "queue is required"),
        ("POST", "/api/v1/configure", {"queue": "test-gw-c", "options": {"leaseTime": "soon"}}, 400, "leaseTime"),
        ("GET", "/api/v1/pop/queue/test-gw-x?batch=0", None, 400, "batch"),
        ("GET", "/api/v1/pop/queue/test-gw-x?subscriptionMode=sometimes", None, 400, "subscriptionMode"),
        ("GET", "/api/v1/pop/queue/test-gw-x?batch=20000", None, 400, "batch"),
        ("GET", "/api/v1/dlq?limit=-1", None, 400, "limit"),
        ("GET", "/api/v1/pop?namespace=ns", None, 404, "namespace"),
        ("GET", "/api/v1/nowhere", None, 404, "no such route"),
    ]
    for method, path, body, status, text in cases:
        r = await http.request(method, path, json=body)
        assert r.status_code == status, (path, body, r.status_code, r.text)
        assert text in r.json()["error"], (path, r.json())
    # Not JSON at all.
    r = await http.post("/api/v1/push", content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]


async def test_a_full_queue_is_409_and_the_push_leaves_nothing(http):
    q = name("full")
    r = await http.post("/api/v1/configure", json={"queue": q, "options": {"maxSize": 2}})
    assert r.status_code == 200
    r = await http.post("/api/v1/push", json={"items": [{"queue": q, "payload": i} for i in range(3)]})
    assert r.status_code == 409, r.text
    assert "maxSize" in r.json()["error"] or "full" in r.json()["error"]
    assert await pop(http, q, batch=10) == []
    await push(http, q, "a", "b")
    assert [m["data"] for m in await pop(http, q, batch=10)] == ["a", "b"]


async def test_a_transaction_whose_lease_ran_out_is_refused_whole(http, db):
    a, b = name("txa"), name("txb")
    await http.post("/api/v1/configure", json={"queue": a, "options": {"leaseTime": 1}})
    await push(http, a, {"n": 1})
    [m1] = await pop(http, a)
    # The first worker's lease runs out; a second worker takes the message.
    await until(lambda: db.fetchval(
        "SELECT bool_and(lease_id IS NULL) FROM queen.group_lag WHERE queue = $1", a), "the lease to expire")
    [m2] = await pop(http, a)
    assert m2["transactionId"] == m1["transactionId"] and m2["leaseId"] != m1["leaseId"]
    # The first worker commits its work: the ack is under its lost lease, so nothing happens.
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": b, "payload": {"from": m1["transactionId"]}}]},
                       {"type": "ack", "transactionId": m1["transactionId"], "partitionId": m1["partitionId"],
                        "status": "completed"}],
        "requiredLeases": [m1["leaseId"]]})
    assert r.status_code == 409, r.text
    assert r.json()["success"] is False and "lease" in r.json()["error"]
    assert await pop(http, b) == []
    # The second worker's ack still applies.
    r = await http.post("/api/v1/ack", json=ack_of(m2))
    assert r.json()[0]["success"] is True, r.text


async def test_a_transaction_matches_each_ack_to_its_lease(http, db):
    a, b, c = name("ma"), name("mb"), name("mc")
    await push(http, a, 1)
    await push(http, b, 2)
    [ma] = await pop(http, a)
    [mb] = await pop(http, b)
    ops = [{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"]} for m in (ma, mb)]
    ops.append({"type": "push", "items": [{"queue": c, "payload": 3}]})
    r = await http.post("/api/v1/transaction", json={"operations": ops, "requiredLeases": [mb["leaseId"], ma["leaseId"]]})
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    assert [x["type"] for x in r.json()["results"]] == ["ack", "ack", "push"]
    assert await pop(http, a) == [] and await pop(http, b) == []
    # Both acks applied (their messages are finished, not merely still leased).
    assert await db.fetchval("SELECT sum(pending) FROM queen.group_lag WHERE queue = ANY($1)", [a, b]) == 0
    assert [m["data"] for m in await pop(http, c)] == [3]


async def test_a_waiting_pop_whose_client_leaves_takes_nothing(db):
    q = name("gone")
    async with httpx.AsyncClient(base_url=URL, timeout=1.0) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.get(f"/api/v1/pop/queue/{q}", params={"wait": "true", "timeout": 20000})
    # The gateway cancels the pop in the database once its client is gone: well before the end
    # of its 20 s wait.
    await until(lambda: db.fetchval(
        "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'queen-gateway' "
        "AND state = 'active' AND query LIKE '%queen_pop%'"), "the waiting pop to be cancelled", seconds=5)
    async with httpx.AsyncClient(base_url=URL, timeout=30) as http:
        await push(http, q, "x")
        # Had the pop gone on, it would hold the message under a lease nobody will ack.
        [m] = await pop(http, q)
        assert m["data"] == "x" and m["attempt"] == 1


async def test_a_waiting_pop_is_woken_by_a_push(http, db):
    q = name("wake")
    waiting = asyncio.create_task(http.get(f"/api/v1/pop/queue/{q}", params={"wait": "true", "timeout": 20000}))
    # Push only once the pop waits in the database (its queue does not exist yet, so it is the
    # only waiter here): a push first would test no wake-up at all.
    await until(lambda: db.fetchval("SELECT count(*) > 0 FROM queen_waiting_pops()"), "the pop to wait")
    await push(http, q, "hello")
    r = await asyncio.wait_for(waiting, 10)
    assert r.status_code == 200 and r.json()["messages"][0]["data"] == "hello"


async def test_dead_letters_with_filters_and_total(http):
    q = name("dlq")
    await http.post("/api/v1/configure", json={"queue": q, "options": {"retryLimit": 0}})
    for p in ("p1", "p2", "p3"):
        await push(http, q, {"p": p}, partition=p)
    for _ in range(3):
        [m] = await pop(http, q)
        r = await http.post("/api/v1/ack", json=ack_of(m, "failed", error=f"bad {m['partition']}"))
        assert r.json()[0]["dlq"] is True, r.text
    r = await http.get("/api/v1/dlq", params={"queue": q, "limit": 2})
    body = r.json()
    assert body["total"] == 3 and len(body["messages"]) == 2
    d = body["messages"][0]
    assert d["errorMessage"].startswith("bad p") and d["consumerGroup"] == "__QUEUE_MODE__"
    assert d["partitionId"] and d["transactionId"] and d["data"]["p"] == d["partition"]
    r = await http.get("/api/v1/dlq", params={"queue": q, "partition": "p2"})
    assert [x["data"] for x in r.json()["messages"]] == [{"p": "p2"}]
    r = await http.get("/api/v1/dlq", params={"queue": q, "consumerGroup": "other"})
    assert r.json()["total"] == 0
    r = await http.get("/api/v1/dlq", params={"queue": q, "offset": 2})
    assert r.json()["total"] == 3 and len(r.json()["messages"]) == 1


async def test_seek_replays_and_skips_and_deleting_a_group_starts_it_afresh(http):
    q, g = name("seek"), "test-gw-group"
    await push(http, q, 1, 2, 3)
    got = await pop(http, q, batch=10, consumerGroup=g, autoAck="true")
    assert [m["data"] for m in got] == [1, 2, 3] and got[0]["leaseId"] is None
    r = await http.post(f"/api/v1/consumer-groups/{g}/queues/{q}/seek", json={"timestamp": "2000-01-01T00:00:00Z"})
    assert r.status_code == 200 and r.json()["partitions"] == 1, r.text
    assert [m["data"] for m in await pop(http, q, batch=10, consumerGroup=g, autoAck="true")] == [1, 2, 3]
    r = await http.post(f"/api/v1/consumer-groups/{g}/queues/{q}/seek", json={"toEnd": True})
    assert r.status_code == 200
    await push(http, q, 4)
    assert [m["data"] for m in await pop(http, q, batch=10, consumerGroup=g)] == [4]
    r = await http.post(f"/api/v1/consumer-groups/{g}/queues/{q}/seek")
    assert r.status_code == 400
    r = await http.delete(f"/api/v1/consumer-groups/{g}", params={"deleteMetadata": "true"})
    assert r.status_code == 200 and r.json()["deletedPartitions"] == 1, r.text
    assert [m["data"] for m in await pop(http, q, batch=10, consumerGroup=g)] == [1, 2, 3, 4]
    r = await http.delete("/api/v1/consumer-groups/test-gw-never-seen")
    assert r.status_code == 200 and r.json()["deletedPartitions"] == 0


async def test_configure_replaces_and_echoes_what_queen_has_no_use_for(http):
    q = name("conf")
    r = await http.post("/api/v1/configure", json={"queue": q, "namespace": "ns", "options": {
        "leaseTime": 10, "priority": 7, "encryptionEnabled": True, "ttl": 60, "somethingNew": "x"}})
    o = r.json()["options"]
    assert (o["leaseTime"], o["priority"], o["encryptionEnabled"], o["ttl"], o["somethingNew"]) == (10, 7, True, 60, "x")
    assert r.json()["namespace"] == "ns"
    # Queen's configure replaces: what is not given goes back to its default.
    r = await http.post("/api/v1/configure", json={"queue": q, "options": {"retryLimit": 1}})
    o = r.json()["options"]
    assert (o["leaseTime"], o["retryLimit"], o["priority"]) == (300, 1, 0)
    r = await http.get(f"/api/v1/resources/queues/{q}")
    assert r.status_code == 200 and r.json()["name"] == q
    assert (await http.get("/api/v1/resources/queues/test-gw-nope")).status_code == 404


async def test_lease_extend(http):
    q = name("renew")
    await http.post("/api/v1/configure", json={"queue": q, "options": {"leaseTime": 5}})
    await push(http, q, 1)
    [m] = await pop(http, q)
    r = await http.post(f"/api/v1/lease/{m['leaseId']}/extend")
    assert r.status_code == 200 and r.json()["success"] is True and r.json()["newExpiresAt"] >= m["leaseExpiresAt"]
    r = await http.post(f"/api/v1/lease/{m['leaseId']}/extend", json={"seconds": 120})
    assert r.json()["newExpiresAt"] > m["leaseExpiresAt"]
    # 120 s from now, not the queue's 5 s.
    extended = datetime.fromisoformat(r.json()["newExpiresAt"]) - datetime.fromisoformat(m["leaseExpiresAt"])
    assert extended.total_seconds() > 100, r.text
    assert r.json()["renewed"] == 1
    await http.post("/api/v1/ack", json=ack_of(m))
    # Queen 2.x's answer for a lease that is gone: 200, success false, renewed 0.
    r = await http.post(f"/api/v1/lease/{m['leaseId']}/extend")
    assert r.status_code == 200, r.text
    assert (r.json()["success"], r.json()["renewed"], r.json()["newExpiresAt"]) == (False, 0, None)
    assert "not active" in r.json()["error"]


async def test_queen_shapes_of_acks_leases_and_transactions(http, db):
    q = name("shapes")
    await push(http, q, 1, 2)
    # leaseSeconds: this pop's lease, not the queue's 300 s.
    r = await http.get(f"/api/v1/pop/queue/{q}", params={"batch": 2, "leaseSeconds": 2})
    m1, m2 = r.json()["messages"]
    left = datetime.fromisoformat(m1["leaseExpiresAt"]) - datetime.fromisoformat(m1["createdAt"])
    assert left.total_seconds() < 60, m1
    # An ack of a transaction queen does not have: "unresolvable", and the lease is intact.
    ghost = {**ack_of(m1), "transactionId": "never-pushed"}
    r = await http.post("/api/v1/ack", json=ghost)
    assert r.json()[0]["success"] is False and r.json()[0]["error"].startswith("unresolvable"), r.text
    r = await http.post("/api/v1/ack", json=ack_of(m1))
    assert r.json()[0]["success"] is True and "noop" not in r.json()[0], r.text
    # A completed re-ack of a finished message: a success flagged noop; a failure of it is
    # refused as already committed. Neither changes anything.
    r = await http.post("/api/v1/ack", json=ack_of(m1))
    assert (r.json()[0]["success"], r.json()[0].get("noop")) == (True, True), r.text
    r = await http.post("/api/v1/ack", json=ack_of(m1, status="failed"))
    assert r.json()[0]["success"] is False and "already committed" in r.json()[0]["error"], r.text
    r = await http.post("/api/v1/ack", json=ack_of(m2))
    assert r.json()[0]["success"] is True and "noop" not in r.json()[0], r.text
    assert await db.fetchval("SELECT count(*) FROM queen.dead_letters_view WHERE queue = $1", q) == 0
    # A transaction whose timer part is malformed is refused whole, its push too.
    other = name("shapes-tx")
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": other, "payload": {"n": 1}}]}],
        "timers": [{"op": "set", "queue": other, "key": "t", "at": "2030-01-01T00:00:00Z"}]})
    assert r.status_code == 400 and r.json()["code"] == "timers_bad_request", r.text
    assert await pop(http, other) == []


def b64(value):
    return base64.b64encode(json.dumps(value).encode()).decode()


async def test_timers_ride_the_transaction_and_offset_reads_are_refused(http, db):
    q, ns = name("timer-tx"), name("timer-ns")
    timer = {"op": "schedule", "queue": q, "timerKey": "later", "payload": b64({"t": 1}), "delayMs": 3_600_000}
    # Committed with the push and the key: all three exist.
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": q, "payload": {"n": 1}}]}],
        "kv": [{"op": "put", "ns": ns, "key": "k", "value": 1, "ttlSeconds": 60}],
        "timers": [timer]})
    assert r.status_code == 200 and r.json()["results"][-1]["type"] == "timer", r.text
    assert r.json()["results"][-1]["status"] == "scheduled", r.text
    assert await db.fetchval("SELECT count(*) FROM queen_timers($1)", q) == 1
    # A required key/value check that fails rolls back the timer part with everything else.
    r = await http.post("/api/v1/transaction", json={
        "operations": [{"type": "push", "items": [{"queue": q, "payload": {"n": 2}}]}],
        "kv": [{"op": "check", "ns": ns, "key": "k", "expect": 0, "required": True}],
        "timers": [{**timer, "timerKey": "never"}]})
    assert r.status_code == 200 and r.json()["reason"] == "kv_precondition", r.text
    assert await db.fetchval("SELECT count(*) FROM queen_timers($1)", q) == 1
    assert [m["data"] for m in await pop(http, q)] == [{"n": 1}]
    # A server-owned field is refused, never dropped; a cancel of nothing is absent, not ok.
    r = await http.post("/api/v1/timers", json={"operations": [{**timer, "deliverAt": 1}]})
    assert r.status_code == 400 and r.json()["code"] == "timers_bad_request", r.text
    r = await http.delete(f"/api/v1/timers/{q}/nothing", params={"txn": "x"})
    assert r.json() == {"ok": False, "status": "absent", "queue": q, "timerKey": "nothing", "txn": "x"}, r.text
    # Offset reads: refused with the reason, 4xx (a client does not retry it).
    for route in ("/api/v1/fetch", "/api/v1/partitions/changed"):
        r = await http.post(route, json={"entries": []})
        assert r.status_code == 400 and r.json()["code"] == "offset_reads_unsupported", r.text
    # A message no role may see (or none at all) is 404 (on Citus the route is refused, 400).
    r = await http.get(f"/api/v1/messages/{uuid.uuid4()}/nope")
    assert r.status_code == (400 if os.environ.get("QUEEN_TEST_CITUS") else 404), r.text


async def test_a_timer_of_any_depth_is_listed(http, db):
    # A payload nested deeper than a JSON library's recursion limit (valid jsonb, scheduled in
    # SQL) is listed as it was scheduled: the route once answered 500 for every reader.
    q = name("timer-deep")
    deep = "[" * 300 + "1" + "]" * 300
    await db.execute("SELECT * FROM queen_schedule($1, 'k', $2::jsonb, clock_timestamp() + interval '1 hour')", q, deep)
    r = await http.get(f"/api/v1/timers/{q}")
    assert r.status_code == 200, r.text
    text = base64.b64decode(r.json()["rows"][0]["payload"]).decode()
    assert text.replace(" ", "") == deep
    r = await http.get(f"/api/v1/timers/{q}/k")
    assert r.status_code == 200 and base64.b64decode(r.json()["payload"]).decode().replace(" ", "") == deep, r.text


async def test_kv_and_its_transaction_rider(http, db):
    ns, q = name("kv"), name("kv-tx")
    r = await http.post("/api/v1/kv", json={"operations": [
        {"op": "put", "ns": ns, "key": "a", "value": {"v": 1}, "ttlSeconds": 60},
        {"op": "get", "ns": ns, "key": "a"},
        {"op": "incr", "ns": ns, "key": "n", "max": 1, "ttlSeconds": 60}]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["index"] for x in res] == [0, 1, 2] and res[1]["value"] == {"v": 1}, res
    # A required operation that does not apply rolls the batch back: Queen's kv_precondition.
    r = await http.post("/api/v1/kv", json={"operations": [
        {"op": "put", "ns": ns, "key": "b", "value": 1, "ttlSeconds": 60},
        {"op": "incr", "ns": ns, "key": "n", "max": 1, "ttlSeconds": 60, "required": True}]})
    body = r.json()
    assert r.status_code == 200 and body["success"] is False and body["reason"] == "kv_precondition", body
    assert (body["failedIndex"], body["kvReason"], body["value"]) == (1, "limit", 1), body
    r = await http.post("/api/v1/kv", json={"operations": [{"op": "get", "ns": ns, "key": "b"}]})
    assert r.json()["results"][0]["found"] is False
    # Bad input: 400 with the code Queen's clients branch on.
    r = await http.post("/api/v1/kv", json={"operations": [{"op": "get", "ns": "NOT A NAMESPACE", "key": "k"}]})
    assert r.status_code == 400 and r.json()["code"] == "kv_bad_request", r.text
    # In a transaction: the gate is in the flat index space after the push's item, and when
    # it does not hold, the push does not happen.
    gate = {"op": "putIfAbsent", "ns": ns, "key": "gate", "value": 1, "ttlSeconds": 60, "required": True}
    for attempt in (1, 2):
        r = await http.post("/api/v1/transaction", json={
            "operations": [{"type": "push", "items": [{"queue": q, "payload": {"attempt": attempt}}]}],
            "kv": [gate]})
        assert r.status_code == 200, r.text
    assert (r.json()["success"], r.json()["reason"], r.json()["failedIndex"]) == (False, "kv_precondition", 1), r.text
    assert [m["data"] for m in await pop(http, q, batch=10)] == [{"attempt": 1}]
    # A bundle of kv operations alone commits; getPrefix is refused in a bundle.
    r = await http.post("/api/v1/transaction", json={"operations": [], "kv": [
        {"op": "put", "ns": ns, "key": "solo", "value": 2, "ttlSeconds": 60}]})
    assert r.json()["success"] is True, r.text
    r = await http.post("/api/v1/transaction", json={"kv": [{"op": "getPrefix", "ns": ns, "prefix": "s"}]})
    assert r.status_code == 400, r.text


async def test_health_and_metrics(http):
    r = await http.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "healthy" and r.json()["queen"]
    await http.get("/api/v1/pop/queue/test-gw-metrics", params={"wait": "false"})
    text = (await http.get("/metrics")).text
    assert 'queen_gateway_requests_total{method="GET",route="/api/v1/pop/queue/{queue}",status="204"}' in text
    assert 'queen_gateway_pool_connections{pool="requests",state="max"} 16' in text
    assert "queen_gateway_request_duration_seconds_bucket" in text
    # The pop above is timed under its route.
    assert 'queen_gateway_request_duration_seconds_count{method="GET",route="/api/v1/pop/queue/{queue}"}' in text


async def test_a_host_name_not_served_is_421_and_reads_nothing(http):
    # DNS rebinding: a page whose own name resolves to the gateway's address sends that name in
    # Host. Without authentication only the loopback names are served.
    q = name("rebind")
    await http.post("/api/v1/configure", json={"queue": q, "options": {"retryLimit": 0}})
    await push(http, q, {"secret": 1}, {"secret": 2})
    [m] = await pop(http, q)
    r = await http.post("/api/v1/ack", json=ack_of(m, "failed", error="to the dlq"))
    assert r.json()[0]["dlq"] is True, r.text
    port = httpx.URL(URL).port
    for host in ["evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"]:
        for method, path in [("GET", f"/api/v1/dlq?queue={q}"), ("GET", f"/api/v1/pop/queue/{q}?autoAck=true"),
                             ("GET", "/api/v1/resources/queues"), ("GET", "/health"), ("GET", "/metrics"),
                             ("POST", f"/api/v1/consumer-groups/g/queues/{q}/seek")]:
            r = await http.request(method, path, headers={"Host": host})
            assert r.status_code == 421, (host, path, r.status_code, r.text)
            assert "allowed-host" in r.json()["error"], r.text
            assert "secret" not in r.text
    # The loopback names, with or without the port, are served.
    for host in ["localhost", f"localhost:{port}", f"127.0.0.1:{port}"]:
        r = await http.get("/api/v1/dlq", params={"queue": q}, headers={"Host": host})
        assert r.status_code == 200 and r.json()["total"] == 1, (host, r.text)
    # Nothing was popped through the refused requests.
    assert [x["data"] for x in await pop(http, q, autoAck="true")] == [{"secret": 2}]


async def test_a_page_cannot_pop_or_change_anything(http):
    # What a browser sends for a page of another site (an <img>, a <script>, a link, a form),
    # for the address typed into it, and what older browsers send: none of it may pop (a pop
    # takes a lease; with autoAck the messages are gone) or change anything.
    q = name("csrf")
    await push(http, q, "kept")
    page_loads = [
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"},
        {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"},
        {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "no-cors"},
        {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-User": "?1"},
        {"Upgrade-Insecure-Requests": "1"},
        {"Referer": "https://evil.example/page.html"},
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"},
    ]
    for headers in page_loads:
        for path in [f"/api/v1/pop/queue/{q}?autoAck=true", f"/api/v1/pop/queue/{q}/partition/Default?autoAck=true",
                     f"/api/v1/pop/queue/{q}?batch=10"]:
            r = await http.get(path, headers=headers)
            assert r.status_code == 403, (headers, path, r.status_code, r.text)
            assert "cross-site" in r.json()["error"], r.text
        r = await http.post(f"/api/v1/consumer-groups/g/queues/{q}/seek", json={"toEnd": True}, headers=headers)
        assert r.status_code == 403, (headers, r.status_code)
        r = await http.delete(f"/api/v1/resources/queues/{q}", headers=headers)
        assert r.status_code == 403, (headers, r.status_code)
    # A read typed into the address bar is served; a cross-site page's load of it is not.
    r = await http.get("/api/v1/resources/queues", headers=page_loads[4])
    assert r.status_code == 200, r.text
    r = await http.get("/api/v1/dlq", headers=page_loads[0])
    assert r.status_code == 403, r.text
    # The message is still there, unleased.
    [m] = await pop(http, q)
    assert m["data"] == "kept" and m["attempt"] == 1


async def test_idle_long_polls_of_one_client_turn_no_one_else_away(db):
    # Without authentication everyone comes from 127.0.0.1 as the login role. The bound on one
    # caller's waiting pops (a quarter of the wait pool: 8 here) applies to a client that names
    # itself (X-Queen-Client-Id); requests that do not are bounded by the wait pool only.
    q = name("waits")
    url = f"/api/v1/pop/queue/{q}"
    waiting = {"wait": "true", "timeout": 2500}

    async def waits(count):
        await until(lambda: db.fetchval("SELECT count(*) >= $1 FROM queen_waiting_pops()", count),
                    f"{count} waiting pops")

    async with httpx.AsyncClient(base_url=URL, timeout=30) as http:
        anonymous = [asyncio.create_task(http.get(url, params=waiting)) for _ in range(9)]
        await waits(9)
        assert [r.status_code for r in await asyncio.gather(*anonymous)] == [204] * 9

        busy = {"X-Queen-Client-Id": "busy-worker"}
        held = [asyncio.create_task(http.get(url, params=waiting, headers=busy)) for _ in range(8)]
        await waits(8)
        r = await http.get(url, params=waiting, headers=busy)
        assert r.status_code == 429 and "too many waiting pops" in r.json()["error"], r.text
        # Another client, and a request that names none, still wait.
        short = {"wait": "true", "timeout": 200}
        r = await http.get(url, params=short, headers={"X-Queen-Client-Id": "another-worker"})
        assert r.status_code == 204, r.text
        r = await http.get(url, params=short)
        assert r.status_code == 204, r.text
        assert [r.status_code for r in await asyncio.gather(*held)] == [204] * 8
        r = await http.get(url, params=short, headers={"X-Queen-Client-Id": "two words"})
        assert r.status_code == 400, r.text
