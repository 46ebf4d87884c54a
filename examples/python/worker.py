"""Worker (examples/README.md): turns each message of the queue `orders` into an invoice.

    DATABASE_URL=postgresql://... python worker.py w1      # until SIGTERM / Ctrl-C
"""

import json
import os
import signal
import sys

import psycopg
from psycopg.rows import dict_row

# Set by SIGTERM / SIGINT: the batch in hand is finished and committed, then the loop ends.
stopping = False


def stop(signum, frame):
    global stopping
    stopping = True


def ack(conn, batch, done, failed):
    """Acks the batch: the messages in `done` completed, and with `failed` (a message that could
    not be processed) that one charged a failure and the rest given back, in order. One call
    when nothing failed: queen_ack_lease acks everything the lease still holds. Returns why
    queen refused, or None."""
    lease = batch[0]["lease_id"]
    rows = []
    if failed and done:
        # What was invoiced before the failure, completed (the batch form, one call).
        acks = [{"messageId": str(m["message_id"]), "leaseId": str(lease)} for m in done]
        rows += conn.execute("SELECT success, error FROM queen_ack(%s::jsonb)", (json.dumps(acks),)).fetchall()
    # The rest of the lease: all of it completed, or — after a failure — the first message not
    # acked yet (the failed one) charged, and the messages after it back to the queue
    # ('superseded'), delivered again in order.
    status, error = ("failed", "simulated failure") if failed else ("completed", None)
    rows += conn.execute(
        "SELECT success, error FROM queen_ack_lease(%s, %s, %s)", (lease, status, error)
    ).fetchall()
    refused = [r["error"] for r in rows if not r["success"] and r["error"] != "superseded"]
    if refused or len(rows) != len(batch):
        # One row per message of the batch, unless the lease is gone: a lease no row holds any
        # more (it expired, and another worker took the partition) answers no rows.
        return refused[0] if refused else "lease not held"
    return None


def handle_batch(conn, name):
    # One transaction for the pop, the invoices and the acks: they commit together or not at
    # all, so each order is invoiced exactly once, through crashes and lease expiries.
    with conn.transaction():
        # Up to 10 messages of one partition (one customer), in order, under a lease. A pop
        # that finds nothing waits up to 1 s for a message (which needs READ COMMITTED, the
        # default), so a stopping worker notices the flag within a second.
        batch = conn.execute(
            "SELECT * FROM queen_pop('orders', 'invoicing', batch => 10, wait_ms => 1000)"
        ).fetchall()
        if not batch:
            return
        done, failed = [], None
        for message in batch:
            order_id = message["payload"]["order_id"]
            if order_id % 10 == 3 and message["attempt"] == 1:
                # A flaky downstream: 'failed' charges one failure, and queen delivers the
                # message again after retryDelay (up to retryLimit times, then it is a dead
                # letter). The batch stops here: the messages after it come back too, in order.
                failed = order_id
                break
            # ON CONFLICT: if this lease was lost, the invoice may meet the one its new holder
            # wrote; then the ack below is refused and the whole batch rolled back.
            conn.execute(
                "INSERT INTO invoices (order_id, amount, worker, attempt)"
                " VALUES (%s, %s, %s, %s) ON CONFLICT (order_id) DO NOTHING",
                (order_id, message["payload"]["amount"], name, message["attempt"]),
            )
            done.append(message)
        refused = ack(conn, batch, done, failed)
        if refused:
            # The lease is no longer ours (it expired, say): undo the whole batch (leaving
            # the `with` block by Rollback rolls back); its messages are delivered again.
            print(f"{name}: ack refused ({refused}), batch rolled back", flush=True)
            raise psycopg.Rollback()
    if not refused:  # committed
        invoiced = [m["payload"]["order_id"] for m in done]
        note = f", order {failed} failed" if failed else ""
        print(f"{name}: {batch[0]['partition']}: invoiced {invoiced}{note}", flush=True)


def main():
    name = sys.argv[1]
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # autocommit: each `with conn.transaction()` block is one explicit transaction.
    with psycopg.connect(
        os.environ["DATABASE_URL"], autocommit=True, row_factory=dict_row
    ) as conn:
        while not stopping:
            handle_batch(conn, name)
    print(f"{name}: stopped", flush=True)


if __name__ == "__main__":
    main()
