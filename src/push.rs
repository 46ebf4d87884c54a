//! `queen_push` (semantics §3.1): checking what producers send, and writing messages.
//!
//! A push writes only new rows: registry rows for a partition nobody has registered yet, and
//! the messages. It never updates a shared row, so a producer inside a long business
//! transaction holds no lock that another producer or consumer could wait for. Order within
//! a partition is (txid, seq): the pushing transaction's id and this backend's counter.

use crate::error::{shorten, QueenError, QueenResult};
use crate::jsonb::{Element, Field, Jsonb};
use crate::names::{self, from_pg, to_pg, DEFAULT_PARTITION};
use crate::spi::arrays;
use crate::spi::types::{INT4, INT4S, INT8, INT8S, JSONB, TEXT, TEXTS, UUID, UUIDS};
use crate::spi::{Query, Spi};
use pgrx::datum::DatumWithOid;
use pgrx::Uuid;
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

/// The fields of a push item that queen reads (the payload goes from the argument to the
/// table as is: insert_messages).
pub const ITEM_KEYS: &[&str] = &["queue", "partition", "transactionId", "traceId"];

/// The field of a push item that holds its payload.
const PAYLOAD: &str = "payload";

/// The items of the batch form, a JSON array of objects in Queen's wire shape
/// `{"queue", "partition"?, "payload"?, "transactionId"?, "traceId"?}`, as
/// `Jsonb::elements(ITEM_KEYS)` read them.
pub fn parse_items(elements: &[Element]) -> QueenResult<Vec<PushItem>> {
    elements.iter().enumerate().map(|(i, item)| parse_item(i, item)).collect()
}

/// The error for an items argument that is not an array.
pub fn not_an_array(kind: &str) -> QueenError {
    QueenError::invalid("argument \"items\"", format!("must be a JSON array of objects, got a JSON {kind}"))
}

fn parse_item(i: usize, item: &Element) -> QueenResult<PushItem> {
    let obj = match item {
        Element::Object(obj) => obj,
        Element::Other(kind) => {
            return Err(QueenError::invalid(format!("items[{i}]"), format!("must be an object, got a JSON {kind}")))
        }
    };
    let string = |key: &str| -> QueenResult<Option<&str>> {
        match obj.get(key) {
            None | Some(Field::Null) => Ok(None),
            Some(Field::Str(s)) => Ok(Some(s.as_ref())),
            Some(other) => Err(QueenError::invalid(
                format!("items[{i}].{key}"),
                format!("must be a string, got {}", shorten(&other.json())),
            )),
        }
    };
    // (The label an error names is made only for an error: a hundred `format!`s a batch
    // showed in a batch push's profile.)
    let name = |argument: &'static str, key: &str, v: &str| -> QueenResult<String> {
        if names::plainly_valid(v) {
            return Ok(v.to_string());
        }
        names::check_name(argument, &format!("items[{i}].{key}"), Some(v)).map(str::to_string)
    };
    let queue = match string("queue")? {
        None => return Err(QueenError::invalid(format!("items[{i}].queue"), "is missing")),
        Some(q) => name("queue", "queue", q)?,
    };
    // A missing or null partition means the default one; an empty string is an error.
    let partition = match string("partition")? {
        None => DEFAULT_PARTITION.to_string(),
        Some(p) => name("partition", "partition", p)?,
    };
    let transaction_id = string("transactionId")?.map(str::to_string);
    if let Some(t) = &transaction_id {
        if t.is_empty() || t.len() > MAX_TRANSACTION_ID_CHARS {
            check_transaction_id(&format!("items[{i}].transactionId"), t)?;
        }
    }
    let trace_id = match string("traceId")? {
        None => None,
        Some(t) => Some(uuid::Uuid::parse_str(t).map_err(|_| QueenError::InvalidText {
            what: format!("items[{i}].traceId"),
            value: t.to_string(),
            kind: "uuid",
        })?),
    };
    Ok(PushItem { queue, partition, transaction_id, trace_id })
}

