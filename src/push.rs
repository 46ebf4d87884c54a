//! `queen_push` (SPEC §3.1): checking what producers send, and writing messages.
//!
//! A push writes only new rows: registry rows for a partition nobody has registered yet, and
//! the messages. It never updates a shared row, so a producer inside a long business
//! transaction holds no lock that another producer or consumer could wait for. Order within
//! a partition is (txid, seq): the pushing transaction's id and this backend's counter.

use crate::error::{shorten, QueenError, QueenResult};
use crate::names::{self, DEFAULT_PARTITION};
use crate::spi::Query;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{PgBuiltInOids as T, PgOid};
use pgrx::prelude::*;
use pgrx::{JsonB, Uuid};
use serde_json::Value;
use std::cell::Cell;
use std::collections::HashMap;

/// The longest `transaction_id` accepted: like names, 255 characters. (A key must also fit a
/// btree index entry; 255 characters always do.)
pub const MAX_TRANSACTION_ID_CHARS: usize = 255;

/// One message to push, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct PushItem {
    pub queue: String,
    pub partition: String,
    pub payload: Value,
    pub transaction_id: Option<String>,
    pub trace_id: Option<uuid::Uuid>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushStatus {
    Queued,
    Duplicate,
}

impl PushStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PushStatus::Queued => "queued",
            PushStatus::Duplicate => "duplicate",
        }
    }
}

/// The outcome of one item, in the shape of `queen.push_result`.
#[derive(Debug, Clone)]
pub struct PushResult {
    pub idx: i32,
    pub message_id: Uuid,
    pub transaction_id: String,
    pub queue: String,
    pub partition: String,
    pub partition_id: Uuid,
    pub status: PushStatus,
}

pub fn check_transaction_id(what: &str, id: &str) -> QueenResult<()> {
    if id.is_empty() {
        return Err(QueenError::invalid(what.to_string(), "must not be empty (omit it or pass NULL for none)"));
    }
    let n = id.chars().count();
    if n > MAX_TRANSACTION_ID_CHARS {
        return Err(QueenError::invalid(
            what.to_string(),
            format!("is {n} characters long, the limit is {MAX_TRANSACTION_ID_CHARS}: \"{}\"", shorten(id)),
        ));
    }
    Ok(())
}

/// The items of the batch form: a JSON array of objects in Queen's wire shape
/// `{"queue", "partition"?, "payload"?, "transactionId"?, "traceId"?}`.
pub fn parse_items(items: &Value) -> QueenResult<Vec<PushItem>> {
    let arr = items.as_array().ok_or_else(|| {
        QueenError::invalid(
            "argument \"items\"",
            format!("must be a JSON array of objects, got {}", shorten(&items.to_string())),
        )
    })?;
    arr.iter().enumerate().map(|(i, item)| parse_item(i, item)).collect()
}

fn parse_item(i: usize, item: &Value) -> QueenResult<PushItem> {
    let obj = item.as_object().ok_or_else(|| {
        QueenError::invalid(format!("items[{i}]"), format!("must be an object, got {}", shorten(&item.to_string())))
    })?;
    let string = |key: &str| -> QueenResult<Option<&str>> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(other) => Err(QueenError::invalid(
                format!("items[{i}].{key}"),
                format!("must be a string, got {}", shorten(&other.to_string())),
            )),
        }
    };
    let queue_what = format!("items[{i}].queue");
    let queue = match string("queue")? {
        None => return Err(QueenError::invalid(queue_what, "is missing")),
        Some(q) => names::check_name("queue", &queue_what, Some(q))?.to_string(),
    };
    // A missing or null partition means the default one; an empty string is an error.
    let partition = match string("partition")? {
        None => DEFAULT_PARTITION.to_string(),
        Some(p) => names::check_name("partition", &format!("items[{i}].partition"), Some(p))?.to_string(),
    };
    let transaction_id = string("transactionId")?.map(str::to_string);
    if let Some(t) = &transaction_id {
        check_transaction_id(&format!("items[{i}].transactionId"), t)?;
    }
    let trace_id = match string("traceId")? {
        None => None,
        Some(t) => Some(uuid::Uuid::parse_str(t).map_err(|_| QueenError::InvalidText {
            what: format!("items[{i}].traceId"),
            value: t.to_string(),
            kind: "uuid",
        })?),
    };
    Ok(PushItem {
        queue,
        partition,
        payload: obj.get("payload").cloned().unwrap_or(Value::Null),
        transaction_id,
        trace_id,
    })
}

