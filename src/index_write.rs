//! Writing rows of queen's tables without a statement: an insert, an update of a row this
//! transaction holds, a lock that skips rows others hold, and a delete of a row locked so —
//! each with PostgreSQL's own executor helpers for writes made outside a plan (those logical
//! replication applies rows with): constraints checked, every index maintained, the write
//! logged and counted as a statement's is.
//!
//! For writes whose statement costs more to start than to run (issue 23, direct_save.rs). One
//! server only, as index_read.rs. A table with row triggers (queen makes none: a superuser's)
//! is not written here: the caller writes it with SQL.

use pgrx::pg_sys;

/// A table opened for writing (RowExclusiveLock, kept to the transaction's end, as a
/// statement's), with the executor state its writes need: the result relation, its indexes
/// open, a slot for new rows.
pub struct Writer {
    rel: pg_sys::Relation,
    estate: *mut pg_sys::EState,
    rri: *mut pg_sys::ResultRelInfo,
    /// A virtual slot of the table's row type, for the rows written.
    new: *mut pg_sys::TupleTableSlot,
    /// A slot of the table's own kind, for the row a lock returns.
    locked: *mut pg_sys::TupleTableSlot,
    /// Whether the indexes are open: at the first write (a lock needs none).
    indexes: bool,
}

/// What locking a row that others may hold did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Locked, in the version that was asked for.
    Current,
    /// Locked in a newer version (committed since the snapshot): a statement re-checks its
    /// conditions on that version, and a row it then reaches by the old version's snapshot is
    /// not there.
    Newer,
    /// Held by another transaction, gone, or changed by this one: skipped.
    Skipped,
}

impl Writer {
    /// Open `relid` for writes under `snapshot`; None when it no longer exists, is not a table,
    /// or has row triggers.
    pub fn open(relid: pg_sys::Oid, snapshot: pg_sys::Snapshot) -> Option<Writer> {
        // SAFETY: inside a transaction. try_relation_open takes no lock and returns null for a
        // relation that does not exist; an open relation's pg_class row and trigger
        // descriptor are read. The executor state is made as the apply worker of logical
        // replication makes one for a table (a range table of that one table, a result
        // relation at index 1, its indexes opened); every node is palloc0'd with its tag set.
        // The slots belong to the state's tuple table, freed with it.
        unsafe {
            let rel = pg_sys::try_relation_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
            if rel.is_null() {
                return None;
            }
            if (*(*rel).rd_rel).relkind as u8 != pg_sys::RELKIND_RELATION || has_row_triggers(rel) {
                pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                return None;
            }
            let estate = pg_sys::CreateExecutorState();
            let old = pg_sys::MemoryContextSwitchTo((*estate).es_query_cxt);
            let rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>()) as *mut pg_sys::RangeTblEntry;
            (*rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
            (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
            (*rte).relid = relid;
            (*rte).relkind = pg_sys::RELKIND_RELATION as std::os::raw::c_char;
            (*rte).rellockmode = pg_sys::RowExclusiveLock as i32;
            pg_sys::ExecInitRangeTable(estate, pg_sys::lappend(std::ptr::null_mut(), rte.cast()));
            let rri = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()) as *mut pg_sys::ResultRelInfo;
            (*rri).type_ = pg_sys::NodeTag::T_ResultRelInfo;
            pg_sys::InitResultRelInfo(rri, rel, 1, std::ptr::null_mut(), 0);
            (*estate).es_opened_result_relations = pg_sys::lappend((*estate).es_opened_result_relations, rri.cast());
            (*estate).es_output_cid = pg_sys::GetCurrentCommandId(true);
            (*estate).es_snapshot = snapshot;
            let new = pg_sys::ExecInitExtraTupleSlot(estate, (*rel).rd_att, &pg_sys::TTSOpsVirtual);
            let locked = pg_sys::table_slot_create(rel, &mut (*estate).es_tupleTable);
            pg_sys::MemoryContextSwitchTo(old);
            Some(Writer { rel, estate, rri, new, locked, indexes: false })
        }
    }