const SQL: &str = include_str!("../sql/queries/push.sql");
const REGISTER: Query = Query { file: SQL, name: "register", args: &[UUIDS, TEXTS, UUIDS, TEXTS] };
const COUNT_QUEUE: Query = Query { file: SQL, name: "count_queue", args: &[UUID, INT8] };
const QUEUE_CAP: Query = Query { file: SQL, name: "queue_cap", args: &[UUID] };
const PUSH_ONE: Query = Query { file: SQL, name: "push_one", args: &[UUID, INT8, UUID, UUID, TEXT, TEXT, JSONB, UUID] };
const PUSH_ONE_KEYLESS: Query = Query { name: "push_one_keyless", ..PUSH_ONE };
const PUSH_KNOWN: Query = Query { name: "push_known", ..PUSH_ONE };
const PUSH_KNOWN_KEYLESS: Query = Query { name: "push_known_keyless", ..PUSH_ONE };
const INSERT_MESSAGES: Query = Query {
    file: SQL,
    name: "insert_messages",
    args: &[UUIDS, INT8S, UUIDS, UUIDS, TEXTS, TEXTS, JSONB, INT4S, UUIDS, INT8],
};
const INSERT_MESSAGES_KEYLESS: Query = Query { name: "insert_messages_keyless", ..INSERT_MESSAGES };
const HOLDERS: Query = Query { file: SQL, name: "holders", args: &[UUIDS, TEXTS] };
const CITUS_PUSH_ONE: Query =
    Query { file: SQL, name: "citus_push_one", args: &[UUID, INT8, UUID, UUID, TEXT, TEXT, JSONB, UUID, INT4] };
const CITUS_PUSH_ONE_KEYLESS: Query = Query { name: "citus_push_one_keyless", ..CITUS_PUSH_ONE };
const CITUS_INSERT_MESSAGES: Query = Query {
    file: SQL,
    name: "citus_insert_messages",
    args: &[UUIDS, INT8S, UUIDS, UUIDS, TEXTS, TEXTS, JSONB, INT4S, UUIDS, INT4],
};
const CITUS_INSERT_MESSAGES_KEYLESS: Query = Query { name: "citus_insert_messages_keyless", ..CITUS_INSERT_MESSAGES };
const CITUS_PARTITIONS_REGISTERED: Query =
    Query { file: SQL, name: "citus_partitions_registered", args: &[INT4, UUIDS] };
const CITUS_REGISTER_PARTITION: Query =
    Query { file: SQL, name: "citus_register_partition", args: &[UUID, UUID, TEXT, INT4] };
const CITUS_HOLDERS: Query = Query { file: SQL, name: "citus_holders", args: &[UUIDS, TEXTS, INT4] };

thread_local! {
    /// Orders the messages of one transaction: (txid, seq) is unique because a transaction
    /// belongs to one backend and this counter never goes back within the backend.
    static SEQ: Cell<i64> = const { Cell::new(0) };
}

thread_local! {
    /// The maxSize of queues, as read (None: the queue has none, or no registry row yet), kept
    /// per backend under cache.rs's tickets: `queen_configure` and the deletes retire them.
    static CAPS: std::cell::RefCell<crate::cache::Map<Uuid, Option<i64>>> =
        std::cell::RefCell::new(crate::cache::Map::new());
    /// Partitions seen with a registry row committed by another transaction (never one only
    /// this transaction wrote, which a rollback may take back): their pushes skip the registry.
    /// Kept under cache.rs's tickets: the deletes and maintenance's removal of idle partitions
    /// retire them. (A push that used an entry while a removal committed is the push that saw
    /// the row just before it went, which maintenance registers again: maintain.sql.)
    static SETTLED: std::cell::RefCell<crate::cache::Map<Uuid, bool>> =
        std::cell::RefCell::new(crate::cache::Map::new());
}

/// Whether `partition` is known to be registered (see SETTLED), under `ticket`.
fn settled(ticket: Option<&crate::cache::Ticket>, partition: Uuid) -> bool {
    ticket.is_some_and(|t| SETTLED.with(|m| m.borrow().get(&partition, t).is_some()))
}

