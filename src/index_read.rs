//! Reading queen's tables straight through their indexes, without SQL: a table and one of its
//! indexes opened, an index scan with equality and lower-bound keys, and a row's columns.
//!
//! For reads whose SQL costs more to start than to run: a statement is planned once, but each
//! run builds its executor state again, and copies its rows into SPI's table before queen reads
//! them (issue 23; direct.rs). One server only: on Citus the tables are distributed, their rows
//! live in shards elsewhere, and callers read them with SQL.
//!
//! Everything here reads with the snapshot it is given, under the same locks a statement takes
//! (AccessShareLock on the table and the index, held to the end of the transaction).

use pgrx::pg_sys;
use pgrx::FromDatum;
use std::ffi::CStr;

/// An open relation of a given kind, closed when dropped (its lock kept to the transaction's
/// end, as a statement's is).
struct Rel(pg_sys::Relation);

impl Rel {
    /// Open `relid` (AccessShareLock); None when it no longer exists (dropped since its oid was
    /// looked up: the caller reads with SQL then) or is not of `kind` (pg_class.relkind).
    fn open(relid: pg_sys::Oid, kind: u8) -> Option<Rel> {
        // SAFETY: inside a transaction (queen's functions run in one); try_relation_open
        // returns null, after taking no lock, for a relation that does not exist.
        let rel = unsafe { pg_sys::try_relation_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
        let opened = (!rel.is_null()).then_some(Rel(rel))?;
        // SAFETY: an open relation's pg_class row.
        (unsafe { (*(*rel).rd_rel).relkind } as u8 == kind).then_some(opened)
    }
}

impl Drop for Rel {
    fn drop(&mut self) {
        // SAFETY: opened by `open`; the lock stays until the transaction ends.
        unsafe { pg_sys::relation_close(self.0, pg_sys::NoLock as pg_sys::LOCKMODE) }
    }
}

/// A table of the `queen` schema, opened.
pub struct Table {
    rel: Rel,
}

impl Table {
    /// Open `relid`: None when it no longer exists or is not a table.
    pub fn open(relid: pg_sys::Oid) -> Option<Table> {
        Some(Table { rel: Rel::open(relid, pg_sys::RELKIND_RELATION)? })
    }

    /// The number of its columns (dropped ones included: attribute numbers run 1..=natts).
    pub fn natts(&self) -> usize {
        // SAFETY: an open relation's tuple descriptor.
        unsafe { (*(*self.rel.0).rd_att).natts as usize }
    }

    /// The attribute number of column `name`; None when the table has no such column.
    pub fn attnum(&self, name: &str) -> Option<i16> {
        // SAFETY: an open relation's tuple descriptor, natts attributes long.
        unsafe {
            let desc = (*self.rel.0).rd_att;
            (*desc)
                .attrs
                .as_slice((*desc).natts as usize)
                .iter()
                .position(|a| !a.attisdropped && CStr::from_ptr(a.attname.data.as_ptr()).to_bytes() == name.as_bytes())
                .map(|i| i as i16 + 1)
        }
    }
}

/// An index of a [`Table`], opened.
pub struct Index {
    rel: Rel,
}

impl Index {
    /// Open `indexid`: None when it no longer exists or is not an index.
    pub fn open(indexid: pg_sys::Oid) -> Option<Index> {
        Some(Index { rel: Rel::open(indexid, pg_sys::RELKIND_INDEX)? })
    }

    /// The table attribute numbers of the index's key columns, in order.
    pub fn columns(&self) -> Vec<i16> {
        // SAFETY: an open index's pg_index row, indnkeyatts keys long.
        unsafe {
            let ix = (*self.rel.0).rd_index;
            (*ix).indkey.values.as_slice((*ix).indnkeyatts as usize).to_vec()
        }
    }

    /// The table attribute numbers of the index's INCLUDE columns, in order.
    pub fn included(&self) -> Vec<i16> {
        // SAFETY: an open index's pg_index row, indnatts columns long, the keys first.
        unsafe {
            let ix = (*self.rel.0).rd_index;
            let all = (*ix).indkey.values.as_slice((*ix).indnatts as usize);
            all[(*ix).indnkeyatts as usize..].to_vec()
        }
    }

