// Worker (examples/README.md): turns each order's message into an invoice, exactly once.
//
//     DATABASE_URL=postgresql://... node worker.js w1      (until SIGTERM / Ctrl-C)
'use strict';

const { Client } = require('pg');

const POP = "SELECT * FROM queen_pop('orders', 'invoicing', batch => 10, wait_ms => 1000)";

// SIGTERM / Ctrl-C: finish the batch in hand, commit, leave. A pop that is waiting returns within
// its wait_ms, so the loop sees the flag within a second.
let stopping = false;
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    stopping = true;
  });
}

// Acks the batch: the messages in `done` completed and, after a failure, the failed one charged
// and the rest given back. One call when nothing failed: queen_ack_lease acks everything the
// lease still holds. queen refuses rather than raises (a lease that expired, or was lost): the
// rows say so. Returns why queen refused, or null.
async function ack(client, messages, done, failed) {
  const lease = messages[0].lease_id;
  const rows = [];
  if (failed && done.length > 0) {
    // What was invoiced before the failure, completed (the batch form, one call).
    const acks = done.map((m) => ({ messageId: m.message_id, leaseId: lease }));
    const r = await client.query('SELECT success, error FROM queen_ack($1::jsonb)', [JSON.stringify(acks)]);
    rows.push(...r.rows);
  }
  // The rest of the lease: all of it completed, or, after a failure, the first message not acked
  // yet (the failed one) charged and the ones after it back to the queue ('superseded').
  const [status, error] = failed ? ['failed', 'simulated failure'] : ['completed', null];
  const r = await client.query('SELECT success, error FROM queen_ack_lease($1, $2, $3)', [lease, status, error]);
  rows.push(...r.rows);
  const refused = rows.find((row) => !row.success && row.error !== 'superseded');
  if (refused) return refused.error;
  // One row per message of the batch, unless the lease is gone: a lease no row holds any more
  // (it expired, and another worker took the partition) answers no rows.
  return rows.length === messages.length ? null : 'lease not held';
}

// One batch in one transaction: the pop's lease, the invoices and the acks commit together or not
// at all. Returns a line for the log, or null for an empty pop.
async function batch(client, name) {
  await client.query('BEGIN');
  try {
    const { rows: messages } = await client.query(POP);
    if (messages.length === 0) {
      await client.query('COMMIT');
      return null;
    }
    const done = [];
    let failed = null;
    for (const message of messages) {
      const order = message.payload;
      if (order.order_id % 10 === 3 && message.attempt === 1) {
        // A flaky downstream: 'failed' charges one attempt; queen delivers the message again
        // after retryDelay (a dead letter once retryLimit is spent). The messages after it come
        // back too, in order, so the batch stops here; what was invoiced before it commits.
        failed = order.order_id;
        break;
      }
      // ON CONFLICT: if this batch's lease was lost, the invoice may meet the one its new holder
      // wrote; the ack is then refused and the whole batch rolled back.
      await client.query(
        'INSERT INTO invoices (order_id, amount, worker, attempt) VALUES ($1, $2, $3, $4) ' +
          'ON CONFLICT (order_id) DO NOTHING',
        [order.order_id, order.amount, name, message.attempt],
      );
      done.push(message);
    }
    const refused = await ack(client, messages, done, failed !== null);
    if (refused) {
      // The lease is no longer ours (it expired and another worker may have the messages):
      // undo the invoices, the messages will be delivered again.
      await client.query('ROLLBACK');
      return `ack refused (${refused}), batch rolled back`;
    }
    await client.query('COMMIT');
    const note = failed !== null ? `, order ${failed} failed on attempt 1` : '';
    return `${messages.length} from ${messages[0].partition}: ${done.length} invoiced${note}`;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

async function main() {
  const name = process.argv[2];
  if (!name) throw new Error('usage: node worker.js NAME');

  // One connection per worker: a transaction is a connection's, so no pool.
  const client = new Client({
    connectionString: process.env.DATABASE_URL,
    application_name: `queen-example-${name}`,
  });
  // A connection lost between queries is reported here; the next query then fails and ends main.
  client.on('error', (err) => console.error(`${name}: connection error:`, err.message));
  await client.connect();
  try {
    while (!stopping) {
      const line = await batch(client, name);
      if (line) console.log(`${name}: ${line}`);
    }
  } finally {
    await client.end();
  }
  console.log(`${name}: stopped`);
}

main().catch((err) => {
  console.error(`${process.argv[2] ?? 'worker'}:`, err);
  process.exit(1);
});