/// Keep `partitions` as registered, read under `ticket`.
fn keep_settled(ticket: Option<crate::cache::Ticket>, partitions: impl IntoIterator<Item = Uuid>) {
    if let Some(t) = ticket {
        SETTLED.with(|m| {
            let mut m = m.borrow_mut();
            for p in partitions {
                m.put(p, t, true);
            }
        });
    }
}

/// The queue's maxSize, if it has one: from the backend's cache, or read (and kept).
fn queue_cap(s: &mut Spi, queue_id: Uuid) -> Option<i64> {
    crate::cache::read_through(&CAPS, queue_id, || {
        QUEUE_CAP.run(s, &[queue_id.into()]).next().and_then(|r| r.get::<i64>("max_size")).filter(|m| *m > 0)
    })
}

fn next_seq() -> i64 {
    SEQ.with(|s| {
        let v = s.get() + 1;
        s.set(v);
        v
    })
}

/// Where the payloads come from.
pub enum Payloads {
    /// The one payload of the scalar form.
    One(Jsonb),
    /// The items argument of the batch form: item i's payload is `items -> i -> 'payload'`.
    Items(Jsonb),
}

/// Ids of a checked item.
struct Target {
    queue_id: Uuid,
    partition_id: Uuid,
}

fn new_result(idx: usize, it: &PushItem, t: &Target, shard: Option<i32>) -> PushResult {
    PushResult {
        idx: idx as i32,
        message_id: to_pg(crate::shards::new_message_id(shard)),
        transaction_id: String::new(),
        queue: it.queue.clone(),
        partition: it.partition.clone(),
        partition_id: t.partition_id,
        status: PushStatus::Queued,
    }
}

/// Push checked items, in order, in the caller's transaction. `shard`: on Citus, the shard key
/// every item's partition has, in the worker that holds it (api/push.rs routes the calls);
/// None on one server.
pub fn push(items: Vec<PushItem>, payloads: Payloads, shard: Option<i32>) -> QueenResult<Vec<PushResult>> {
    push_preset(items, payloads, shard, None)
}

/// [`push`] on one server with the message ids the items are to have (a timer's, promised
/// when it was scheduled: timers.rs), one per item.
pub fn push_with_ids(items: Vec<PushItem>, payloads: Payloads, ids: Vec<uuid::Uuid>) -> QueenResult<Vec<PushResult>> {
    assert_eq!(items.len(), ids.len(), "queen: one message id per item");
    push_preset(items, payloads, None, Some(ids))
}

fn push_preset(
    items: Vec<PushItem>,
    payloads: Payloads,
    shard: Option<i32>,
    ids: Option<Vec<uuid::Uuid>>,
) -> QueenResult<Vec<PushResult>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut queues: HashMap<&str, uuid::Uuid> = HashMap::new();
    let mut partitions: HashMap<(&str, &str), uuid::Uuid> = HashMap::new();
    let targets: Vec<Target> = items
        .iter()
        .map(|it| {
            let q = *queues.entry(&it.queue).or_insert_with(|| names::queue_id(&it.queue));
            let p =
                *partitions.entry((&it.queue, &it.partition)).or_insert_with(|| names::partition_id(&q, &it.partition));
            Target { queue_id: to_pg(q), partition_id: to_pg(p) }
        })
        .collect();
    let mut results: Vec<PushResult> =
        items.iter().zip(&targets).enumerate().map(|(i, (it, t))| new_result(i, it, t, shard)).collect();
    if let Some(ids) = ids {
        for (r, id) in results.iter_mut().zip(ids) {
            r.message_id = to_pg(id);
        }
    }

    // Shared locks of the queues written (locks.rs): a queen_delete_queue that is open is
    // waited for, and one that comes later waits for this transaction. In id order: two
    // transactions never wait for each other's.
    let mut written: Vec<(&str, uuid::Uuid)> = queues.iter().map(|(n, q)| (*n, *q)).collect();
    written.sort_unstable_by_key(|(_, q)| *q.as_bytes());
    for (name, q) in written {
        crate::locks::writing(to_pg(q), Some(name), None)?;
    }
    crate::session::connect(|s| -> QueenResult<()> {
        match payloads {
            Payloads::One(payload) => push_one(s, &items[0], &targets[0], &mut results[0], payload, shard)?,
            Payloads::Items(all) => push_batch(s, &items, &targets, &mut results, all, shard)?,
        }
        Ok(())
    })?;
    for (r, it) in results.iter_mut().zip(&items) {
        // (The uuid crate's formatting: pgrx's, a write per byte, was 3% of a batch push.)
        r.transaction_id = it.transaction_id.clone().unwrap_or_else(|| from_pg(r.message_id).to_string());
    }
    // Waiting pops of these queues are woken when this transaction commits, and look first at
    // the partition of the last message queued in each.
    for (r, t) in results.iter().zip(&targets) {
        if r.status == PushStatus::Queued {
            crate::wait::pushed(crate::wait::queue_key(&from_pg(t.queue_id)), &from_pg(t.partition_id));
        }
    }
    Ok(results)
}