    /// Whether key column `i` (0-based) is ordered DESC.
    pub fn descending(&self, i: usize) -> bool {
        // SAFETY: an open index's per-column options, one per key column; callers pass i < keys.
        unsafe { *(*self.rel.0).rd_indoption.add(i) as u32 & pg_sys::INDOPTION_DESC != 0 }
    }

    /// The collation of key column `i` (0-based): what a scan key comparing it must use.
    pub fn collation(&self, i: usize) -> pg_sys::Oid {
        // SAFETY: an open index's collations, one per key column; callers pass i < keys.
        unsafe { *(*self.rel.0).rd_indcollation.add(i) }
    }
}

/// A scan key: index column (1-based), strategy, comparison function, collation and value.
pub struct Key {
    pub column: i16,
    pub strategy: u16,
    pub procedure: pg_sys::RegProcedure,
    pub collation: pg_sys::Oid,
    pub value: pg_sys::Datum,
}

impl Key {
    /// `column = value`, compared by `procedure` (the type's equality function).
    pub fn eq(column: i16, procedure: u32, value: pg_sys::Datum) -> Key {
        Key {
            column,
            strategy: pg_sys::BTEqualStrategyNumber as u16,
            procedure: procedure.into(),
            collation: pg_sys::InvalidOid,
            value,
        }
    }

    /// `column > value`.
    pub fn gt(column: i16, procedure: u32, value: pg_sys::Datum) -> Key {
        Key {
            column,
            strategy: pg_sys::BTGreaterStrategyNumber as u16,
            procedure: procedure.into(),
            collation: pg_sys::InvalidOid,
            value,
        }
    }

    /// `column >= value`.
    pub fn ge(column: i16, procedure: u32, value: pg_sys::Datum) -> Key {
        Key {
            column,
            strategy: pg_sys::BTGreaterEqualStrategyNumber as u16,
            procedure: procedure.into(),
            collation: pg_sys::InvalidOid,
            value,
        }
    }

    /// `column <= value`.
    pub fn le(column: i16, procedure: u32, value: pg_sys::Datum) -> Key {
        Key {
            column,
            strategy: pg_sys::BTLessEqualStrategyNumber as u16,
            procedure: procedure.into(),
            collation: pg_sys::InvalidOid,
            value,
        }
    }

    pub fn collated(self, collation: pg_sys::Oid) -> Key {
        Key { collation, ..self }
    }
}

/// An index scan in key order (or backwards), visible rows only as `snapshot` sees them.
pub struct Scan {
    scan: pg_sys::IndexScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
    direction: pg_sys::ScanDirection::Type,
    /// An index-only read's state ([`Scan::index_only`]).
    only: Option<IndexOnly>,
}

/// What an index-only read keeps between entries: the visibility map's page it last read
/// (pinned), and the entry's columns.
struct IndexOnly {
    vm: pg_sys::Buffer,
    /// The heap page of the entry before, and whether it was all visible then.
    last: Option<(pg_sys::BlockNumber, bool)>,
    values: Vec<pg_sys::Datum>,
    isnull: Vec<bool>,
}

/// An entry of an index-only read: the index's own columns when the heap page it points to is
/// all visible, else the heap row, fetched and checked as [`Scan::next`] does.
pub enum Entry<'a> {
    Index(Covered<'a>),
    Heap(Tuple<'a>),
}

/// The columns of an index entry whose row every snapshot sees.
pub struct Covered<'a> {
    values: &'a [pg_sys::Datum],
    isnull: &'a [bool],
}

impl Covered<'_> {
    /// Index column `i` (1-based, INCLUDE columns after the keys) as `T`; None for NULL.
    pub fn get<T: FromDatum>(&self, i: usize) -> Option<T> {
        // SAFETY: the values index_deform_tuple read out of the entry the scan returned, valid
        // until its next call; T is the Rust type of the column's type (callers' layouts check
        // the columns). FromDatum copies what it reads.
        unsafe { T::from_datum(self.values[i - 1], self.isnull[i - 1]) }
    }
}