    /// The writer, if the table as opened is of the shape a caller writes: `columns` (their
    /// attribute numbers and types) are all of its columns. None otherwise (an upgrade added
    /// a column under the same oid, say, since the caller found the attribute numbers): the
    /// caller writes with its statement, before anything is written by hand.
    pub fn of_shape(self, columns: &[(i16, pg_sys::Oid)]) -> Option<Writer> {
        let fits = self.natts() == columns.len()
            && columns.iter().all(|&(a, ty)| a >= 1 && a as usize <= self.natts() && self.type_of(a) == ty);
        fits.then_some(self)
    }

    /// The number of the table's columns (attribute numbers run 1..=natts).
    pub fn natts(&self) -> usize {
        // SAFETY: an open relation's tuple descriptor.
        unsafe { (*(*self.rel).rd_att).natts as usize }
    }

    /// The type of column `attnum`.
    pub fn type_of(&self, attnum: i16) -> pg_sys::Oid {
        // SAFETY: an open relation's tuple descriptor; callers pass 1 <= attnum <= natts.
        unsafe { (*(*self.rel).rd_att).attrs.as_slice(self.natts())[attnum as usize - 1].atttypid }
    }

    /// Put `values` (one per column, None for NULL) in the slot for new rows.
    ///
    /// # Safety
    ///
    /// Each value must be a datum of its column's type, valid until the write that uses it.
    unsafe fn fill(&mut self, values: &[Option<pg_sys::Datum>]) {
        // SAFETY: a virtual slot of the table's row type, cleared, then natts values and
        // null flags set (values.len() == natts, checked) and stored.
        unsafe {
            assert_eq!(values.len(), self.natts(), "queen: a row of the table's width");
            if !self.indexes {
                pg_sys::ExecOpenIndices(self.rri, false);
                self.indexes = true;
            }
            pg_sys::ExecClearTuple(self.new);
            for (i, v) in values.iter().enumerate() {
                *(*self.new).tts_values.add(i) = v.unwrap_or(pg_sys::Datum::from(0));
                *(*self.new).tts_isnull.add(i) = v.is_none();
            }
            pg_sys::ExecStoreVirtualTuple(self.new);
        }
    }

    /// Insert a row (`values` as `fill` takes them).
    ///
    /// # Safety
    ///
    /// As `fill`.
    pub unsafe fn insert(&mut self, values: &[Option<pg_sys::Datum>]) {
        // SAFETY: the slot filled; the result relation has no row triggers (open), so the
        // helper checks the constraints, inserts the row and its index entries.
        unsafe {
            self.fill(values);
            pg_sys::ExecSimpleRelationInsert(self.rri, self.estate, self.new);
            reset_per_tuple(self.estate);
        }
    }

    /// Replace the row in `old` (a slot holding a row of this table, which this transaction
    /// holds locked: no other can change it) by `values`.
    ///
    /// # Safety
    ///
    /// As `fill`; `old` must hold a row version of this table that this transaction holds.
    pub unsafe fn update(&mut self, old: *mut pg_sys::TupleTableSlot, values: &[Option<pg_sys::Datum>]) {
        // SAFETY: as `insert`; the helper updates the row at old's tid (waiting for nothing:
        // this transaction holds it) and adds index entries unless the update was HOT. No
        // trigger needs the EPQ state it takes.
        unsafe {
            self.fill(values);
            pg_sys::ExecSimpleRelationUpdate(self.rri, self.estate, std::ptr::null_mut(), old, self.new);
            reset_per_tuple(self.estate);
        }
    }

