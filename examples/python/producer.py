"""Producer (examples/README.md): orders 1..N, each with its message, the outbox pattern.

    DATABASE_URL=postgresql://... python producer.py 200
"""

import os
import sys

import psycopg
from psycopg.types.json import Jsonb


def main() -> None:
    count = int(sys.argv[1])
    # autocommit: nothing runs in a transaction unless a `with conn.transaction()` block says so.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        queued = rolled_back = 0
        for order_id in range(1, count + 1):
            customer = f"c{order_id % 10}"
            amount = 10 + order_id % 90
            # One transaction: the order and its message commit together or not at all.
            with conn.transaction():
                conn.execute(
                    "INSERT INTO orders (id, customer, amount) VALUES (%s, %s, %s)",
                    (order_id, customer, amount),
                )
                # The customer is the partition (a customer's orders are invoiced in order); the
                # transaction id makes a retried push a 'duplicate', not a second message.
                (status,) = conn.execute(
                    "SELECT status FROM queen_push('orders', %s::jsonb,"
                    " partition => %s, transaction_id => %s)",
                    (
                        Jsonb({"order_id": order_id, "customer": customer, "amount": amount}),
                        customer,
                        f"order-{order_id}",
                    ),
                ).fetchone()
                if order_id % 25 == 0:
                    # A business failure: rolling back leaves neither the order nor its message.
                    rolled_back += 1
                    raise psycopg.Rollback()  # leaves the `with` block, rolled back
                queued += status == "queued"
        print(f"producer: {queued} orders queued, {rolled_back} rolled back", flush=True)


if __name__ == "__main__":
    main()
