//! A producer and a worker for queen's `orders` queue (examples/README.md, examples/schema.sql).
//!
//!   queen-example producer N     orders 1..N, each pushed with its order (the outbox pattern)
//!   queen-example worker NAME    invoices orders until SIGTERM / Ctrl-C
//!
//! Both read the connection string from DATABASE_URL.

use std::env;
use std::error::Error;
use std::process::ExitCode;

use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tokio_postgres::{Client, NoTls, Row, Transaction};
use uuid::Uuid;

type Result<T, E = Box<dyn Error + Send + Sync>> = std::result::Result<T, E>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let done = match args.as_slice() {
        [cmd, n] if cmd == "producer" => match n.parse() {
            Ok(n) => producer(n).await,
            Err(_) => Err(format!("producer N: not a number: {n}").into()),
        },
        [cmd, name] if cmd == "worker" => worker(name).await,
        _ => Err("usage: queen-example producer N | worker NAME".into()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queen-example: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn connect() -> Result<Client> {
    let url = env::var("DATABASE_URL").ok().filter(|url| !url.is_empty()).ok_or("DATABASE_URL is not set")?;
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    // The connection object does the I/O; it runs until the client is dropped.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(client)
}

/// Orders 1..=n. The order and its message are written in one transaction: the message exists
/// exactly when the order does.
async fn producer(n: i64) -> Result<()> {
    let mut client = connect().await?;
    for id in 1..=n {
        let customer = format!("c{}", id % 10);
        // Money as a decimal string, never a float: numeric in SQL, a string in the payload.
        let amount = format!("{}.{:02}", 10 + id % 90, id * 7 % 100);
        let payload = json!({ "order_id": id, "customer": customer, "amount": amount });

        let tx = client.transaction().await?;
        tx.execute(
            "INSERT INTO orders (id, customer, amount) VALUES ($1, $2, $3::text::numeric)",
            &[&id, &customer, &amount],
        )
        .await?;
        // One partition per customer: a customer's orders are invoiced in order. The transaction
        // id makes a retried push of this order a 'duplicate', not a second message.
        let pushed = tx
            .query_one(
                "SELECT status FROM queen_push('orders', $1::jsonb, partition => $2, \
                 transaction_id => $3)",
                &[&payload, &customer, &format!("order-{id}")],
            )
            .await?;
        let status: String = pushed.get("status");

        if id % 25 == 0 {
            // A business failure: rolling back takes the order and its message with it.
            tx.rollback().await?;
            println!("order {id}: rolled back (no order, no message)");
        } else {
            tx.commit().await?;
            println!("order {id}: {status}");
        }
    }
    Ok(())
}

/// What became of one message of a batch.
enum Step {
    Invoiced,
    /// Could not be processed: acked 'failed', queen delivers it again after retryDelay, with
    /// the rest of the batch.
    Failed(i64),
}

/// Pop, invoice, ack, commit, until asked to stop. The invoices and the acks of a batch commit
/// together or not at all, so each order is invoiced exactly once.
async fn worker(name: &str) -> Result<()> {
    // Installed first: from here on SIGTERM and Ctrl-C only ask the loop to stop; the batch in
    // hand is finished and committed, never cut off in the middle of its transaction.
    let mut term = signal(SignalKind::terminate())?;
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = stop_tx.send(true);
    });

    let mut client = connect().await?;
    println!("{name}: started");
    while !*stop.borrow() {
        let tx = client.transaction().await?;
        // Up to 10 messages of one partition under a lease; waits up to 1 s when there are none,
        // so a stop request is seen within a second.
        let batch =
            tx.query("SELECT * FROM queen_pop('orders', 'invoicing', batch => 10, wait_ms => 1000)", &[]).await?;
        if batch.is_empty() {
            tx.commit().await?;
            continue;
        }

        let partition: String = batch[0].get("partition");
        let (mut done, mut failed) = (Vec::new(), None);
        for message in &batch {
            match handle(&tx, name, message).await? {
                Step::Invoiced => done.push(message.get::<_, Uuid>("message_id")),
                // Stop the batch here: the messages after it come back too, in order.
                Step::Failed(order_id) => {
                    failed = Some(order_id);
                    break;
                }
            }
        }

        if let Some(error) = ack(&tx, &batch, &done, failed.is_some()).await? {
            // Nothing of this batch happened: its invoices go with the refused ack.
            tx.rollback().await?;
            println!("{name}: {partition}: ack refused ({error}), batch rolled back");
            continue;
        }
        tx.commit().await?;
        match failed {
            Some(order_id) => println!(
                "{name}: {partition}: {} invoiced of {}, order {order_id} failed (comes back)",
                done.len(),
                batch.len()
            ),
            None => println!("{name}: {partition}: {} invoiced", done.len()),
        }
    }
    println!("{name}: stopped");
    Ok(())
}

/// One message, in the batch's transaction: its invoice, unless it fails.
async fn handle(tx: &Transaction<'_>, name: &str, message: &Row) -> Result<Step> {
    let attempt: i32 = message.get("attempt");
    let payload: Value = message.get("payload");
    let order_id = payload["order_id"].as_i64().ok_or("a payload without order_id")?;

    // A flaky downstream: orders ending in 3 fail on their first attempt.
    if order_id % 10 == 3 && attempt == 1 {
        return Ok(Step::Failed(order_id));
    }
    // ON CONFLICT: if this batch's lease was lost, the invoice may meet the one its new holder
    // wrote; the ack is then refused and the whole batch rolled back.
    tx.execute(
        "INSERT INTO invoices (order_id, amount, worker, attempt) \
         VALUES ($1, ($2::jsonb ->> 'amount')::numeric, $3, $4) ON CONFLICT (order_id) DO NOTHING",
        &[&order_id, &payload, &name, &attempt],
    )
    .await?;
    Ok(Step::Invoiced)
}

/// Ack the batch: the messages `done` completed and, after a failure, the failed one charged
/// and the rest given back. One call when nothing failed: queen_ack_lease acks everything the
/// lease still holds. Returns why queen refused, if it did (a refusal is a row, not an error:
/// it must be checked).
async fn ack(tx: &Transaction<'_>, batch: &[Row], done: &[Uuid], failed: bool) -> Result<Option<String>> {
    let lease: Uuid = batch[0].get("lease_id");
    let mut rows = Vec::new();
    if failed && !done.is_empty() {
        // What was invoiced before the failure, completed (the batch form, one call).
        let acks: Vec<Value> = done.iter().map(|m| json!({ "messageId": m.to_string(), "leaseId": lease.to_string() })).collect();
        rows.extend(tx.query("SELECT success, error FROM queen_ack($1::jsonb)", &[&Value::Array(acks)]).await?);
    }
    // The rest of the lease: all of it completed, or, after a failure, the first message not
    // acked yet (the failed one) charged and the ones after it back to the queue ('superseded').
    let (status, error) = if failed { ("failed", Some("simulated failure")) } else { ("completed", None) };
    rows.extend(tx.query("SELECT success, error FROM queen_ack_lease($1, $2, $3)", &[&lease, &status, &error]).await?);
    for row in &rows {
        let error: Option<String> = row.get("error");
        if !row.get::<_, bool>("success") && error.as_deref() != Some("superseded") {
            return Ok(Some(error.unwrap_or_default()));
        }
    }
    // One row per message of the batch, unless the lease is gone: a lease no row holds any more
    // (it expired, and another worker took the partition) answers no rows.
    Ok((rows.len() != batch.len()).then(|| "lease not held".to_string()))
}