    /// Lock the row version at `tid` (visible to the state's snapshot) as `FOR UPDATE SKIP
    /// LOCKED` in a statement does: never waiting; in READ COMMITTED a version committed since
    /// is locked instead (`Lock::Newer`), in REPEATABLE READ and SERIALIZABLE a row changed
    /// since is a serialization failure, as LockRows raises.
    pub fn lock_skip(&mut self, tid: pg_sys::ItemPointerData) -> Lock {
        self.lock(tid, pg_sys::LockWaitPolicy::LockWaitSkip)
    }

    /// Lock the row version at `tid` as `FOR UPDATE` in a statement does: waiting for a
    /// transaction that holds it, then as `lock_skip` (a newer version locked in READ COMMITTED,
    /// which the caller re-checks, as the statement re-checks its conditions on it).
    pub fn lock_wait(&mut self, tid: pg_sys::ItemPointerData) -> Lock {
        self.lock(tid, pg_sys::LockWaitPolicy::LockWaitBlock)
    }

    fn lock(&mut self, tid: pg_sys::ItemPointerData, wait: pg_sys::LockWaitPolicy::Type) -> Lock {
        let mut tid = tid;
        let mut tmfd = pg_sys::TM_FailureData::default();
        // SAFETY: reads the transaction's isolation level.
        let xact_snapshot = unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32;
        // The flags ExecLockRows sets, by isolation level.
        let mut flags = pg_sys::TUPLE_LOCK_FLAG_LOCK_UPDATE_IN_PROGRESS as u8;
        if !xact_snapshot {
            flags |= pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION as u8;
        }
        // SAFETY: an open table and a slot of its kind; the snapshot registered by the caller
        // for the state's life. table_tuple_lock is the access method's row lock, as
        // ExecLockRows calls it.
        let result = unsafe {
            pg_sys::table_tuple_lock(
                self.rel,
                &mut tid,
                (*self.estate).es_snapshot,
                self.locked,
                (*self.estate).es_output_cid,
                pg_sys::LockTupleMode::LockTupleExclusive,
                wait,
                flags,
                &mut tmfd,
            )
        };
        // As ExecLockRows answers each result.
        match result {
            pg_sys::TM_Result::TM_Ok if tmfd.traversed => Lock::Newer,
            pg_sys::TM_Result::TM_Ok => Lock::Current,
            pg_sys::TM_Result::TM_WouldBlock | pg_sys::TM_Result::TM_SelfModified => Lock::Skipped,
            pg_sys::TM_Result::TM_Deleted if !xact_snapshot => Lock::Skipped,
            pg_sys::TM_Result::TM_Deleted | pg_sys::TM_Result::TM_Updated if xact_snapshot => serialization_failure(),
            other => panic!("queen: unexpected result {other} locking a row"),
        }
    }