impl Scan {
    /// Scan `index` of `table` for rows matching every key of `keys`. The datums of `keys`
    /// must outlive the scan.
    pub fn new(table: &Table, index: &Index, snapshot: pg_sys::Snapshot, keys: &[Key], backward: bool) -> Scan {
        let direction = if backward {
            pg_sys::ScanDirection::BackwardScanDirection
        } else {
            pg_sys::ScanDirection::ForwardScanDirection
        };
        Scan::begin(table, index, snapshot, keys, direction, None)
    }

    /// A forward scan read index-only where it can (as PostgreSQL's Index Only Scan reads):
    /// [`Scan::next_entry`] returns the index entry's columns when the visibility map says
    /// every row of the heap page it points to is visible to all, and fetches the heap row
    /// otherwise. Under SERIALIZABLE every row is fetched: the heap fetch takes the predicate
    /// lock an index-only read would take on the page (PredicateLockPage, which pgrx does not
    /// bind).
    pub fn index_only(table: &Table, index: &Index, snapshot: pg_sys::Snapshot, keys: &[Key]) -> Scan {
        // SAFETY: an open index's tuple descriptor.
        let n = unsafe { (*(*index.rel.0).rd_att).natts as usize };
        let only = IndexOnly {
            vm: pg_sys::InvalidBuffer as pg_sys::Buffer,
            last: None,
            values: vec![pg_sys::Datum::from(0); n],
            isnull: vec![true; n],
        };
        Scan::begin(table, index, snapshot, keys, pg_sys::ScanDirection::ForwardScanDirection, Some(only))
    }

    /// The scan `new` and `index_only` make: index-only when `only` is given.
    fn begin(
        table: &Table,
        index: &Index,
        snapshot: pg_sys::Snapshot,
        keys: &[Key],
        direction: pg_sys::ScanDirection::Type,
        only: Option<IndexOnly>,
    ) -> Scan {
        let mut data = scan_keys(keys);
        // SAFETY: index_beginscan/index_rescan take the open relations, a registered snapshot
        // and keys.len() keys, copied by index_rescan. For an index-only read xs_want_itup is
        // set before the first read (as ExecInitIndexOnlyScan sets it), so that the index
        // returns each entry's tuple in xs_itup, described by xs_itupdesc. The slot fits the
        // table's rows.
        unsafe {
            let scan = pg_sys::index_beginscan(table.rel.0, index.rel.0, snapshot, data.len() as i32, 0);
            (*scan).xs_want_itup = only.is_some();
            pg_sys::index_rescan(scan, data.as_mut_ptr(), data.len() as i32, std::ptr::null_mut(), 0);
            let slot = pg_sys::table_slot_create(table.rel.0, std::ptr::null_mut());
            Scan { scan, slot, direction, only }
        }
    }

