//! One message and what each consumer group has made of it (`queen_message`, issue 24: Queen's
//! message detail, `GET /api/v1/messages/:partitionId/:transactionId`). A group has `consumed`
//! the message when its cursor counts it finished (completed, or given up on as a dead letter:
//! cursor.rs `is_finished`); `leaseExpiresAt` is set while an active lease of the group holds
//! it. Groups that have not read the partition have no row and are not listed.
//!
//! Only for callers with `read` on the message's queue; to others a message is not found (the
//! answer does not tell whether it exists).

use crate::cursor::Key;
use crate::error::{QueenError, QueenResult};
use crate::jsonb::Jsonb;
use crate::privilege::{self, Privilege};
use crate::spi::types::{TEXT, UUID};
use crate::spi::{Query, Row};
use crate::state;
use pgrx::datum::TimestampWithTimeZone;
use pgrx::Uuid;
use serde_json::{json, Value};

const SQL: &str = include_str!("../sql/queries/message.sql");
const BY_TRANSACTION: Query = Query { file: SQL, name: "message_by_transaction", args: &[UUID, TEXT] };
const BY_ID: Query = Query { file: SQL, name: "message_by_id", args: &[UUID, UUID] };
const GROUPS: Query = Query { file: SQL, name: "message_groups", args: &[UUID] };
const AS_JSONB: Query = Query { file: SQL, name: "message_jsonb", args: &[TEXT] };

/// A group's view of one message (key `k`) from its cursor row.
pub fn group_state(row: &state::CursorRow, k: Key, now: state::Micros) -> (bool, Option<Uuid>) {
    let consumed = row.cursor.is_finished(k);
    let leased = !consumed && row.lease_active(now) && row.cursor.lease.as_ref().is_some_and(|b| b.keys.contains(&k));
    (consumed, if leased { row.lease_id } else { None })
}

/// The message's fields but its payload, the payload's JSON text, its key and its queue.
fn message_json(r: &Row<'_>, partition_id: Uuid) -> (Value, String, Key, Option<String>) {
    let message_id: Uuid = r.req("message_id");
    let v = json!({
        "messageId": message_id.to_string(),
        "transactionId": r.get::<String>("transaction_id").unwrap_or_else(|| message_id.to_string()),
        "queue": r.get::<String>("queue"),
        "partition": r.req::<String>("partition"),
        "partitionId": partition_id.to_string(),
        "traceId": r.get::<Uuid>("trace_id").map(|t| t.to_string()),
        "createdAt": r.req::<String>("created_text"),
    });
    (v, r.req("payload_text"), (r.req("txid"), r.req("seq")), r.get::<String>("queue"))
}

/// The message of `transaction_id` (or, for one pushed without, of that message id) in
/// partition `partition_id`, with its groups; None when there is none the caller may read.
/// The payload is never parsed: its text is spliced into the object's (any jsonb a push
/// accepted comes back, however deep).
pub fn detail(partition_id: Uuid, transaction_id: &str) -> QueenResult<Option<Jsonb>> {
    if crate::route::distributed().is_some() {
        return Err(QueenError::invalid("queen_message", "is not available on a distributed (Citus) queen yet"));
    }
    // The bound of a stored transaction id (a longer one names no message).
    crate::push::check_transaction_id("argument \"transaction_id\"", transaction_id)?;
    let found = crate::session::connect(|s| {
        let by_txn = BY_TRANSACTION
            .run(s, &[partition_id.into(), transaction_id.into()])
            .next()
            .map(|r| message_json(&r, partition_id));
        by_txn.or_else(|| {
            let id = uuid::Uuid::parse_str(transaction_id).ok()?;
            BY_ID
                .run(s, &[partition_id.into(), crate::names::to_pg(id).into()])
                .next()
                .map(|r| message_json(&r, partition_id))
        })
    });
    let Some((mut message, payload, key, queue)) = found else {
        return Ok(None);
    };
    if !queue.is_some_and(|q| privilege::allowed_now(&q, Privilege::Read)) {
        return Ok(None);
    }
    let groups: Vec<Value> = crate::session::connect(|s| {
        GROUPS
            .run(s, &[partition_id.into()])
            .map(|r| {
                let row = state::parse(&r);
                let now = state::micros(r.req::<TimestampWithTimeZone>("now"));
                let (consumed, lease) = group_state(&row, key, now);
                json!({
                    "name": r.req::<String>("consumer_group"),
                    "consumed": consumed,
                    "leaseId": lease.map(|l| l.to_string()),
                    "leaseExpiresAt": lease.and(r.get::<String>("lease_expires_text")),
                    "attempt": row.cursor.attempt_of(key),
                })
            })
            .collect()
    });
    message["consumerGroups"] = Value::Array(groups);
    let text = splice_payload(&message.to_string(), &payload);
    Ok(Some(crate::session::connect(|s| {
        Jsonb(
            AS_JSONB.run(s, &[text.as_str().into()]).first().transfer("detail", -1).expect("queen: jsonb of an object"),
        )
    })))
}

/// JSON object text `object` (not empty) with a field `payload` of JSON text `payload` first.
fn splice_payload(object: &str, payload: &str) -> String {
    let rest = object.strip_prefix('{').expect("queen: an object's text");
    let sep = if rest.trim_start().starts_with('}') { "" } else { "," };
    format!("{{\"payload\":{payload}{sep}{rest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::{Batch, Cursor};

    fn row(done: Key, lease: Option<Vec<Key>>, expires: Option<i64>) -> state::CursorRow {
        state::CursorRow {
            cursor: Cursor { done, lease: lease.map(|keys| Batch::new(keys, vec![])), ..Cursor::default() },
            retry_at: None,
            lease_id: expires.map(|_| Uuid::from_bytes([7; 16])),
            lease_expires_at: expires,
            version: None,
        }
    }

    #[test]
    fn the_payload_is_spliced_in_as_text() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        let out = splice_payload(r#"{"a":1}"#, &deep);
        assert_eq!(out, format!("{{\"payload\":{deep},\"a\":1}}"));
        assert_eq!(splice_payload("{}", "2"), r#"{"payload":2}"#);
    }

    #[test]
    fn a_group_has_consumed_what_its_cursor_finished() {
        let now = 1_000;
        let table = [
            // (cursor row, message key, consumed, leased)
            (row((5, 3), None, None), (5, 2), true, false),
            (row((5, 3), None, None), (5, 4), false, false),
            (row((5, 3), Some(vec![(5, 4), (6, 1)]), Some(2_000)), (6, 1), false, true),
            // A lease that expired holds nothing.
            (row((5, 3), Some(vec![(5, 4)]), Some(500)), (5, 4), false, false),
            // A message outside the batch is not leased.
            (row((5, 3), Some(vec![(5, 4)]), Some(2_000)), (7, 1), false, false),
        ];
        for (r, k, consumed, leased) in table {
            let (c, l) = group_state(&r, k, now);
            assert_eq!((c, l.is_some()), (consumed, leased), "key {k:?}");
        }
    }
}
