use crate::ack::{self, AckEntry, AckResult, AckStatus};
use crate::api::rows::SetOfIterator;
use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use crate::names;
use crate::names::from_pg;
use pgrx::prelude::*;
use pgrx::Uuid;

/// `queen_ack(message_id, lease_id, status, error, consumer_group)`: semantics §3.3, one message.
/// A refused ack is a row with `success = false` and the reason, not an error.
/// `RETURNS queen.ack_result`.
/// (Under queen's search_path without a SET clause, once SQL needs it: gucs::with_fixed_search_path.)
#[pg_extern(name = "queen_ack", volatile, parallel_unsafe)]
fn queen_ack_one(
    message_id: Option<Uuid>,
    lease_id: Option<Uuid>,
    status: default!(Option<&str>, "'completed'"),
    error: default!(Option<&str>, "NULL"),
    consumer_group: default!(Option<&str>, "NULL"),
) -> AckResult {
    const F: &str = "queen_ack";
    crate::gucs::with_fixed_search_path(|| {
        let entry = checked_one(message_id, lease_id, status, error, consumer_group);
        if let Some(layout) = crate::route::distributed() {
            let (id, status) = (message_id.expect("checked"), status.expect("checked"));
            return crate::route::ack_one(&layout, id, lease_id, status, error, consumer_group);
        }
        ack::ack(&[entry]).or_report(F).pop().expect("queen: one result per entry")
    })
}

/// The arguments of the one-message form, checked, as an entry (semantics §3.3, §7).
fn checked_one(
    message_id: Option<Uuid>,
    lease_id: Option<Uuid>,
    status: Option<&str>,
    error: Option<&str>,
    consumer_group: Option<&str>,
) -> AckEntry {
    const F: &str = "queen_ack";
    let message_id = message_id.ok_or(QueenError::NullValue { argument: "message_id" }).or_report(F);
    let status = status.ok_or(QueenError::NullValue { argument: "status" }).or_report(F);
    let status = AckStatus::parse("argument \"status\"", status).or_report(F);
    if let Some(g) = consumer_group {
        names::check_group("argument \"consumer_group\"", g).or_report(F);
    }
    AckEntry {
        message_id: Some(from_pg(message_id)),
        transaction_id: None,
        partition_id: None,
        lease_id: lease_id.map(from_pg),
        group: consumer_group.map(str::to_string),
        status,
        error: error.map(str::to_string),
    }
}

/// The acks argument of the batch form, read and checked.
fn checked_batch(acks: Option<Jsonb>) -> (Vec<AckEntry>, Jsonb) {
    const F: &str = "queen_ack";
    let acks = acks.ok_or(QueenError::NullValue { argument: "acks" }).or_report(F);
    (ack::parse_acks_jsonb(acks).or_report(F), acks)
}

/// `queen_ack(acks)`: semantics §3.3, a batch; one result per entry, in input order;
/// `RETURNS SETOF queen.ack_result`.
/// (Under queen's search_path without a SET clause: gucs::with_fixed_search_path.)
#[pg_extern(name = "queen_ack", volatile, parallel_unsafe)]
fn queen_ack_batch(acks: Option<Jsonb>) -> SetOfIterator<'static, AckResult> {
    const F: &str = "queen_ack";
    let results = crate::gucs::with_fixed_search_path(|| {
        let (entries, acks) = checked_batch(acks);
        match crate::route::distributed() {
            Some(layout) => crate::route::ack_batch(&layout, &entries, acks),
            None => ack::ack(&entries).or_report(F),
        }
    });
    SetOfIterator::new(results)
}