/// One message: a single statement in the common case (partition registered, queue uncapped).
fn push_one(
    s: &mut Spi,
    it: &PushItem,
    t: &Target,
    r: &mut PushResult,
    payload: Jsonb,
    shard: Option<i32>,
) -> QueenResult<()> {
    for _attempt in 0..3 {
        let seq = next_seq();
        let args = |r: &PushResult| -> Vec<DatumWithOid> {
            vec![
                t.partition_id.into(),
                seq.into(),
                t.queue_id.into(),
                r.message_id.into(),
                it.transaction_id.as_deref().into(),
                it.partition.as_str().into(),
                payload.into(),
                it.trace_id.map(to_pg).into(),
            ]
        };
        let keyless = it.transaction_id.is_none();
        let queued = match shard {
            None => {
                // One statement: the insert, and (unless known) whether the partition is
                // registered; the cap is kept per backend (queue_cap).
                let ticket = crate::cache::ticket();
                let known = settled(ticket.as_ref(), t.partition_id);
                let query = match (known, keyless) {
                    (true, true) => &PUSH_KNOWN_KEYLESS,
                    (true, false) => &PUSH_KNOWN,
                    (false, true) => &PUSH_ONE_KEYLESS,
                    (false, false) => &PUSH_ONE,
                };
                // A registered partition's keyless message: written by hand on one server
                // (direct_save.rs), as push_known_keyless writes it.
                let by_hand = known
                    && keyless
                    && crate::direct_save::insert_message(
                        s,
                        &crate::direct_save::NewMessage {
                            partition_id: t.partition_id,
                            seq,
                            queue_id: t.queue_id,
                            message_id: r.message_id,
                            partition: &it.partition,
                            payload,
                            trace_id: it.trace_id.map(to_pg),
                        },
                    )
                    .is_some();
                let inserted = if by_hand {
                    Some(Some(true))
                } else {
                    query.run(s, &args(r)).next().map(|row| if known { Some(true) } else { row.get::<bool>("settled") })
                };
                if let Some(registered) = inserted {
                    match registered {
                        None => {
                            let now_settled = register(s, &[(it, t)]);
                            keep_settled(ticket, now_settled);
                        }
                        Some(true) if !known => keep_settled(ticket, [t.partition_id]),
                        Some(_) => {}
                    }
                    if let Some(max) = queue_cap(s, t.queue_id) {
                        check_cap(s, &it.queue, t.queue_id, max)?;
                    }
                }
                inserted.is_some()
            }
            Some(k) => {
                // On Citus, in the worker of shard k: the insert, then the partition's registry
                // row if it has none, each a statement on one table of the shard (maxSize is the
                // coordinator's to check there, over every shard: route.rs check_caps).
                let mut args = args(r);
                args.push(k.into());
                let query = if keyless { &CITUS_PUSH_ONE_KEYLESS } else { &CITUS_PUSH_ONE };
                let inserted = query.run(s, &args).next().is_some();
                if inserted {
                    register_sharded(s, &[(it, t)], k);
                }
                inserted
            }
        };
        if queued {
            r.status = PushStatus::Queued;
            return Ok(());
        }
        if resolve_duplicates(s, std::slice::from_ref(it), std::slice::from_mut(r), vec![0], shard).is_empty() {
            return Ok(());
        }
        // The holder vanished (retention deleted it) between our insert and our read.
        r.message_id = to_pg(crate::shards::new_message_id(shard));
    }
    Err(holder_vanished(0))
}