    /// The next visible entry of an index-only read ([`Scan::index_only`]); None at the end.
    pub fn next_entry(&mut self) -> Option<Entry<'_>> {
        let only = self.only.as_mut().expect("queen: next_entry of a scan made by Scan::index_only");
        // SAFETY: a live scan made with xs_want_itup; each tid index_getnext_tid returns is
        // the entry in xs_itup. The visibility map's page stays pinned in only.vm between
        // calls (released on drop). As IndexOnlyNext: an entry whose heap page is not all
        // visible is checked on the heap (index_fetch_heap: false when no version is visible,
        // and the next entry is read); one whose page is, is visible to every snapshot.
        // Consecutive entries of one heap page take the map's answer for the first: as
        // IndexOnlyNext's own reading of the bit (without a lock), the answer can be stale
        // only in ways that do not matter to this scan's snapshot — a bit set since says
        // every row of the page was visible to all, this snapshot included, and a bit
        // cleared since by a writer that this snapshot does not see changes nothing it reads.
        unsafe {
            let serializable = pg_sys::XactIsoLevel == pg_sys::XACT_SERIALIZABLE as i32;
            loop {
                let tid = pg_sys::index_getnext_tid(self.scan, self.direction);
                if tid.is_null() {
                    return None;
                }
                let block = ((*tid).ip_blkid.bi_hi as u32) << 16 | (*tid).ip_blkid.bi_lo as u32;
                let all_visible = match only.last {
                    Some((b, v)) if b == block => v,
                    _ => {
                        let v = !serializable
                            && pg_sys::visibilitymap_get_status((*self.scan).heapRelation, block, &mut only.vm) as u32
                                & pg_sys::VISIBILITYMAP_ALL_VISIBLE
                                != 0;
                        only.last = Some((block, v));
                        v
                    }
                };
                if !all_visible {
                    if pg_sys::index_fetch_heap(self.scan, self.slot) {
                        return Some(Entry::Heap(Tuple { slot: self.slot, _scan: std::marker::PhantomData }));
                    }
                    continue;
                }
                pg_sys::index_deform_tuple(
                    (*self.scan).xs_itup,
                    (*self.scan).xs_itupdesc,
                    only.values.as_mut_ptr(),
                    only.isnull.as_mut_ptr(),
                );
                return Some(Entry::Index(Covered { values: &only.values, isnull: &only.isnull }));
            }
        }
    }

    /// The scan in `slot` started again with `keys`, or a new one there (forward) when it holds
    /// none: one scan for a probe repeated with other values.
    pub fn again<'s>(
        slot: &'s mut Option<Scan>,
        (table, index): (&Table, &Index),
        snapshot: pg_sys::Snapshot,
        keys: &[Key],
    ) -> &'s mut Scan {
        match slot {
            Some(scan) => {
                scan.rescan(keys);
                scan
            }
            None => slot.insert(Scan::new(table, index, snapshot, keys, false)),
        }
    }

    /// Start the scan again with `keys` (as many as it was made with, for the same columns):
    /// cheaper than a new scan for a probe repeated with other values.
    pub fn rescan(&mut self, keys: &[Key]) {
        let mut data = scan_keys(keys);
        // SAFETY: a live scan; index_rescan copies the keys (their datums must outlive the
        // scan's reads, as for `new`).
        unsafe {
            pg_sys::ExecClearTuple(self.slot);
            pg_sys::index_rescan(self.scan, data.as_mut_ptr(), data.len() as i32, std::ptr::null_mut(), 0);
        }
    }

    /// The next visible row; None at the end. The row stays readable until the next call.
    pub fn next(&mut self) -> Option<Tuple<'_>> {
        // SAFETY: a live scan and its slot.
        let found = unsafe { pg_sys::index_getnext_slot(self.scan, self.direction, self.slot) };
        found.then_some(Tuple { slot: self.slot, _scan: std::marker::PhantomData })
    }
}

/// `keys` as an index scan takes them.
fn scan_keys(keys: &[Key]) -> Vec<pg_sys::ScanKeyData> {
    keys.iter()
        .map(|k| {
            // SAFETY: ScanKeyEntryInitialize fills a zeroed ScanKeyData; the procedures are the
            // btree comparison functions of the columns' types (callers pass F_* constants).
            unsafe {
                let mut d: pg_sys::ScanKeyData = std::mem::zeroed();
                pg_sys::ScanKeyEntryInitialize(
                    &mut d,
                    0,
                    k.column,
                    k.strategy,
                    pg_sys::InvalidOid,
                    k.collation,
                    k.procedure,
                    k.value,
                );
                d
            }
        })
        .collect()
}

impl Drop for Scan {
    fn drop(&mut self) {
        // SAFETY: made by `new`, dropped once: the slot first (it may pin a buffer the scan
        // read), then the scan.
        unsafe {
            pg_sys::ExecDropSingleTupleTableSlot(self.slot);
            pg_sys::index_endscan(self.scan);
            if let Some(only) = &self.only {
                if only.vm != pg_sys::InvalidBuffer as pg_sys::Buffer {
                    pg_sys::ReleaseBuffer(only.vm);
                }
            }
        }
    }
}

/// A row a [`Scan`] returned.
pub struct Tuple<'a> {
    slot: *mut pg_sys::TupleTableSlot,
    _scan: std::marker::PhantomData<&'a mut Scan>,
}

