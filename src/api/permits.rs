//! Locks and semaphores (permits.rs, docs/api.md "Locks and semaphores"): `queen_lock`.

use crate::error::{OrReport, QueenError};
use crate::jsonb::Jsonb;
use pgrx::prelude::*;
use pgrx::JsonB;

/// `queen_lock(operations)`: lock and semaphore operations (`acquire`, `renew`, `release`,
/// `get`) in the caller's transaction, in order; one result per operation. Needs `kv_write`
/// (`kv_read` for `get`) on the namespace `queen-locks`. `RETURNS SETOF jsonb`.
/// (Under queen's search_path without a SET clause: gucs::with_fixed_search_path.)
#[pg_extern(volatile, parallel_unsafe)]
fn queen_lock(operations: Option<Jsonb>) -> SetOfIterator<'static, JsonB> {
    const F: &str = "queen_lock";
    let results = crate::gucs::with_fixed_search_path(|| {
        let ops = operations.ok_or(QueenError::NullValue { argument: "operations" }).or_report(F);
        let text = ops.to_text();
        if text.len() > crate::kv::MAX_CALL_BYTES {
            QueenError::invalid(
                "argument \"operations\"",
                format!("is {} bytes as JSON, the limit is {}", text.len(), crate::kv::MAX_CALL_BYTES),
            )
            .report(F);
        }
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| QueenError::invalid("argument \"operations\"", format!("cannot be read ({e})")))
            .or_report(F);
        let ops = crate::permits::parse_all(&value).or_report(F);
        crate::permits::run(&ops).or_report(F)
    });
    SetOfIterator::new(results.into_iter().map(JsonB))
}
