"""Worker (examples/README.md): turns each message of the queue `orders` into an invoice.

    DATABASE_URL=postgresql://... python worker.py w1      # until SIGTERM / Ctrl-C
"""

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


def ack(conn, message, status, error=None):
    """Acks the message under its lease; returns why queen refused it, or None."""
    row = conn.execute(
        "SELECT success, error FROM queen_ack(%s, %s, %s, %s)",
        (message["message_id"], message["lease_id"], status, error),
    ).fetchone()
    return None if row["success"] else (row["error"] or "refused")


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
        invoiced, failed = [], None
        for message in batch:
            order_id = message["payload"]["order_id"]
            if order_id % 10 == 3 and message["attempt"] == 1:
                # A flaky downstream: 'failed' charges one failure, and queen delivers the
                # message again after retryDelay (up to retryLimit times, then it is a dead
                # letter).
                failed = order_id
                refused = ack(conn, message, "failed", "simulated failure")
            else:
                # The ack first: a lease lost meanwhile is refused before any business write
                # (the invoice would otherwise meet the one the lease's new holder wrote).
                refused = ack(conn, message, "completed")
                if not refused:
                    conn.execute(
                        "INSERT INTO invoices (order_id, amount, worker, attempt)"
                        " VALUES (%s, %s, %s, %s)",
                        (order_id, message["payload"]["amount"], name, message["attempt"]),
                    )
                    invoiced.append(order_id)
            if refused:
                # The lease is no longer ours (it expired, say): undo the whole batch (leaving
                # the `with` block by Rollback rolls back); its messages are delivered again.
                print(f"{name}: ack refused ({refused}), batch rolled back", flush=True)
                raise psycopg.Rollback()
            if failed:
                # Stop the batch here: the messages after it come back too, in order.
                break
    if not refused:  # committed
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
