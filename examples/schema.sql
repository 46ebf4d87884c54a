-- The application the worker examples share (examples/README.md): a producer records orders and
-- pushes a message for each in the same transaction (the outbox pattern); workers turn each
-- message into an invoice and ack it in the same transaction (exactly-once effect).
CREATE EXTENSION IF NOT EXISTS queen;

CREATE TABLE orders (
    id       bigint  PRIMARY KEY,
    customer text    NOT NULL,
    amount   numeric NOT NULL
);

CREATE TABLE invoices (
    order_id bigint  PRIMARY KEY REFERENCES orders,
    amount   numeric NOT NULL,
    worker   text    NOT NULL,  -- the worker that processed it
    attempt  int     NOT NULL   -- queen's attempt of the delivery that processed it
);

-- One partition per customer (a customer's orders are invoiced in order); a failed message comes
-- back after 100 ms; a lease lasts 30 s.
SELECT queen_configure('orders', '{"leaseTime": 30, "retryLimit": 3, "retryDelay": 100}');