/// `queen_ack_lease(lease_id, status, error)`: semantics §3.4, every message the lease delivered
/// and not finished yet, in delivery order; `RETURNS SETOF queen.ack_result`.
/// (Under queen's search_path without a SET clause: gucs::with_fixed_search_path.)
#[pg_extern(name = "queen_ack_lease", volatile, parallel_unsafe)]
fn queen_ack_lease(
    lease_id: Option<Uuid>,
    status: default!(Option<&str>, "'completed'"),
    error: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, AckResult> {
    const F: &str = "queen_ack_lease";
    let results = crate::gucs::with_fixed_search_path(|| {
        let (lease, parsed) = checked_lease(lease_id, status);
        match crate::route::distributed() {
            Some(layout) => {
                let (lease, status) = (lease_id.expect("checked"), status.expect("checked"));
                crate::route::ack_lease(&layout, lease, status, error)
            }
            None => ack::ack_lease(lease, parsed, error).or_report(F),
        }
    });
    SetOfIterator::new(results)
}

/// The arguments of `queen_ack_lease`, checked (semantics §7).
fn checked_lease(lease_id: Option<Uuid>, status: Option<&str>) -> (uuid::Uuid, AckStatus) {
    const F: &str = "queen_ack_lease";
    let lease_id = lease_id.ok_or(QueenError::NullValue { argument: "lease_id" }).or_report(F);
    let status = status.ok_or(QueenError::NullValue { argument: "status" }).or_report(F);
    (from_pg(lease_id), AckStatus::parse("argument \"status\"", status).or_report(F))
}

/// The worker's side of an ack on Citus (route.rs): internal, in schema `queen`, made
/// distributed functions by `queen_distribute()`. The entries are applied in shard `shard`
/// (a message of another shard is not found there), under the `pop` grant as `queen_ack`.
#[pgrx::pg_schema]
mod queen {
    use super::{checked_batch, checked_lease, checked_one};
    use crate::ack;
    use crate::ack::AckResult;
    use crate::api::rows::SetOfIterator;
    use crate::error::OrReport;
    use crate::jsonb::Jsonb;
    use pgrx::prelude::*;
    use pgrx::Uuid;

    /// `queen.shard_ack_one(shard, message_id, lease_id, status, error, consumer_group,
    /// grants)`: `grants` those of the coordinator's caller, which the ack is checked against
    /// (privilege.rs acting_for: for the owner's calls only).
    #[allow(clippy::too_many_arguments)]
    #[pg_extern(volatile, parallel_unsafe)]
    #[search_path(pg_catalog, pg_temp)]
    fn shard_ack_one(
        shard: i32,
        message_id: Option<Uuid>,
        lease_id: Option<Uuid>,
        status: Option<&str>,
        error: Option<&str>,
        consumer_group: Option<&str>,
        grants: Option<Vec<String>>,
    ) -> AckResult {
        const F: &str = "queen_ack";
        let entry = checked_one(message_id, lease_id, status, error, consumer_group);
        crate::route::enter_shard(shard).or_report(F);
        let acked = crate::privilege::acting_for("queen.shard_ack_one", grants, || {
            crate::route::within_shard(shard, || ack::ack(&[entry]))
        });
        let mut results = acked.and_then(|r| r).or_report(F);
        results.pop().expect("queen: one result per entry")
    }

    /// `queen.shard_ack_lease(shard, lease_id, status, error, grants)`: the lease's rows in the
    /// shard; `idx` counts from 0 in each shard (the coordinator numbers them on).
    #[pg_extern(volatile, parallel_unsafe)]
    fn shard_ack_lease(
        shard: i32,
        lease_id: Option<Uuid>,
        status: Option<&str>,
        error: Option<&str>,
        grants: Option<Vec<String>>,
    ) -> SetOfIterator<'static, AckResult> {
        const F: &str = "queen_ack_lease";
        let results = crate::gucs::with_fixed_search_path(|| {
            let (lease, status) = checked_lease(lease_id, status);
            crate::route::enter_shard(shard).or_report(F);
            let acked = crate::privilege::acting_for("queen.shard_ack_lease", grants, || {
                crate::route::within_shard(shard, || ack::ack_lease(lease, status, error))
            });
            acked.and_then(|r| r).or_report(F)
        });
        SetOfIterator::new(results)
    }

    /// `queen.shard_ack(shard, acks, grants)`.
    #[pg_extern(volatile, parallel_unsafe)]
    fn shard_ack(shard: i32, acks: Option<Jsonb>, grants: Option<Vec<String>>) -> SetOfIterator<'static, AckResult> {
        const F: &str = "queen_ack";
        let results = crate::gucs::with_fixed_search_path(|| {
            let (entries, _) = checked_batch(acks);
            crate::route::enter_shard(shard).or_report(F);
            let acked = crate::privilege::acting_for("queen.shard_ack", grants, || {
                crate::route::within_shard(shard, || ack::ack(&entries))
            });
            acked.and_then(|r| r).or_report(F)
        });
        SetOfIterator::new(results)
    }
}