/// Registry rows, on Citus, for the partitions of shard `k` among `targets` that have none.
fn register_sharded(s: &mut Spi, targets: &[(&PushItem, &Target)], k: i32) {
    let mut ids: Vec<Uuid> = targets.iter().map(|(_, t)| t.partition_id).collect();
    ids.sort_unstable_by_key(|u| *u.as_bytes());
    ids.dedup();
    let args: [DatumWithOid; 2] = [k.into(), ids.into()];
    let known: std::collections::HashSet<Uuid> =
        CITUS_PARTITIONS_REGISTERED.run(s, &args).map(|r| r.req::<Uuid>("partition_id")).collect();
    let mut done = std::collections::HashSet::new();
    for (it, t) in targets {
        if !known.contains(&t.partition_id) && done.insert(t.partition_id) {
            let args: [DatumWithOid; 4] =
                [t.partition_id.into(), t.queue_id.into(), it.partition.as_str().into(), k.into()];
            CITUS_REGISTER_PARTITION.run(s, &args);
        }
    }
}

fn holder_vanished(i: usize) -> QueenError {
    QueenError::invalid(format!("items[{i}].transactionId"), "its holder disappeared while the push ran; push it again")
}

/// Registry rows for the partitions (and queues) of `targets` that have none visible. Returns
/// those that had one committed by another transaction.
fn register(s: &mut Spi, targets: &[(&PushItem, &Target)]) -> Vec<Uuid> {
    let mut seen = std::collections::HashSet::new();
    let (mut rq, mut rqn, mut rp, mut rpn) = (vec![], vec![], vec![], vec![]);
    for (it, t) in targets {
        if seen.insert(t.partition_id) {
            rq.push(t.queue_id);
            rqn.push(it.queue.clone());
            rp.push(t.partition_id);
            rpn.push(it.partition.clone());
        }
    }
    let args: [DatumWithOid; 4] = [rq.into(), rqn.into(), rp.into(), rpn.into()];
    REGISTER.run(s, &args).map(|r| r.req::<Uuid>("partition_id")).collect()
}

/// Caps are checked after the insert, so that a producer pushing one transaction after
/// another never overshoots; pushes in flight in other transactions are not visible and may
/// (semantics §4 maxSize).
fn check_cap(s: &mut Spi, queue: &str, queue_id: Uuid, max: i64) -> QueenResult<()> {
    let args: [DatumWithOid; 2] = [queue_id.into(), max.saturating_add(1).into()];
    let n = COUNT_QUEUE.run(s, &args).first().get::<i64>("messages").unwrap_or(0);
    if n > max {
        return Err(QueenError::QueueFull { queue: queue.to_string(), max_size: max });
    }
    Ok(())
}