const SQL: &str = include_str!("../sql/queries/push.sql");
const UUIDS: PgOid = PgOid::BuiltIn(T::UUIDARRAYOID);
const TEXTS: PgOid = PgOid::BuiltIn(T::TEXTARRAYOID);
const INT8S: PgOid = PgOid::BuiltIn(T::INT8ARRAYOID);
const JSONBS: PgOid = PgOid::BuiltIn(T::JSONBARRAYOID);
const REGISTER: Query = Query { file: SQL, name: "register", args: &[UUIDS, TEXTS, UUIDS, TEXTS] };
const COUNT_QUEUE: Query =
    Query { file: SQL, name: "count_queue", args: &[PgOid::BuiltIn(T::UUIDOID), PgOid::BuiltIn(T::INT8OID)] };
const INSERT_MESSAGES: Query = Query {
    file: SQL,
    name: "insert_messages",
    args: &[UUIDS, INT8S, UUIDS, UUIDS, TEXTS, TEXTS, JSONBS, UUIDS],
};
const HOLDERS: Query = Query { file: SQL, name: "holders", args: &[UUIDS, TEXTS] };

thread_local! {
    /// Orders the messages of one transaction: (txid, seq) is unique because a transaction
    /// belongs to one backend and this counter never goes back within the backend.
    static SEQ: Cell<i64> = const { Cell::new(0) };
}

fn next_seq() -> i64 {
    SEQ.with(|s| {
        let v = s.get() + 1;
        s.set(v);
        v
    })
}

pub fn to_pg(u: uuid::Uuid) -> Uuid {
    Uuid::from_bytes(*u.as_bytes())
}

pub fn from_pg(u: Uuid) -> uuid::Uuid {
    uuid::Uuid::from_bytes(*u.as_bytes())
}

