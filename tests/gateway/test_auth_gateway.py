"""Authentication and abuse (issue 24), against two gateways that scripts/gateway-test starts:

- QUEEN_AUTH_URL: `--auth jwt --jwt-secret $QUEEN_AUTH_SECRET`, a 1 s head timeout, at most 2
  waiting pops per caller. The roles (scripts/gateway-test): `auth_writer` may push, pop,
  configure and read queue `auth-orders`; `auth_reader` may only read it; both are granted to
  the gateway's login role `queen_app` (which holds every grant on every queue), and so is
  `auth_super`, a superuser; `auth_stranger` exists but is not granted to it.
- QUEEN_URL: the suite's gateway, `--auth none` on 127.0.0.1.

What each refused request changed is checked in the database (QUEEN_TEST_PG_DSN, superuser).
"""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import socket
import time
import urllib.parse

import asyncpg
import httpx
import pytest

AUTH_URL = os.environ.get("QUEEN_AUTH_URL", "http://127.0.0.1:6633")
OPEN_URL = os.environ.get("QUEEN_URL", "http://127.0.0.1:6632")
SECRET = os.environ.get("QUEEN_AUTH_SECRET", "")
DSN = os.environ.get("QUEEN_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
QUEUE = "auth-orders"

pytestmark = pytest.mark.skipif(not SECRET, reason="QUEEN_AUTH_SECRET unset: run through scripts/gateway-test")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def token(role, secret=None, exp_in=3600, sub="tester", **extra):
    """An HS256 token as Queen's clients' users mint them."""
    now = int(time.time())
    claims = {"sub": sub, "iat": now, "exp": now + exp_in, **extra}
    if role is not None:
        claims["role"] = role
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64(json.dumps(claims).encode())
    sig = hmac.new((secret or SECRET).encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64(sig)}"


def bearer(t):
    return {"Authorization": f"Bearer {t}"}


def sql(query, *args):
    async def run():
        conn = await asyncpg.connect(DSN)
        try:
            return await conn.fetchval(query, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def stored():
    """Messages stored in the test queue (0 when it does not exist)."""
    return sql("SELECT coalesce(sum(messages), 0)::int FROM queen.queue_stats WHERE queue = $1", QUEUE)


def push(headers, payload=None):
    item = {"queue": QUEUE, "partition": "p1", "payload": payload or {"n": 1}}
    return httpx.post(f"{AUTH_URL}/api/v1/push", json={"items": [item]}, headers=headers, timeout=10)


@pytest.fixture(autouse=True)
def clean():
    sql("SELECT queen_delete_queue($1)", QUEUE)
    yield


def test_no_token_wrong_signature_expired_token_are_401_and_change_nothing():
    cases = {
        "no token": {},
        "not a bearer": {"Authorization": "Basic dXNlcjpwYXNz"},
        "wrong signature": bearer(token("auth_writer", secret="x" * 40)),
        "expired": bearer(token("auth_writer", exp_in=-300)),
        "no role claim": bearer(token(None)),
        "garbage": bearer("a.b.c"),
    }
    for name, headers in cases.items():
        r = push(headers)
        assert r.status_code == 401, (name, r.status_code, r.text)
        assert "error" in r.json(), name
        assert r.headers.get("www-authenticate", "").startswith("Bearer"), name
        # Reads are refused the same way: nothing is listed without a token.
        r = httpx.get(f"{AUTH_URL}/api/v1/resources/queues", headers=headers)
        assert r.status_code == 401, (name, r.status_code)
    assert stored() == 0


def test_a_role_without_the_grant_is_403_and_changes_nothing():
    writer = bearer(token("auth_writer"))
    assert push(writer).status_code == 201
    assert stored() == 1
    reader = bearer(token("auth_reader"))
    r = push(reader)
    assert r.status_code == 403, r.text
    r = httpx.get(f"{AUTH_URL}/api/v1/pop/queue/{QUEUE}?autoAck=true", headers=reader)
    assert r.status_code == 403, r.text
    r = httpx.post(f"{AUTH_URL}/api/v1/consumer-groups/g/queues/{QUEUE}/seek", json={"toEnd": True}, headers=reader)
    assert r.status_code == 403, r.text
    r = httpx.delete(f"{AUTH_URL}/api/v1/resources/queues/{QUEUE}", headers=reader)
    assert r.status_code == 403, r.text
    # The message is still there, and neither the refused pop nor the refused seek of group g
    # moved anything: the writer's pops get it, in queue mode and in group g.
    assert stored() == 1
    for params in ["autoAck=true", "autoAck=true&consumerGroup=g"]:
        r = httpx.get(f"{AUTH_URL}/api/v1/pop/queue/{QUEUE}?{params}", headers=writer)
        assert r.status_code == 200, (params, r.text)
        assert [m["data"] for m in r.json()["messages"]] == [{"n": 1}]


def test_a_role_the_gateway_may_not_act_as_is_403():
    # Not a member role of the login role: refused by the gateway's own check, which names the
    # rule (PostgreSQL's SET ROLE is never asked).
    for role in ["auth_stranger", "no_such_role_at_all", "postgres"]:
        r = push(bearer(token(role)))
        assert r.status_code == 403, (role, r.status_code, r.text)
        assert "may act as" in r.json()["error"], r.text
        assert "login role is a member of" in r.json()["error"], r.text
    assert stored() == 0


def test_a_token_never_acts_as_the_login_role_or_a_superuser():
    # "none" would switch the connection back to the login role, which holds every grant of
    # every role the gateway serves; naming the login role itself would do the same; a superuser
    # role granted to the login role would skip every grant.
    for role in ["none", "NONE", "queen_app", "auth_super"]:
        t = bearer(token(role))
        r = push(t)
        assert r.status_code == 403, (role, r.status_code, r.text)
        assert "may act as" in r.json()["error"], r.text
        r = httpx.get(f"{AUTH_URL}/api/v1/resources/queues", headers=t)
        assert r.status_code == 403, (role, r.status_code, r.text)
        r = httpx.post(f"{AUTH_URL}/api/v1/configure", json={"queue": QUEUE, "options": {}}, headers=t)
        assert r.status_code == 403, (role, r.status_code, r.text)
    assert stored() == 0
    assert sql("SELECT count(*)::int FROM queen.queue_stats WHERE queue = $1", QUEUE) == 0
    # The connections refused them are not left acting as anyone: the next requests run as
    # their own roles.
    assert push(bearer(token("auth_reader"))).status_code == 403
    assert push(bearer(token("auth_writer"))).status_code == 201


def test_each_request_runs_as_its_own_token_on_shared_connections():
    # Alternate roles over the same pooled connections: a connection switched to the writer's
    # role never serves the reader as the writer.
    writer, reader = bearer(token("auth_writer")), bearer(token("auth_reader"))
    for i in range(20):
        assert push(writer, {"n": i}).status_code == 201
        assert push(reader, {"n": i}).status_code == 403
    assert stored() == 20


def test_cross_site_requests_are_refused():
    writer = bearer(token("auth_writer"))
    item = json.dumps({"items": [{"queue": QUEUE, "partition": "p1", "payload": {"n": 1}}]})
    for url, headers in [(AUTH_URL, writer), (OPEN_URL, {})]:
        # What a page on another site can send without a preflight: text/plain, a form, no type.
        for ctype in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]:
            r = httpx.post(f"{url}/api/v1/push", content=item, headers={**headers, "Content-Type": ctype})
            assert r.status_code == 415, (url, ctype, r.status_code, r.text)
        r = httpx.post(f"{url}/api/v1/push", content=item,
                       headers={**headers, "Content-Type": "application/json", "Origin": "https://evil.example"})
        assert r.status_code == 403, (url, r.status_code, r.text)
        # A body-less POST from a page (a seek to the end, a lease extend) carries its Origin.
        r = httpx.post(f"{url}/api/v1/consumer-groups/g/queues/{QUEUE}/seek",
                       headers={**headers, "Origin": "https://evil.example"})
        assert r.status_code == 403, (url, r.status_code, r.text)
        r = httpx.post(f"{url}/api/v1/configure", content=json.dumps({"queue": QUEUE, "options": {}}),
                       headers={**headers, "Content-Type": "text/plain"})
        assert r.status_code == 415, (url, r.status_code)
        # An <img> or a navigation (no Origin on a GET) may not pop, with a token or without.
        for marks in [{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
                      {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}]:
            r = httpx.get(f"{url}/api/v1/pop/queue/{QUEUE}?autoAck=true", headers={**headers, **marks})
            assert r.status_code == 403, (url, marks, r.status_code, r.text)
        # No CORS headers are handed out.
        r = httpx.options(f"{url}/api/v1/push", headers={"Origin": "https://evil.example",
                                                          "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in r.headers, (url, dict(r.headers))
    assert stored() == 0
    assert sql("SELECT count(*)::int FROM queen.queue_stats WHERE queue = $1", QUEUE) == 0


def test_waiting_pops_are_bounded_per_caller():
    writer = bearer(token("auth_writer", sub="busy-worker"))
    other = bearer(token("auth_writer", sub="another-worker"))
    url = f"{AUTH_URL}/api/v1/pop/queue/{QUEUE}?wait=true&timeout=3000"

    async def run():
        async with httpx.AsyncClient(timeout=10) as http:
            # Two waits of the same subject hold its places; a third is refused at once.
            held = [asyncio.create_task(http.get(url, headers=writer)) for _ in range(2)]
            for _ in range(100):
                if await asyncio.to_thread(sql, "SELECT count(*)::int FROM queen_waiting_pops()") == 2:
                    break
                await asyncio.sleep(0.05)
            third = await http.get(url, headers=writer)
            # Another subject still waits (and is answered 204 at the end of a short wait).
            short = await http.get(f"{AUTH_URL}/api/v1/pop/queue/{QUEUE}?wait=true&timeout=200", headers=other)
            done = await asyncio.gather(*held)
            return third, short, done

    third, short, done = asyncio.run(run())
    assert third.status_code == 429, third.text
    assert short.status_code == 204, short.text
    assert [r.status_code for r in done] == [204, 204]
    # Their places are free again.
    r = httpx.get(f"{AUTH_URL}/api/v1/pop/queue/{QUEUE}?wait=true&timeout=100", headers=writer)
    assert r.status_code == 204


def test_a_half_sent_request_head_is_cut_off():
    u = urllib.parse.urlparse(AUTH_URL)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"GET /api/v1/resources/queues HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        # The gateway closes it after its head timeout (1 s here): recv returns b"" (or a 408).
        data = s.recv(4096)
        while data and not data.startswith(b"HTTP/1.1 408"):
            data = s.recv(4096)
        assert time.monotonic() - start < 5


def test_deep_or_malformed_json_is_400():
    writer = bearer(token("auth_writer"))
    deep = "[" * 100_000 + "]" * 100_000
    for body in [
        '{"items": [{"queue": "%s", "payload": %s}]}' % (QUEUE, deep),
        '{"items": %s}' % deep,
        deep,
        '{"items": [{"queue": "%s", "payload": {"a": 1}' % QUEUE,
        '{"items": [{"queue": "%s", "payload": "\\ud800"}]}' % QUEUE,
    ]:
        for url, headers in [(AUTH_URL, writer), (OPEN_URL, {})]:
            r = httpx.post(f"{url}/api/v1/push", content=body,
                           headers={**headers, "Content-Type": "application/json"}, timeout=30)
            assert r.status_code == 400, (url, body[:60], r.status_code, r.text[:200])
    assert stored() == 0


def test_health_needs_no_token():
    assert httpx.get(f"{AUTH_URL}/health").status_code == 200


def test_with_tokens_any_host_name_is_served():
    # A browser never sends a bearer token by itself, so without --allowed-host the gateway
    # with authentication serves any Host (a load balancer's, a DNS name's).
    writer = bearer(token("auth_writer"))
    assert push({**writer, "Host": "queen.example.com"}).status_code == 201
    assert httpx.get(f"{AUTH_URL}/health", headers={"Host": "10.1.2.3:6633"}).status_code == 200
    assert stored() == 1
