//! A lease's packed keys (packed_keys.rs) for queen's own SQL, in schema `queen`: the ack of a
//! whole lease, retention and the rebase read them. They run no SQL, so they need no fixed
//! `search_path` (as cluster.rs's).

#[pgrx::pg_schema]
mod queen {
    use pgrx::prelude::*;

    /// The keys of a packed batch, in delivery order.
    #[pg_extern(immutable, strict, parallel_safe)]
    fn batch_keys(packed: &[u8]) -> TableIterator<'static, (name!(txid, i64), name!(seq, i64))> {
        use crate::error::{OrReport, QueenError};
        let keys = crate::packed_keys::unpack(packed)
            .map_err(|_| {
                QueenError::invalid(
                    "argument \"packed\"",
                    format!("{} bytes that are not a packed batch", packed.len()),
                )
            })
            .or_report("queen.batch_keys");
        TableIterator::new(keys)
    }

    /// A batch packed from its transaction ids and sequence numbers, paired in order (the
    /// update from 0.3.0 packs the batches of leases it finds open).
    #[pg_extern(immutable, strict, parallel_safe)]
    fn pack_keys(txids: Vec<Option<i64>>, seqs: Vec<Option<i64>>) -> Vec<u8> {
        use crate::error::{OrReport, QueenError};
        let keys: Option<Vec<crate::cursor::Key>> = match txids.len() == seqs.len() {
            true => txids.into_iter().zip(seqs).map(|(t, s)| Some((t?, s?))).collect(),
            false => None,
        };
        let keys = keys
            .ok_or_else(|| QueenError::invalid("arguments \"txids\" and \"seqs\"", "must pair up, without NULLs"))
            .or_report("queen.pack_keys");
        crate::packed_keys::pack(&keys)
    }
}
