//! Queue and partition names, and the ids derived from them.
//!
//! Ids are UUIDv5 of the name (partition ids: of the queue id and the partition name), so any
//! backend can compute them without reading or writing a registry row first. That is what
//! lets a push into a brand-new partition proceed without waiting for another transaction
//! that is creating the same partition (semantics §3.1; docs/design.md).

use crate::error::{shorten, QueenError, QueenResult};
use uuid::Uuid;

/// Names count characters, not bytes (semantics §7).
pub const MAX_NAME_CHARS: usize = 255;

/// The oid of the schema `queen` (InvalidOid when there is none): what is kept per backend is
/// kept for one installation of the extension, and dropped with it. (Looked up once until an
/// invalidation: oids.rs.)
pub fn schema_oid() -> pgrx::pg_sys::Oid {
    crate::oids::schema()
}

/// The reserved consumer-group name under which queue mode (a NULL group) is stored.
pub const QUEUE_MODE_GROUP: &str = "__QUEUE_MODE__";

/// The partition a push goes to when it names none.
pub const DEFAULT_PARTITION: &str = "Default";

/// Namespace of queue ids: UUIDv5("queen.queue") in the URL namespace, fixed forever, since
/// stored rows carry ids derived from it.
const QUEUE_NAMESPACE: Uuid = Uuid::from_u128(0x5c4f_0a8e_6a1b_5b8e_9d0c_2f7e_3a41_b6d2);

/// Check a queue, partition or group name: present, not empty, at most 255 characters.
/// `argument` is how the caller names it in errors ("queue", "items[3].partition", ...).
pub fn check_name<'a>(argument: &'static str, what: &str, value: Option<&'a str>) -> QueenResult<&'a str> {
    let v = value.ok_or(QueenError::NullValue { argument })?;
    if v.is_empty() {
        return Err(QueenError::invalid(what.to_string(), "must not be empty"));
    }
    let n = v.chars().count();
    if n > MAX_NAME_CHARS {
        return Err(QueenError::invalid(
            what.to_string(),
            format!("is {n} characters long, the limit is {MAX_NAME_CHARS}: \"{}\"", shorten(v)),
        ));
    }
    Ok(v)
}

/// Whether `check_name` passes `v` without counting its characters: not empty, and no more
/// bytes than the limit of characters. (A name it does not pass may still be valid.)
pub fn plainly_valid(v: &str) -> bool {
    !v.is_empty() && v.len() <= MAX_NAME_CHARS
}

/// Check a consumer group name: like other names, and not the name queue mode is kept under.
pub fn check_group(what: &str, group: &str) -> QueenResult<()> {
    check_name("consumer_group", what, Some(group))?;
    if group == QUEUE_MODE_GROUP {
        return Err(QueenError::invalid(
            what.to_string(),
            format!("\"{QUEUE_MODE_GROUP}\" is reserved for queue mode: pass NULL for queue mode"),
        ));
    }
    Ok(())
}

/// The stored name of a group: queue mode is kept under a reserved name.
pub fn group_key(group: Option<&str>) -> &str {
    group.unwrap_or(QUEUE_MODE_GROUP)
}

/// The uuid crate's ids and pgrx's are the same 16 bytes.
pub fn to_pg(u: Uuid) -> pgrx::Uuid {
    pgrx::Uuid::from_bytes(*u.as_bytes())
}

pub fn from_pg(u: pgrx::Uuid) -> Uuid {
    Uuid::from_bytes(*u.as_bytes())
}

pub fn queue_id(queue: &str) -> Uuid {
    if let Some(id) = MEMO.with(|m| m.borrow().queues.get(queue).copied()) {
        return id;
    }
    let id = Uuid::new_v5(&QUEUE_NAMESPACE, queue.as_bytes());
    MEMO.with(|m| m.borrow_mut().keep(|m| m.queues.insert(queue.to_owned(), id)));
    id
}

pub fn partition_id(queue_id: &Uuid, partition: &str) -> Uuid {
    let kept = MEMO.with(|m| m.borrow().partitions.get(queue_id).and_then(|p| p.get(partition)).copied());
    if let Some(id) = kept {
        return id;
    }
    let id = Uuid::new_v5(queue_id, partition.as_bytes());
    MEMO.with(|m| m.borrow_mut().keep(|m| m.partitions.entry(*queue_id).or_default().insert(partition.to_owned(), id)));
    id
}

/// Ids a backend derived, kept: an id is SHA-1 of its name (~1.5 k instructions; a single push
/// derived two, 3 k of its 226 k), a lookup costs a hash of the name. They never change (a pure
/// function of the names), so nothing invalidates them; at most [`MEMO_NAMES`] names (about
/// 1 MB at 255 characters each), then they start again.
#[derive(Default)]
struct Memo {
    queues: std::collections::HashMap<String, Uuid>,
    partitions: std::collections::HashMap<Uuid, std::collections::HashMap<String, Uuid>>,
    names: usize,
}

const MEMO_NAMES: usize = 4096;

impl Memo {
    fn keep<R>(&mut self, put: impl FnOnce(&mut Memo) -> R) {
        if self.names >= MEMO_NAMES {
            *self = Memo::default();
        }
        self.names += 1;
        put(self);
    }
}

thread_local! {
    static MEMO: std::cell::RefCell<Memo> = std::cell::RefCell::new(Memo::default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_ids_are_the_derived_ones_past_the_bound() {
        let derived = |q: &str, p: &str| {
            let qid = Uuid::new_v5(&QUEUE_NAMESPACE, q.as_bytes());
            (qid, Uuid::new_v5(&qid, p.as_bytes()))
        };
        for round in 0..2 {
            for i in 0..MEMO_NAMES + 10 {
                // Each partition name under seven queues.
                let (q, p) = (format!("q{}", i % 7), format!("p{}", i / 7));
                let qid = queue_id(&q);
                assert_eq!((qid, partition_id(&qid, &p)), derived(&q, &p), "round {round}, {i}");
            }
        }
        assert!(MEMO.with(|m| m.borrow().names) <= MEMO_NAMES);
    }

    #[test]
    fn ids_are_stable_and_distinct() {
        let q = queue_id("orders");
        assert_eq!(q, queue_id("orders"));
        assert_ne!(q, queue_id("Orders"));
        assert_eq!(q.get_version_num(), 5);
        let p = partition_id(&q, "customer-1");
        assert_ne!(p, partition_id(&queue_id("invoices"), "customer-1"));
        assert_ne!(p, partition_id(&q, "customer-2"));
    }

    #[test]
    fn names_are_checked_in_characters() {
        assert_eq!(check_name("queue", "argument \"queue\"", Some("q")).unwrap(), "q");
        assert_eq!(
            check_name("queue", "argument \"queue\"", None).unwrap_err(),
            QueenError::NullValue { argument: "queue" }
        );
        assert!(check_name("queue", "argument \"queue\"", Some(""))
            .unwrap_err()
            .to_string()
            .contains("must not be empty"));
        // 255 two-byte characters are 510 bytes but a valid name.
        let ok = "é".repeat(255);
        assert!(check_name("queue", "q", Some(&ok)).is_ok());
        let long = "é".repeat(256);
        assert!(check_name("queue", "q", Some(&long)).unwrap_err().to_string().contains("256 characters"));
    }
}
