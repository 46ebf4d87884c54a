//! What a backend's discovery scans learnt about the partitions they met: which of their
//! messages a hint committed by another transaction accounts for (discovery.rs, schema.sql's
//! `queen.ready`), so that a later scan meeting the same partitions need not probe their hints
//! again.
//!
//! **Why it may be remembered.** A hint with `seen_xmin` S accounts for every message of its
//! partition in a transaction below S: whoever deletes or moves that hint sees those messages
//! committed, and leaves the partition either hinted again for them or finished with them
//! (its cursor row past them). So once a scan has seen such a hint committed, the messages
//! below S need no hint of the scan's, now or later, as long as the group's state is not set
//! back: a seek, a restore's rows, a group deleted and subscribed again. Those change the
//! cached state of cache.rs, whose generation a book is kept under: a book is read only while
//! the generation it was filled under holds (checked after the scan's snapshot is taken, so
//! that no such change is visible to the scan that reads it), and filled only from a scan
//! whose snapshot was taken under that generation. Messages in transactions at or above S are
//! probed as before: a partition emptied and written to again is met with newer transactions.
//!
//! In a backlog whose partitions come again and again in the log, a scan probed a hint for
//! each partition it met, at every scan (18% of a pop 100 + `queen_ack_lease` cycle: issue 23,
//! docs/benchmarks.md); with the book, a backend probes each partition once per generation.
//!
//! A book is of one (queue, group, subscription, shard); a backend keeps at most
//! [`MAX_PARTITIONS`] partitions over all its books, and starts again past it. The rule is
//! plain Rust ([`Books`]), table-tested without a server; the books are in the backend's memory.

use pgrx::Uuid;
use std::cell::RefCell;
use std::collections::HashMap;

/// The most partitions a backend keeps over all its books (about half a megabyte).
pub const MAX_PARTITIONS: usize = 16_384;

/// Which (queue, group, subscription, shard) a book is of.
pub type GroupKey = ([u8; 16], String, String, i32);

/// One group's book: for each partition, the highest `seen_xmin` of a hint of another
/// transaction seen committed there. Messages of transactions below it are accounted for.
#[derive(Debug, Default)]
pub struct Book {
    below: HashMap<Uuid, i64>,
}

impl Book {
    /// Whether a hint seen earlier accounts for the messages of `partition` up to transaction
    /// `newest`.
    pub fn accounts(&self, partition: &Uuid, newest: i64) -> bool {
        self.below.get(partition).is_some_and(|&s| s > newest)
    }

    /// A hint of another transaction, committed, with `seen_xmin` S, seen in `partition`.
    pub fn note(&mut self, partition: Uuid, seen_xmin: i64) {
        let s = self.below.entry(partition).or_insert(seen_xmin);
        *s = (*s).max(seen_xmin);
    }

    pub fn len(&self) -> usize {
        self.below.len()
    }
}

/// A backend's books, each filed under the ticket `T` it was filled under.
#[derive(Debug)]
pub struct Books<T> {
    books: HashMap<GroupKey, (T, Book)>,
}

impl<T: PartialEq + Copy> Books<T> {
    pub fn new() -> Books<T> {
        Books { books: HashMap::new() }
    }

    /// The book of `key` to read and fill under `ticket`, taken out (an empty one when the
    /// book there was filled under another ticket, or there is none).
    pub fn take(&mut self, key: &GroupKey, ticket: T) -> Book {
        match self.books.remove(key) {
            Some((t, book)) if t == ticket => book,
            _ => Book::default(),
        }
    }

    /// `book` filed back under `ticket`. Past [`MAX_PARTITIONS`] over all books, the others
    /// are dropped, and this one too if it alone is past it.
    pub fn put(&mut self, key: GroupKey, ticket: T, book: Book) {
        let others: usize = self.books.values().map(|(_, b)| b.len()).sum();
        if others + book.len() > MAX_PARTITIONS {
            self.books.clear();
        }
        if book.len() <= MAX_PARTITIONS {
            self.books.insert(key, (ticket, book));
        }
    }
}

thread_local! {
    static BOOKS: RefCell<Books<crate::cache::Ticket>> = RefCell::new(Books::new());
}

/// The book of `key` to read and fill under `ticket`, taken out of the backend's books.
pub fn take(key: &GroupKey, ticket: crate::cache::Ticket) -> Book {
    BOOKS.with(|b| b.borrow_mut().take(key, ticket))
}

/// `book` filed back under `ticket`.
pub fn put(key: GroupKey, ticket: crate::cache::Ticket, book: Book) {
    BOOKS.with(|b| b.borrow_mut().put(key, ticket, book))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn key(group: &str) -> GroupKey {
        ([1; 16], group.to_string(), "all".to_string(), 0)
    }

    #[test]
    fn a_hint_accounts_for_transactions_below_its_seen_xmin() {
        let mut b = Book::default();
        assert!(!b.accounts(&p(1), 5), "nothing seen: probe");
        b.note(p(1), 10);
        // (newest transaction found, accounted for)
        for (newest, accounted) in [(5, true), (9, true), (10, false), (11, false)] {
            assert_eq!(b.accounts(&p(1), newest), accounted, "newest {newest}");
        }
        assert!(!b.accounts(&p(2), 5), "another partition");
        // The highest seen_xmin counts, whatever the order seen.
        b.note(p(1), 7);
        assert!(b.accounts(&p(1), 9));
        b.note(p(1), 20);
        assert!(b.accounts(&p(1), 19));
    }

    #[test]
    fn a_book_is_read_only_under_the_ticket_it_was_filled_under() {
        let mut books: Books<u64> = Books::new();
        let mut b = books.take(&key("g"), 1);
        b.note(p(1), 10);
        books.put(key("g"), 1, b);
        // (ticket, group, accounted)
        for (ticket, group, accounted) in [(1, "g", true), (2, "g", false), (1, "h", false)] {
            let b = books.take(&key(group), ticket);
            assert_eq!(b.accounts(&p(1), 5), accounted, "ticket {ticket}, group {group}");
            books.put(key(group), ticket, b);
        }
        // Filed under ticket 2 now (empty), ticket 1's book is gone.
        assert!(!books.take(&key("g"), 1).accounts(&p(1), 5));
    }

    #[test]
    fn the_books_are_bounded() {
        let mut books: Books<u64> = Books::new();
        let mut b = Book::default();
        for i in 0..MAX_PARTITIONS as u32 {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            b.note(Uuid::from_bytes(id), 10);
        }
        books.put(key("g"), 1, b);
        let mut h = books.take(&key("h"), 1);
        h.note(p(1), 10);
        books.put(key("h"), 1, h);
        // Past the bound: g's book went, h's stayed.
        assert!(!books.take(&key("g"), 1).accounts(&Uuid::from_bytes([0; 16]), 5));
        assert!(books.take(&key("h"), 1).accounts(&p(1), 5));
        // One book alone past the bound is not kept.
        let mut big = Book::default();
        for i in 0..=MAX_PARTITIONS as u32 {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            big.note(Uuid::from_bytes(id), 10);
        }
        books.put(key("g"), 1, big);
        assert_eq!(books.take(&key("g"), 1).len(), 0);
    }
}