/// Push checked items, in order, in the caller's transaction.
pub fn push(items: Vec<PushItem>) -> QueenResult<Vec<PushResult>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    // Ids, computed once per distinct queue and partition.
    let mut partitions: HashMap<(&str, &str), (uuid::Uuid, uuid::Uuid)> = HashMap::new();
    for it in &items {
        partitions.entry((&it.queue, &it.partition)).or_insert_with(|| {
            let q = names::queue_id(&it.queue);
            (q, names::partition_id(&q, &it.partition))
        });
    }
    let mut results: Vec<PushResult> = items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let (_, p) = partitions[&(it.queue.as_str(), it.partition.as_str())];
            PushResult {
                idx: i as i32,
                message_id: to_pg(uuid::Uuid::now_v7()),
                transaction_id: String::new(),
                queue: it.queue.clone(),
                partition: it.partition.clone(),
                partition_id: to_pg(p),
                status: PushStatus::Queued,
            }
        })
        .collect();

    Spi::connect_mut(|client| {
        // 1. Registry rows, and the caps of capped queues.
        let (mut rq, mut rqn, mut rp, mut rpn) = (vec![], vec![], vec![], vec![]);
        for ((queue, partition), (q, p)) in &partitions {
            rq.push(to_pg(*q));
            rqn.push(queue.to_string());
            rp.push(to_pg(*p));
            rpn.push(partition.to_string());
        }
        let caps: Vec<(Uuid, i64)> = REGISTER
            .execute(client, &[rq.into(), rqn.into(), rp.into(), rpn.into()])
            .expect("queen: register")
            .map(|r| (r.get::<Uuid>(1).unwrap().unwrap(), r.get::<i64>(2).unwrap().unwrap()))
            .collect();

        // 2. The messages. A key that turns out to be held (and whose holder vanished before
        // we could read it, which only retention can cause) is pushed again, at most twice.
        let mut todo: Vec<usize> = (0..items.len()).collect();
        for _round in 0..3 {
            if todo.is_empty() {
                break;
            }
            let queued = insert(client, &items, &mut results, &todo, &partitions);
            let dups: Vec<usize> = todo.iter().copied().filter(|i| !queued.contains(&results[*i].message_id)).collect();
            for i in &todo {
                if queued.contains(&results[*i].message_id) {
                    results[*i].status = PushStatus::Queued;
                }
            }
            todo = resolve_duplicates(client, &items, &mut results, dups);
            for i in &todo {
                results[*i].message_id = to_pg(uuid::Uuid::now_v7());
            }
        }
        if !todo.is_empty() {
            return Err(QueenError::invalid(
                format!("items[{}].transactionId", todo[0]),
                "its holder disappeared while the push ran; push it again",
            ));
        }

        // 3. Caps: counted after the insert, so that a producer pushing one transaction after
        // another can never overshoot; pushes in flight in other transactions are not visible
        // and may (SPEC §4 maxSize).
        for (queue_id, max) in caps {
            if !results.iter().any(|r| r.status == PushStatus::Queued && queue_of(&partitions, r) == queue_id) {
                continue;
            }
            let n = COUNT_QUEUE
                .execute(client, &[queue_id.into(), (max.saturating_add(1)).into()])
                .expect("queen: count_queue")
                .first()
                .get_one::<i64>()
                .expect("queen: count")
                .unwrap_or(0);
            if n > max {
                let queue = results.iter().find(|r| queue_of(&partitions, r) == queue_id).unwrap().queue.clone();
                return Err(QueenError::QueueFull { queue, max_size: max });
            }
        }
        Ok(())
    })?;

    for (r, it) in results.iter_mut().zip(&items) {
        if r.transaction_id.is_empty() {
            r.transaction_id = it.transaction_id.clone().unwrap_or_else(|| r.message_id.to_string());
        }
    }
    Ok(results)
}

fn queue_of(partitions: &HashMap<(&str, &str), (uuid::Uuid, uuid::Uuid)>, r: &PushResult) -> Uuid {
    to_pg(partitions[&(r.queue.as_str(), r.partition.as_str())].0)
}

/// Insert items `todo`; returns the message ids that were inserted.
fn insert(
    client: &mut pgrx::spi::SpiClient<'_>,
    items: &[PushItem],
    results: &mut [PushResult],
    todo: &[usize],
    partitions: &HashMap<(&str, &str), (uuid::Uuid, uuid::Uuid)>,
) -> std::collections::HashSet<Uuid> {
    let n = todo.len();
    let (mut pid, mut seq, mut qid, mut mid) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut tid, mut pname, mut payload, mut trace) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for &i in todo {
        let it = &items[i];
        let (q, p) = partitions[&(it.queue.as_str(), it.partition.as_str())];
        pid.push(to_pg(p));
        seq.push(next_seq());
        qid.push(to_pg(q));
        mid.push(results[i].message_id);
        tid.push(it.transaction_id.clone());
        pname.push(it.partition.clone());
        payload.push(JsonB(it.payload.clone()));
        trace.push(it.trace_id.map(to_pg));
    }
    let args: [DatumWithOid; 8] =
        [pid.into(), seq.into(), qid.into(), mid.into(), tid.into(), pname.into(), payload.into(), trace.into()];
    INSERT_MESSAGES
        .execute(client, &args)
        .expect("queen: insert_messages")
        .map(|r| r.get::<Uuid>(1).unwrap().unwrap())
        .collect()
}