impl Tuple<'_> {
    /// The row in `slot`, which a lock of index_write.rs filled.
    ///
    /// # Safety
    ///
    /// `slot` must hold a heap row, pinned for as long as the tuple is used.
    pub(crate) unsafe fn in_slot<'a>(slot: *mut pg_sys::TupleTableSlot) -> Tuple<'a> {
        Tuple { slot, _scan: std::marker::PhantomData }
    }

    /// Column `attnum` as `T`; None for NULL. `T` must be the Rust type of the column's type.
    pub fn get<T: FromDatum>(&self, attnum: i16) -> Option<T> {
        // SAFETY: the slot holds the row the scan returned (pinned until the next call);
        // attnum is a column of the table (1..=natts). As slot_getattr (an inline function of
        // PostgreSQL's): the row deformed up to attnum unless it is already, then the column's
        // value and null flag read from the slot's arrays — one call into PostgreSQL a row,
        // not one a column. FromDatum copies what it reads (a detoasted array, a string, a
        // uuid's bytes) out of the buffer.
        unsafe {
            debug_assert!(attnum > 0, "queen: a user column");
            if (*self.slot).tts_nvalid < attnum {
                pg_sys::slot_getsomeattrs_int(self.slot, attnum as i32);
            }
            let i = attnum as usize - 1;
            T::from_datum(*(*self.slot).tts_values.add(i), *(*self.slot).tts_isnull.add(i))
        }
    }

    /// Column `attnum`, a varlena, copied into the memory of the caller of the SPI connection
    /// (as `Row::transfer` does), as stored: a TOAST pointer stays one.
    pub fn transfer(&self, attnum: i16) -> Option<pg_sys::Datum> {
        let mut isnull = false;
        // SAFETY: as `get`; SPI_datumTransfer copies a varlena (typlen -1) into the upper
        // context, inside the SPI connection the callers hold.
        unsafe {
            let d = pg_sys::slot_getattr(self.slot, attnum as i32, &mut isnull);
            (!isnull).then(|| pg_sys::SPI_datumTransfer(d, false, -1))
        }
    }

    /// Where the row version is (its ctid).
    pub fn tid(&self) -> pg_sys::ItemPointerData {
        // SAFETY: the slot holds the row the scan returned, its tid set.
        unsafe { (*self.slot).tts_tid }
    }

    /// The slot holding the row (for a write of it: index_write.rs).
    pub fn slot(&self) -> *mut pg_sys::TupleTableSlot {
        self.slot
    }

    /// Every column, None for NULL, as datums valid until the next call of the scan (by
    /// reference ones point into the row).
    pub fn values(&self) -> Vec<Option<pg_sys::Datum>> {
        // SAFETY: the slot holds the row the scan returned (pinned until the next call);
        // slot_getallattrs deforms every column into its arrays, natts long.
        unsafe {
            pg_sys::slot_getallattrs(self.slot);
            let n = (*(*self.slot).tts_tupleDescriptor).natts as usize;
            (0..n).map(|i| (!*(*self.slot).tts_isnull.add(i)).then(|| *(*self.slot).tts_values.add(i))).collect()
        }
    }

    /// Whether this transaction holds the row version: its xmax is this transaction's (a lock
    /// taken by `FOR UPDATE`), not a multixact's, or it has none and this transaction wrote
    /// the row. No other transaction can change it then.
    pub fn held_here(&self) -> bool {
        // SAFETY: the slot holds a heap row read from a pinned buffer; materialize = false
        // returns that row without copying. Its header's xmax and flags are read: for a row
        // this transaction holds, no other backend changes them.
        unsafe {
            let mut should_free = false;
            let tuple = pg_sys::ExecFetchSlotHeapTuple(self.slot, false, &mut should_free);
            let header = (*tuple).t_data;
            let mask = (*header).t_infomask as u32;
            let xmax = (*header).t_choice.t_heap.t_xmax;
            let xmin = (*header).t_choice.t_heap.t_xmin;
            let held = if mask & pg_sys::HEAP_XMAX_INVALID != 0 {
                // No xmax: held when this transaction wrote it, which no other sees yet.
                mask & pg_sys::HEAP_XMIN_COMMITTED == 0 && pg_sys::TransactionIdIsCurrentTransactionId(xmin)
            } else {
                mask & pg_sys::HEAP_XMAX_IS_MULTI == 0 && pg_sys::TransactionIdIsCurrentTransactionId(xmax)
            };
            if should_free {
                pg_sys::heap_freetuple(tuple);
            }
            held
        }
    }

    /// Whether the caller's transaction or one of its subtransactions wrote the row version
    /// (`queen.written_here(xmin::text::bigint)`).
    pub fn written_here(&self) -> bool {
        let mut isnull = false;
        // SAFETY: a heap row's system column xmin (a TransactionId datum); only this backend's
        // transaction state is read.
        unsafe {
            let d = pg_sys::slot_getsysattr(self.slot, pg_sys::MinTransactionIdAttributeNumber, &mut isnull);
            pg_sys::TransactionIdIsCurrentTransactionId(pg_sys::TransactionId::from(d.value() as u32))
        }
    }

    /// The row version's xmin, as `xmin::text` reads it.
    pub fn xmin(&self) -> String {
        let mut isnull = false;
        // SAFETY: a heap row's system column xmin (a TransactionId datum).
        let d = unsafe { pg_sys::slot_getsysattr(self.slot, pg_sys::MinTransactionIdAttributeNumber, &mut isnull) };
        (d.value() as u32).to_string()
    }
}