fn push_batch(
    s: &mut Spi,
    items: &[PushItem],
    targets: &[Target],
    results: &mut [PushResult],
    all: Jsonb,
    shard: Option<i32>,
) -> QueenResult<()> {
    let pairs: Vec<(&PushItem, &Target)> = items.iter().zip(targets).collect();
    let caps = match shard {
        None => {
            // The registry, for the partitions not known to be registered (one statement, or
            // none); the caps of the queues, kept per backend.
            let ticket = crate::cache::ticket();
            let unknown: Vec<(&PushItem, &Target)> =
                pairs.iter().copied().filter(|(_, t)| !settled(ticket.as_ref(), t.partition_id)).collect();
            if !unknown.is_empty() {
                let now_settled = register(s, &unknown);
                keep_settled(ticket, now_settled);
            }
            let mut queues: Vec<Uuid> = targets.iter().map(|t| t.queue_id).collect();
            queues.sort_unstable_by_key(|q| *q.as_bytes());
            queues.dedup();
            queues.into_iter().filter_map(|q| queue_cap(s, q).map(|max| (q, max))).collect()
        }
        Some(k) => {
            register_sharded(s, &pairs, k);
            Vec::new()
        }
    };
    let mut todo: Vec<usize> = (0..items.len()).collect();
    if shard.is_none() && insert_keyless_by_hand(s, &pairs, results, all) {
        todo.clear();
    }
    for _round in 0..3 {
        if todo.is_empty() {
            break;
        }
        let n = todo.len();
        let (mut pid, mut seq, mut qid, mut mid) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut tid, mut pname, mut idx, mut trace) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for &i in &todo {
            pid.push(targets[i].partition_id);
            seq.push(next_seq());
            qid.push(targets[i].queue_id);
            mid.push(results[i].message_id);
            tid.push(items[i].transaction_id.clone());
            pname.push(items[i].partition.clone());
            idx.push(i as i32);
            trace.push(items[i].trace_id.map(to_pg));
        }
        let mut args: Vec<DatumWithOid> = vec![
            arrays::uuids(&pid),
            arrays::int8s(&seq),
            arrays::uuids(&qid),
            arrays::uuids(&mid),
            tid.into(),
            pname.into(),
            all.into(),
            arrays::int4s(&idx),
            arrays::opt_uuids(&trace),
        ];
        let keyless = todo.iter().all(|&i| items[i].transaction_id.is_none());
        if shard.is_none() {
            args.push(crate::cluster::txid().into());
        }
        let query = match (shard, keyless) {
            (None, true) => &INSERT_MESSAGES_KEYLESS,
            (None, false) => &INSERT_MESSAGES,
            (Some(k), keyless) => {
                args.push(k.into());
                if keyless {
                    &CITUS_INSERT_MESSAGES_KEYLESS
                } else {
                    &CITUS_INSERT_MESSAGES
                }
            }
        };
        let dups: Vec<usize> = if shard.is_none() && keyless {
            // Every row is inserted (or the statement raises): nothing comes back to compare.
            query.run(s, &args);
            Vec::new()
        } else if shard.is_some() && !keyless {
            // Citus: the insert returns nothing (push.sql); an item with a key is queued when
            // its key's holder is its own message, and a duplicate of the holder otherwise.
            query.run(s, &args);
            todo.iter().copied().filter(|i| items[*i].transaction_id.is_some()).collect()
        } else {
            let queued: std::collections::HashSet<Uuid> =
                query.run(s, &args).map(|r| r.req::<Uuid>("message_id")).collect();
            todo.iter().copied().filter(|i| !queued.contains(&results[*i].message_id)).collect()
        };
        todo = resolve_duplicates(s, items, results, dups, shard);
        for i in &todo {
            results[*i].message_id = to_pg(crate::shards::new_message_id(shard));
        }
    }
    if let Some(&i) = todo.first() {
        return Err(holder_vanished(i));
    }
    for (queue_id, max) in caps {
        let r =
            results.iter().position(|r| r.status == PushStatus::Queued && targets[r.idx as usize].queue_id == queue_id);
        if let Some(i) = r {
            check_cap(s, &items[i].queue, queue_id, max)?;
        }
    }
    Ok(())
}

/// A batch without transaction ids on one server, every row written by hand (direct_save.rs
/// `Messages`) as insert_messages_keyless writes them; false, having written nothing, when the
/// statement is to write them (an item with a transaction id, a table not as that code writes
/// it).
fn insert_keyless_by_hand(s: &mut Spi, pairs: &[(&PushItem, &Target)], results: &[PushResult], all: Jsonb) -> bool {
    if pairs.iter().any(|(it, _)| it.transaction_id.is_some()) {
        return false;
    }
    let Some(mut writer) = crate::direct_save::Messages::open(s) else {
        return false;
    };
    let payloads = all.values_of(PAYLOAD);
    let mut null = None;
    for (i, (it, t)) in pairs.iter().enumerate() {
        // COALESCE(items -> i -> 'payload', 'null'): a copy of the item's payload, freed once
        // its row is written.
        let own = payloads.get(i).copied().flatten().map(|m| m.to_jsonb());
        let payload = own.unwrap_or_else(|| *null.get_or_insert_with(Jsonb::null));
        writer.insert(&crate::direct_save::NewMessage {
            partition_id: t.partition_id,
            seq: next_seq(),
            queue_id: t.queue_id,
            message_id: results[i].message_id,
            partition: &it.partition,
            payload,
            trace_id: it.trace_id.map(to_pg),
        });
        if let Some(p) = own {
            // SAFETY: palloc'd by to_jsonb, no longer referenced (the row copied it).
            unsafe { pgrx::pg_sys::pfree(p.0.cast_mut_ptr()) };
        }
    }
    true
}

