// Producer (examples/README.md): orders 1..N, each with its message, the outbox pattern.
//
//     DATABASE_URL=postgresql://... node producer.js 200
'use strict';

const { Client } = require('pg');

async function main() {
  const count = Number.parseInt(process.argv[2], 10);
  if (!(count > 0)) throw new Error('usage: node producer.js N');

  const client = new Client({
    connectionString: process.env.DATABASE_URL,
    application_name: 'queen-example-producer',
  });
  await client.connect();
  let queued = 0;
  let rolledBack = 0;
  try {
    for (let orderId = 1; orderId <= count; orderId++) {
      const customer = `c${orderId % 10}`;
      const amount = 10 + (orderId % 90);
      // One transaction on one client: the order and its message commit together or not at all.
      await client.query('BEGIN');
      try {
        await client.query('INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3)', [
          orderId,
          customer,
          amount,
        ]);
        // The customer is the partition (a customer's orders are invoiced in order); the
        // transaction id makes a retried push a 'duplicate', not a second message.
        const { rows } = await client.query(
          "SELECT status FROM queen_push('orders', $1::jsonb, partition => $2, transaction_id => $3)",
          [JSON.stringify({ order_id: orderId, customer, amount }), customer, `order-${orderId}`],
        );
        if (orderId % 25 === 0) {
          // A business failure: rolling back leaves neither the order nor its message.
          await client.query('ROLLBACK');
          rolledBack++;
          continue;
        }
        await client.query('COMMIT');
        if (rows[0].status === 'queued') queued++;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    }
  } finally {
    await client.end();
  }
  console.log(`producer: ${queued} orders queued, ${rolledBack} rolled back`);
}

main().catch((err) => {
  console.error('producer:', err);
  process.exit(1);
});
