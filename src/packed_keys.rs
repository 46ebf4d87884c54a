//! How a lease's batch of keys is stored in its cursor row (`queen.cursors.lease_keys`): packed
//! into a few bytes per key instead of two `bigint[]` of eight bytes an entry.
//!
//! A pop writes its batch into the row it leases, and that row is written to the WAL whole: as
//! two arrays, a batch of 100 made the row 1.8 kB and the lease's update 1.7 kB of WAL, half of
//! what a pop and its ack wrote (docs/benchmarks.md, 2026-12-04). Keys in a batch come in
//! delivery order, mostly ascending, with the transaction id repeating within a pushed
//! transaction or rising by a little from one to the next, so each is stored as the change from
//! the key before it: about two or three bytes a key.
//!
//! The format: a version byte ([`VERSION`]), then per key two signed varints (zigzag, LEB128):
//! the change of the transaction id from the key before (the first from 0); then the sequence
//! number, as the change from the key before when the transaction id did not change, else as
//! it is. Arithmetic wraps, so every pair of `i64` packs and unpacks to itself.

use crate::cursor::Key;
use integer_encoding::VarInt;

/// The format's first byte; another value is a format this build does not know.
pub const VERSION: u8 = 1;

/// Bytes that are not a packed batch (only a caller of `queen.batch_keys` can hand such).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// Pack `keys` in their order.
pub fn pack(keys: &[Key]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + keys.len() * 3);
    out.push(VERSION);
    let mut buf = [0u8; 10];
    let mut prev: Key = (0, 0);
    for &(txid, seq) in keys {
        let dt = txid.wrapping_sub(prev.0);
        let s = if dt == 0 { seq.wrapping_sub(prev.1) } else { seq };
        for v in [dt, s] {
            let n = v.encode_var(&mut buf);
            out.extend_from_slice(&buf[..n]);
        }
        prev = (txid, seq);
    }
    out
}

/// The keys `bytes` packs, in their order.
pub fn unpack(bytes: &[u8]) -> Result<Vec<Key>, Malformed> {
    let (&version, mut rest) = bytes.split_first().ok_or(Malformed)?;
    if version != VERSION {
        return Err(Malformed);
    }
    let mut keys = Vec::with_capacity(rest.len() / 2);
    let mut prev: Key = (0, 0);
    let next = |rest: &mut &[u8]| -> Result<i64, Malformed> {
        let (v, n) = i64::decode_var(rest).ok_or(Malformed)?;
        *rest = &rest[n..];
        Ok(v)
    };
    while !rest.is_empty() {
        let dt = next(&mut rest)?;
        let s = next(&mut rest)?;
        let txid = prev.0.wrapping_add(dt);
        let seq = if dt == 0 { prev.1.wrapping_add(s) } else { s };
        prev = (txid, seq);
        keys.push(prev);
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_batch_unpacks_to_itself() {
        let cases: &[&[Key]] = &[
            &[],
            &[(0, 0)],
            &[(1, 0)],
            &[(0, 5), (0, 6), (0, 4)],
            &[(730, 12), (730, 1012), (730, 2012)],
            &[(1000, 0), (1001, 0), (1003, 0), (1002, 7)],
            &[(i64::MAX, i64::MIN), (i64::MIN, i64::MAX), (-1, -1), (0, 0), (i64::MAX, 0)],
            &[(5, 1), (5, 1), (5, 1)],
        ];
        for keys in cases {
            assert_eq!(unpack(&pack(keys)).as_deref(), Ok(*keys), "{keys:?}");
        }
    }

    #[test]
    fn a_batch_takes_a_few_bytes_a_key() {
        // 100 keys of one pushed transaction, 1 000 apart (a batch push over 1 000 partitions).
        let one_txn: Vec<Key> = (0..100).map(|i| (7_000_000, 12 + 1000 * i)).collect();
        assert_eq!(pack(&one_txn).len(), 1 + 4 + 1 + 99 * (1 + 2));
        // 100 single pushes in a row.
        let singles: Vec<Key> = (0..100).map(|i| (7_000_000 + 2 * i, 0)).collect();
        assert_eq!(pack(&singles).len(), 1 + 4 + 1 + 99 * 2);
        // Against 2 × 8 bytes a key as two bigint[].
        assert!(pack(&one_txn).len() * 5 < 100 * 16);
    }

    #[test]
    fn bytes_that_are_not_a_batch_are_refused() {
        let mut truncated = pack(&[(1 << 40, 3)]);
        truncated.pop();
        let cases: &[(&str, &[u8])] = &[
            ("empty", &[]),
            ("another version", &[2, 0, 0]),
            ("a key without its sequence", &[VERSION, 2]),
            ("a varint cut short", &[VERSION, 0x80]),
            (
                "a varint longer than ten bytes",
                &[VERSION, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
            ("truncated", &truncated),
        ];
        for (name, bytes) in cases {
            assert_eq!(unpack(bytes), Err(Malformed), "{name}");
        }
        assert_eq!(unpack(&[VERSION]), Ok(vec![]));
    }
}