/// Point duplicates at the message that holds their key. Returns the items whose holder
/// could not be found (deleted in between).
fn resolve_duplicates(
    s: &mut Spi,
    items: &[PushItem],
    results: &mut [PushResult],
    dups: Vec<usize>,
    shard: Option<i32>,
) -> Vec<usize> {
    if dups.is_empty() {
        return dups;
    }
    let pids: Vec<Uuid> = dups.iter().map(|&i| results[i].partition_id).collect();
    let tids: Vec<String> = dups.iter().map(|&i| items[i].transaction_id.clone().unwrap_or_default()).collect();
    let mut args: Vec<DatumWithOid> = vec![pids.into(), tids.into()];
    let query = match shard {
        None => &HOLDERS,
        Some(k) => {
            args.push(k.into());
            &CITUS_HOLDERS
        }
    };
    let holders: HashMap<(Uuid, String), Uuid> = query
        .run(s, &args)
        .map(|r| ((r.req::<Uuid>("partition_id"), r.req::<String>("transaction_id")), r.req::<Uuid>("message_id")))
        .collect();
    let mut missing = vec![];
    for i in dups {
        let key = (results[i].partition_id, items[i].transaction_id.clone().unwrap_or_default());
        match holders.get(&key) {
            // (On Citus the items that hold their own key are asked too: push_batch.)
            Some(holder) if *holder == results[i].message_id => {}
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
    use serde_json::{json, Value};

    /// The items of a JSON value as `Jsonb::elements` reads them from a jsonb argument.
    fn parse(v: &Value) -> QueenResult<Vec<PushItem>> {
        let arr = v.as_array().ok_or_else(|| not_an_array("object"))?;
        let elements: Vec<Element> = arr.iter().map(|e| Element::of(e, ITEM_KEYS)).collect();
        parse_items(&elements)
    }

    #[test]
    fn items_take_queens_wire_shape() {
        let items = parse(&json!([
            {"queue": "q", "payload": {"a": 1}},
            {"queue": "q", "partition": "p", "payload": null, "transactionId": "t1",
             "traceId": "0190a5b4-0000-7000-8000-000000000000"},
            {"queue": "q", "partition": null}
        ]))
        .unwrap();
        assert_eq!(items[0].partition, "Default");
        assert_eq!(items[1].partition, "p");
        assert_eq!(items[1].transaction_id.as_deref(), Some("t1"));
        assert!(items[1].trace_id.is_some());
        assert_eq!(items[2].partition, "Default");
    }

    fn err(v: Value) -> QueenError {
        parse(&v).unwrap_err()
    }

    #[test]
    fn bad_items_are_refused_with_their_place() {
        assert!(err(json!({"queue": "q"})).to_string().contains("argument \"items\": must be a JSON array"));
        assert!(err(json!([1])).to_string().contains("items[0]: must be an object, got a JSON number"));
        assert!(err(json!([{"queue": "q"}, {}])).to_string().contains("items[1].queue: is missing"));
        assert!(err(json!([{"queue": ""}])).to_string().contains("items[0].queue: must not be empty"));
        assert!(err(json!([{"queue": 5}])).to_string().contains("items[0].queue: must be a string"));
        assert!(err(json!([{"queue": "q", "partition": ""}]))
            .to_string()
            .contains("items[0].partition: must not be empty"));
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
        assert!(parse(&json!([])).unwrap().is_empty());
    }
}