    /// The row the last lock locked, in the version it locked.
    pub fn locked(&self) -> crate::index_read::Tuple<'_> {
        // SAFETY: the slot of the writer's table that table_tuple_lock filled, valid until the
        // next lock.
        unsafe { crate::index_read::Tuple::in_slot(self.locked) }
    }

    /// Delete the row version at `tid` (visible to the state's snapshot) unless another
    /// transaction holds it, as a DELETE of the rows `FOR UPDATE SKIP LOCKED` returned does,
    /// without a lock of its own first (a WAL record less a row). True when deleted.
    /// - held by another: skipped, never waited for (`heap_delete` without waiting);
    /// - locked by this transaction already, or held in a way only a lock can tell: locked as
    ///   `lock_skip` locks it, and deleted when that gives the version asked for;
    /// - changed or deleted by a transaction committed since the snapshot: skipped in READ
    ///   COMMITTED (the statement's lock followed it, and its DELETE, reaching rows by the
    ///   snapshot, did not find the new version), a serialization failure otherwise.
    pub fn delete_skip(&mut self, tid: pg_sys::ItemPointerData) -> bool {
        let mut at = tid;
        let mut tmfd = pg_sys::TM_FailureData::default();
        // SAFETY: an open table; the snapshot registered by the caller for the state's life.
        // As ExecSimpleRelationDelete: the replica identity checked (a publication of deletes
        // needs one), then the access method's delete, here not waiting.
        let result = unsafe {
            pg_sys::CheckCmdReplicaIdentity(self.rel, pg_sys::CmdType::CMD_DELETE);
            pg_sys::table_tuple_delete(
                self.rel,
                &mut at,
                (*self.estate).es_output_cid,
                (*self.estate).es_snapshot,
                std::ptr::null_mut(),
                false,
                &mut tmfd,
                false,
            )
        };
        // SAFETY: reads the transaction's isolation level.
        let xact_snapshot = unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32;
        match result {
            pg_sys::TM_Result::TM_Ok => true,
            pg_sys::TM_Result::TM_BeingModified => {
                let locked = self.lock_skip(tid) == Lock::Current;
                if locked {
                    self.delete_locked();
                }
                locked
            }
            pg_sys::TM_Result::TM_SelfModified => false,
            pg_sys::TM_Result::TM_Deleted | pg_sys::TM_Result::TM_Updated if !xact_snapshot => false,
            pg_sys::TM_Result::TM_Deleted | pg_sys::TM_Result::TM_Updated => serialization_failure(),
            other => panic!("queen: unexpected result {other} deleting a row"),
        }
    }

    /// Delete the row `lock_skip` just locked in its current version.
    pub fn delete_locked(&mut self) {
        // SAFETY: `locked` holds the row version lock_skip locked (its tid set); this
        // transaction holds it, so the delete waits for nothing. No trigger needs the EPQ
        // state.
        unsafe { pg_sys::ExecSimpleRelationDelete(self.rri, self.estate, std::ptr::null_mut(), self.locked) }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // An error is unwinding: the transaction's abort releases the relation, the
            // indexes, the buffers and the memory.
            return;
        }
        // SAFETY: made by `open`, dropped once: the indexes closed, the slots released, the
        // state freed, the table closed (its lock kept to the transaction's end).
        unsafe {
            if self.indexes {
                pg_sys::ExecCloseIndices(self.rri);
            }
            pg_sys::ExecResetTupleTable((*self.estate).es_tupleTable, false);
            pg_sys::FreeExecutorState(self.estate);
            pg_sys::relation_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }
}

/// The error a statement raises where a row it would lock or change was changed by a
/// transaction its snapshot does not see, in REPEATABLE READ and SERIALIZABLE.
fn serialization_failure() -> ! {
    pgrx::ereport!(
        pgrx::PgLogLevel::ERROR,
        pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        "could not serialize access due to concurrent update"
    );
    unreachable!("queen: an ERROR returns no further")
}

/// Free what evaluating the last row's expressions (constraints, index predicates) allocated,
/// as ResetPerTupleExprContext does.
///
/// # Safety
///
/// `estate` must be a live executor state.
unsafe fn reset_per_tuple(estate: *mut pg_sys::EState) {
    // SAFETY: the state's per-tuple expression context, made on first use (null before).
    unsafe {
        let econtext = (*estate).es_per_tuple_exprcontext;
        if !econtext.is_null() {
            pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
        }
    }
}

/// Whether `rel` has a trigger that fires for each row (a foreign key's among them).
///
/// # Safety
///
/// `rel` must be an open relation.
unsafe fn has_row_triggers(rel: pg_sys::Relation) -> bool {
    // SAFETY: an open relation's trigger descriptor, null when it has no triggers.
    unsafe {
        let t = (*rel).trigdesc;
        if t.is_null() {
            return false;
        }
        let t = &*t;
        t.trig_insert_before_row
            || t.trig_insert_after_row
            || t.trig_insert_instead_row
            || t.trig_update_before_row
            || t.trig_update_after_row
            || t.trig_update_instead_row
            || t.trig_delete_before_row
            || t.trig_delete_after_row
            || t.trig_delete_instead_row
            || t.trig_insert_new_table
            || t.trig_update_old_table
            || t.trig_update_new_table
            || t.trig_delete_old_table
    }
}