/// Point duplicates at the message that holds their key. Returns the items whose holder
/// could not be found (deleted in between).
fn resolve_duplicates(
    client: &mut pgrx::spi::SpiClient<'_>,
    items: &[PushItem],
    results: &mut [PushResult],
    dups: Vec<usize>,
) -> Vec<usize> {
    if dups.is_empty() {
        return dups;
    }
    let pids: Vec<Uuid> = dups.iter().map(|&i| results[i].partition_id).collect();
    let tids: Vec<String> = dups.iter().map(|&i| items[i].transaction_id.clone().unwrap_or_default()).collect();
    let holders: HashMap<(Uuid, String), Uuid> = HOLDERS
        .execute(client, &[pids.into(), tids.into()])
        .expect("queen: holders")
        .map(|r| {
            (
                (r.get::<Uuid>(1).unwrap().unwrap(), r.get::<String>(2).unwrap().unwrap()),
                r.get::<Uuid>(3).unwrap().unwrap(),
            )
        })
        .collect();
    let mut missing = vec![];
    for i in dups {
        let key = (results[i].partition_id, items[i].transaction_id.clone().unwrap_or_default());
        match holders.get(&key) {
            Some(holder) => {
                results[i].message_id = *holder;
                results[i].status = PushStatus::Duplicate;
            }
            None => missing.push(i),
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_take_queens_wire_shape() {
        let items = parse_items(&json!([
            {"queue": "q", "payload": {"a": 1}},
            {"queue": "q", "partition": "p", "payload": null, "transactionId": "t1",
             "traceId": "0190a5b4-0000-7000-8000-000000000000"},
            {"queue": "q", "partition": null}
        ]))
        .unwrap();
        assert_eq!(items[0].partition, "Default");
        assert_eq!(items[0].payload, json!({"a": 1}));
        assert_eq!(items[1].partition, "p");
        assert_eq!(items[1].transaction_id.as_deref(), Some("t1"));
        assert!(items[1].trace_id.is_some());
        assert_eq!(items[2].partition, "Default");
        assert_eq!(items[2].payload, Value::Null, "a missing payload is JSON null");
    }

    fn err(v: Value) -> QueenError {
        parse_items(&v).unwrap_err()
    }

    #[test]
    fn bad_items_are_refused_with_their_place() {
        assert!(err(json!({"queue": "q"})).to_string().contains("argument \"items\": must be a JSON array"));
        assert!(err(json!([1])).to_string().contains("items[0]: must be an object"));
        assert!(err(json!([{"queue": "q"}, {}])).to_string().contains("items[1].queue: is missing"));
        assert!(err(json!([{"queue": ""}])).to_string().contains("items[0].queue: must not be empty"));
        assert!(err(json!([{"queue": 5}])).to_string().contains("items[0].queue: must be a string"));
        assert!(err(json!([{"queue": "q", "partition": ""}])).to_string().contains("items[0].partition: must not be empty"));
        assert!(err(json!([{"queue": "x".repeat(256)}])).to_string().contains("256 characters"));
        assert!(err(json!([{"queue": "q", "transactionId": 7}])).to_string().contains("items[0].transactionId"));
        assert!(err(json!([{"queue": "q", "transactionId": ""}])).to_string().contains("must not be empty"));
        let e = err(json!([{"queue": "q", "traceId": "nope"}]));
        assert!(matches!(e, QueenError::InvalidText { .. }), "{e:?}");
        assert!(e.to_string().contains("items[0].traceId: invalid uuid: \"nope\""));
        assert!(err(json!([{"queue": "q", "traceId": 5}])).to_string().contains("must be a string"));
    }

    #[test]
    fn an_empty_batch_is_fine() {
        assert!(parse_items(&json!([])).unwrap().is_empty());
    }
}