/// A snapshot taken as a statement run through SPI takes its own (this transaction's changes
/// so far counted), registered until dropped.
pub struct Snapshot {
    pub snap: pg_sys::Snapshot,
}

impl Snapshot {
    pub fn take() -> Snapshot {
        // SAFETY: inside a transaction. As SPI before each statement: the command counter
        // advanced, so that what this transaction wrote so far is seen, then the transaction's
        // snapshot (a new one in READ COMMITTED), copied and registered with the current
        // resource owner until dropped.
        unsafe {
            pg_sys::CommandCounterIncrement();
            Snapshot { snap: pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot()) }
        }
    }

    /// xmin, xmax and the running transactions (sorted, each once) as 64-bit ids, as
    /// `pg_current_snapshot()` gives them.
    pub fn full_ids(&self) -> (i64, i64, Vec<i64>) {
        // SAFETY: a registered snapshot; ReadNextFullTransactionId reads shared memory.
        unsafe {
            let s = &*self.snap;
            let next = pg_sys::ReadNextFullTransactionId().value;
            let mut xip: Vec<i64> = (0..s.xcnt as usize).map(|i| widen((*s.xip.add(i)).into_inner(), next)).collect();
            xip.sort_unstable();
            xip.dedup();
            (widen(s.xmin.into_inner(), next), widen(s.xmax.into_inner(), next), xip)
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: registered by `take`, unregistered once.
        unsafe { pg_sys::UnregisterSnapshot(self.snap) }
    }
}

/// A 32-bit xid of a current snapshot as a 64-bit id, by the epoch of `next` (the next full
/// xid), as PostgreSQL's xid8 functions widen one: an xid above next's is of the epoch before.
/// Special xids (below 3) are of epoch 0.
pub fn widen(xid: u32, next: u64) -> i64 {
    if xid < pg_sys::TransactionId::FIRST_NORMAL.into_inner() {
        return xid as i64;
    }
    let (next_xid, mut epoch) = (next as u32, (next >> 32) as u32);
    if xid > next_xid {
        epoch = epoch.wrapping_sub(1);
    }
    (((epoch as u64) << 32) | xid as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::widen;

    #[test]
    fn xids_are_widened_by_the_next_xids_epoch() {
        let next = (5u64 << 32) | 1000;
        assert_eq!(widen(999, next), ((5i64) << 32) | 999, "below next: its epoch");
        assert_eq!(widen(1000, next), ((5i64) << 32) | 1000);
        assert_eq!(widen(4_000_000_000, next), ((4i64) << 32) | 4_000_000_000, "above next: the epoch before");
        assert_eq!(widen(2, next), 2, "frozen: epoch 0");
        assert_eq!(widen(500, 3000), 500, "epoch 0");
    }
}
