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

// queen_ack refuses rather than raises (a lease that expired, or was lost): the row says so.
async function ack(client, message, status, error = null) {
  const { rows } = await client.query('SELECT success, error FROM queen_ack($1, $2, $3, $4)', [
    message.message_id,
    message.lease_id,
    status,
    error,
  ]);
  return rows[0];
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
    let invoiced = 0;
    let note = '';
    for (const message of messages) {
      const order = message.payload;
      if (order.order_id % 10 === 3 && message.attempt === 1) {
        // A flaky downstream: 'failed' charges one attempt; queen delivers the message again
        // after retryDelay (a dead letter once retryLimit is spent). The messages after it come
        // back too, in order, so the batch stops here; what was invoiced before it commits.
        const result = await ack(client, message, 'failed', 'simulated failure');
        if (!result.success) {
          await client.query('ROLLBACK');
          return `ack refused (${result.error}), batch rolled back`;
        }
        note = `, order ${order.order_id} failed on attempt 1`;
        break;
      }
      // The ack first: a lease lost meanwhile is refused before any business write (the invoice
      // would otherwise meet the one the lease's new holder wrote).
      const result = await ack(client, message, 'completed');
      if (!result.success) {
        // The lease is no longer ours (it expired and another worker may have the messages):
        // undo the invoices, the messages will be delivered again.
        await client.query('ROLLBACK');
        return `ack refused (${result.error}), batch rolled back`;
      }
      await client.query(
        'INSERT INTO invoices (order_id, amount, worker, attempt) VALUES ($1, $2, $3, $4)',
        [order.order_id, order.amount, name, message.attempt],
      );
      invoiced++;
    }
    await client.query('COMMIT');
    return `${messages.length} from ${messages[0].partition}: ${invoiced} invoiced${note}`;
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
