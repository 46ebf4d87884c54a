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
//! The format: a version byte ([`VERSION`]), then the keys as steps from the key before (the
//! first from (0, 0)), each step two signed varints (zigzag, LEB128): the change of the
//! transaction id, then the change of the sequence number. A step that repeats — keys of one
//! pushed transaction a fixed distance apart, single pushes of one producer in a row — is
//! stored once with its count: the pair (0, 0), which no step between two keys of a batch
//! is, then the count and the step, three varints in all. Arithmetic wraps, so every pair of
//! `i64` packs and unpacks to itself.
//!
//! Version 1 stored the sequence number as it is after a change of transaction, and had no
//! repeats; its rows (leases open across an upgrade) still unpack.

use crate::cursor::Key;
use integer_encoding::VarInt;

/// The format's first byte; another value (but [`VERSION_1`]) is a format this build does not
/// know.
pub const VERSION: u8 = 2;
/// The format before repeats (0.4.0): still read.
pub const VERSION_1: u8 = 1;
/// The most keys one packed batch unpacks to: a count larger than this is not a batch a pop
/// wrote (a lease holds at most `pop::MAX_BATCH` keys a row), and unpacking it would take
/// memory the bytes do not account for.
pub const MAX_KEYS: usize = 1 << 20;
/// The fewest keys in a row with the same step that are stored as a repeat (two steps take
/// no more bytes as they are).
const MIN_REPEAT: usize = 3;

/// Bytes that are not a packed batch (only a caller of `queen.batch_keys` can hand such).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// The step from `from` to `to`.
fn step(from: Key, to: Key) -> Key {
    (to.0.wrapping_sub(from.0), to.1.wrapping_sub(from.1))
}

/// Pack `keys` in their order.
pub fn pack(keys: &[Key]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + keys.len() * 3);
    out.push(VERSION);
    let mut buf = [0u8; 10];
    let mut put = |out: &mut Vec<u8>, v: i64| {
        let n = v.encode_var(&mut buf);
        out.extend_from_slice(&buf[..n]);
    };
    let mut prev: Key = (0, 0);
    let mut i = 0;
    while i < keys.len() {
        let d = step(prev, keys[i]);
        let mut n = 1;
        while i + n < keys.len() && step(keys[i + n - 1], keys[i + n]) == d {
            n += 1;
        }
        if n >= MIN_REPEAT || d == (0, 0) {
            // A repeat (a step of (0, 0), a key twice, is stored only so).
            for v in [0, 0, n as i64, d.0, d.1] {
                put(&mut out, v);
            }
            i += n;
        } else {
            put(&mut out, d.0);
            put(&mut out, d.1);
            i += 1;
        }
        prev = keys[i - 1];
    }
    out
}

/// The keys `bytes` packs, in their order.
pub fn unpack(bytes: &[u8]) -> Result<Vec<Key>, Malformed> {
    let (&version, mut rest) = bytes.split_first().ok_or(Malformed)?;
    if version != VERSION && version != VERSION_1 {
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
        if version == VERSION_1 {
            let txid = prev.0.wrapping_add(dt);
            let seq = if dt == 0 { prev.1.wrapping_add(s) } else { s };
            prev = (txid, seq);
            keys.push(prev);
            continue;
        }
        let (n, d) = match (dt, s) {
            (0, 0) => {
                let n = usize::try_from(next(&mut rest)?).map_err(|_| Malformed)?;
                (n, (next(&mut rest)?, next(&mut rest)?))
            }
            d => (1, d),
        };
        if n == 0 || keys.len() + n > MAX_KEYS {
            return Err(Malformed);
        }
        for _ in 0..n {
            prev = (prev.0.wrapping_add(d.0), prev.1.wrapping_add(d.1));
            keys.push(prev);
        }
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
            &[(9, 0), (9, 1), (9, 2), (9, 3), (12, 4), (15, 5), (18, 6), (18, 6), (18, 7)],
            &[(-3, 2), (-6, 4), (-9, 6), (-12, 8), (i64::MIN, 0), (i64::MAX, -1), (-2, -2)],
        ];
        for keys in cases {
            assert_eq!(unpack(&pack(keys)).as_deref(), Ok(*keys), "{keys:?}");
        }
    }

    #[test]
    fn a_batch_takes_a_few_bytes_a_key() {
        // 100 keys of one pushed transaction, 1 000 apart (a batch push over 1 000 partitions):
        // the first key, then one repeat.
        let one_txn: Vec<Key> = (0..100).map(|i| (7_000_000, 12 + 1000 * i)).collect();
        assert_eq!(pack(&one_txn).len(), 1 + (4 + 1) + (1 + 1 + 2 + 1 + 2));
        // 100 single pushes in a row, of one producer.
        let singles: Vec<Key> = (0..100).map(|i| (7_000_000 + 2 * i, 40 + i)).collect();
        assert_eq!(pack(&singles).len(), 1 + (4 + 1) + (1 + 1 + 2 + 1 + 1));
        // Pushes of several producers, interleaved: no step repeats, two bytes or so a key.
        let mixed: Vec<Key> = (0..100).map(|i| (7_000_000 + 3 * i + i % 2, 40 + 5 * i + i % 3)).collect();
        assert!(pack(&mixed).len() <= 1 + 6 + 99 * 2, "{}", pack(&mixed).len());
        // Against 2 × 8 bytes a key as two bigint[].
        assert!(pack(&mixed).len() * 5 < 100 * 16);
    }

    #[test]
    fn repeats_are_stored_from_three_keys_on_and_a_key_twice_always() {
        // (keys, bytes after the version byte)
        let cases: &[(&[Key], usize)] = &[
            // Two steps alike: as they are.
            (&[(5, 9), (6, 10), (7, 11)], 6),
            // Three alike: the first step, then a repeat of three varints and the step.
            (&[(5, 9), (6, 10), (7, 11), (8, 12)], 2 + 5),
            // A key twice: a repeat of a (0, 0) step, whatever the count.
            (&[(5, 9), (5, 9)], 2 + 5),
        ];
        for (keys, len) in cases {
            let packed = pack(keys);
            assert_eq!(packed.len() - 1, *len, "{keys:?}");
            assert_eq!(unpack(&packed).as_deref(), Ok(*keys), "{keys:?}");
        }
    }

    #[test]
    fn batches_of_the_version_before_still_unpack() {
        // Packed by 0.4.0: (730, 12), (730, 1012), (731, 5), as version 1 stored them.
        let v1 = [VERSION_1, 0xb4, 0x0b, 0x18, 0x00, 0xd0, 0x0f, 0x02, 0x0a];
        assert_eq!(unpack(&v1), Ok(vec![(730, 12), (730, 1012), (731, 5)]));
    }

    #[test]
    fn bytes_that_are_not_a_batch_are_refused() {
        let mut truncated = pack(&[(1 << 40, 3)]);
        truncated.pop();
        let cases: &[(&str, &[u8])] = &[
            ("empty", &[]),
            ("another version", &[3, 0, 0]),
            ("a repeat of no keys", &[VERSION, 0, 0, 0, 2, 2]),
            ("a repeat of a negative count", &[VERSION, 0, 0, 1, 2, 2]),
            ("a repeat of more keys than a batch holds", &[VERSION, 0, 0, 0xfe, 0xff, 0xff, 0x0f, 2, 2]),
            ("a repeat without its step", &[VERSION, 0, 0, 6]),
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
