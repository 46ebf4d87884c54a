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
    /// Acked 'failed': queen delivers it again after retryDelay, with the rest of the batch.
    Failed(i64),
    /// queen refused the ack (say the lease expired and another worker has the partition).
    Refused(String),
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
        let (mut invoiced, mut failed, mut refused) = (0, None, None);
        for message in &batch {
            match handle(&tx, name, message).await? {
                Step::Invoiced => invoiced += 1,
                // Stop the batch here: the messages after it come back too, in order.
                Step::Failed(order_id) => {
                    failed = Some(order_id);
                    break;
                }
                Step::Refused(error) => {
                    refused = Some(error);
                    break;
                }
            }
        }

        if let Some(error) = refused {
            // Nothing of this batch happened: its invoices go with the refused ack.
            tx.rollback().await?;
            println!("{name}: {partition}: ack refused ({error}), batch rolled back");
            continue;
        }
        tx.commit().await?;
        match failed {
            Some(order_id) => println!(
                "{name}: {partition}: {invoiced} invoiced of {}, order {order_id} failed (comes back)",
                batch.len()
            ),
            None => println!("{name}: {partition}: {invoiced} invoiced"),
        }
    }
    println!("{name}: stopped");
    Ok(())
}

/// One message, in the batch's transaction.
async fn handle(tx: &Transaction<'_>, name: &str, message: &Row) -> Result<Step> {
    let message_id: Uuid = message.get("message_id");
    let lease_id: Uuid = message.get("lease_id");
    let attempt: i32 = message.get("attempt");
    let payload: Value = message.get("payload");
    let order_id = payload["order_id"].as_i64().ok_or("a payload without order_id")?;

    // A flaky downstream: orders ending in 3 fail on their first attempt.
    let fails = order_id % 10 == 3 && attempt == 1;
    let status = if fails { "failed" } else { "completed" };
    let error = fails.then_some("simulated failure");
    // The ack first: a lease lost meanwhile is refused before any business write (the invoice
    // would otherwise meet the one the lease's new holder wrote).
    let ack = tx
        .query_one("SELECT success, error FROM queen_ack($1, $2, $3, $4)", &[&message_id, &lease_id, &status, &error])
        .await?;
    // A refusal is a row, not an error: it must be checked.
    if !ack.get::<_, bool>("success") {
        let error: Option<String> = ack.get("error");
        return Ok(Step::Refused(error.unwrap_or_default()));
    }
    if fails {
        return Ok(Step::Failed(order_id));
    }
    tx.execute(
        "INSERT INTO invoices (order_id, amount, worker, attempt) \
         VALUES ($1, ($2::jsonb ->> 'amount')::numeric, $3, $4)",
        &[&order_id, &payload, &name, &attempt],
    )
    .await?;
    Ok(Step::Invoiced)
}
