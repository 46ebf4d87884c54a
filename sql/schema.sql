-- queen: the broker's private state (semantics §2). Users read it through the views (semantics §9) and
-- change it only through the queen_* functions.
--
-- Three rules shape every table here (docs/design.md explains them at length):
--
-- 1. Nothing a producer writes may make another transaction wait (semantics §3.1). Producers run
--    inside users' business transactions, which may stay open for minutes. So the registry
--    tables (queues, partitions, subscriptions) have NO unique index: queue and partition ids
--    are derived from their names (UUIDv5), a message can be written before any registry row
--    is visible, and two transactions that both create a partition each insert a row rather
--    than one waiting on the other's uncommitted insert. Readers take the earliest row;
--    maintenance folds duplicates.
-- 2. Messages are insert-only and ordered by (txid, seq): the pushing transaction's top-level
--    xid8 (stored as bigint) and a per-backend counter. Commit order is not insert order, so consumer state
--    remembers the transactions that were still running when its cursor passed them
--    ("pending" xids) and picks their messages up when they commit (semantics §6.1, §6.2).
-- 3. Hot consumer rows are narrow, have no index on the columns that change (HOT updates) and
--    leave room on their pages (fillfactor).
--
-- `shard` (in every table a call writes): the key queen's tables are distributed by on Citus
-- (docs/design.md, "Distributed on Citus"), one value per Citus shard, listed in
-- queen.shard_keys; a partition's is picked from its id (src/shards.rs). On one server it is 0
-- everywhere. Unique keys that calls name in ON CONFLICT include it (Citus requires the
-- distribution key in every unique index); the others gain it when queen_distribute() runs.

CREATE SCHEMA queen;

COMMENT ON SCHEMA queen IS 'queen broker state; read it through the views, change it through the queen_* functions';

-- The mapping of stored transaction ids to this cluster's counter (src/cluster.rs): stored ids
-- are this cluster's xid8 + xid_offset. One verified row is a settled mapping; a restore adds
-- the dumped row beside the one CREATE EXTENSION inserts, and rows that arrive in the tables
-- holding ids from outside queen mark it unverified (sql/restore.sql): the first queen call
-- after it has it settled, in a transaction of its own, by the counter (a rebase moves the
-- offset above every stored id when this counter is behind). system_identifier: the cluster
-- that settled it last (for people; it decides nothing).
CREATE TABLE queen.cluster (
    system_identifier bigint      NOT NULL,
    xid_offset        bigint      NOT NULL,
    rebased_at        timestamptz,
    verified          boolean     NOT NULL DEFAULT false
);
INSERT INTO queen.cluster (system_identifier, xid_offset, verified)
SELECT system_identifier, 0, true FROM pg_catalog.pg_control_system();

-- One row per queue (duplicates possible, see rule 1). Option columns are NULL until
-- queen_configure sets them; NULL means the default of semantics §4. The effective row is the one
-- configured last (options_updated_at DESC NULLS LAST), then the oldest.
CREATE TABLE queen.queues (
    queue_id                    uuid        NOT NULL,
    name                        text        NOT NULL,
    created_at                  timestamptz NOT NULL DEFAULT clock_timestamp(),
    options_updated_at          timestamptz,
    lease_time                  integer,
    retry_limit                 integer,
    retry_delay                 integer,
    dead_letter_queue           boolean,
    delayed_processing          integer,
    window_buffer               integer,
    max_size                    bigint,
    retention_seconds           integer,
    completed_retention_seconds integer,
    max_wait_time_seconds       integer
);
CREATE INDEX queues_queue_id ON queen.queues (queue_id);
CREATE INDEX queues_name ON queen.queues (name);

-- One row per partition (duplicates possible, see rule 1). partition_id = UUIDv5 of
-- (queue_id, name), so a push can address the partition before this row exists.
CREATE TABLE queen.partitions (
    partition_id uuid        NOT NULL,
    queue_id     uuid        NOT NULL,
    name         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    shard        integer     NOT NULL DEFAULT 0
);
CREATE INDEX partitions_partition_id ON queen.partitions (partition_id);
CREATE INDEX partitions_queue_id ON queen.partitions (queue_id, name);

-- Every message, insert-only. An ack never touches this table; retention deletes from it.
--   txid  pg_current_xact_id() of the pushing transaction (top level, never wraps)
--   seq   a per-backend counter: orders the messages of one transaction in push order
-- Primary key (partition_id, txid, seq) is the delivery order of a partition; the queue log
-- index (queue_id, txid, seq) lets a consumer group find partitions with new messages
-- without looking at partitions that have none.
-- transaction_id is NULL when the producer gave none: the message's id is then its key
-- (reported as message_id::text), which keeps keyless pushes out of the uniqueness index.
CREATE TABLE queen.messages (
    partition_id   uuid        NOT NULL,
    txid           bigint      NOT NULL,
    seq            bigint      NOT NULL,
    queue_id       uuid        NOT NULL,
    message_id     uuid        NOT NULL,
    transaction_id text,
    partition      text        NOT NULL,
    payload        jsonb       NOT NULL,
    trace_id       uuid,
    created_at     timestamptz NOT NULL,
    shard          integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, txid, seq)
);
CREATE UNIQUE INDEX messages_message_id ON queen.messages (message_id);
CREATE UNIQUE INDEX messages_transaction_id ON queen.messages (partition_id, transaction_id, shard)
    WHERE transaction_id IS NOT NULL;
CREATE INDEX messages_queue_log ON queen.messages (queue_id, txid, seq) INCLUDE (partition_id);
-- No statistics on txid: its values are commit history, not what queries compare it with. A
-- queue filled by one transaction (one txid in the statistics) made the planner expect every
-- lookup by txid to return the whole table and `txid IS DISTINCT FROM` (the caller's own
-- messages left out) none of it, and the generic plans of discovery scanned and sorted the
-- whole log at every pop (1.6–2 s a call over 300 000 messages, against 15 ms). Without
-- statistics it takes the default selectivities, and the log's index.
ALTER TABLE queen.messages ALTER COLUMN txid SET STATISTICS 0;

-- A consumer group's subscription to a queue: fixed at its first pop (or seek).
-- consumer_group '__QUEUE_MODE__' is queue mode. mode 'new' starts after the transactions
-- visible at subscription: start_xmax and start_xip are that snapshot's xmax and in-progress
-- list (the subscribing transaction's own xid among them). Several rows when first pops ran at
-- once (rule 1): effective_subscriptions says what they add up to. `seek`: the row a
-- queen_seek wrote, which replaces every subscription of the group that began before it (semantics
-- §3.2) — also a first pop's row that was not visible to the seek and commits after it.
-- On Citus a group has its rows in every shard (src/shards.rs), each shard's on its own.
CREATE TABLE queen.subscriptions (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    mode           text        NOT NULL CHECK (mode IN ('all', 'new', 'from')),
    from_ts        timestamptz,
    start_xmax     bigint,
    start_xip      bigint[],
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    seek           boolean     NOT NULL DEFAULT false,
    shard          integer     NOT NULL DEFAULT 0
);
CREATE INDEX subscriptions_queue_group ON queen.subscriptions (queue_id, consumer_group, created_at);

-- What a group's subscription rows add up to (semantics §3.2). The rows that count: the latest
-- seek's alone, if the group has one (a row beside it was written by a first pop that did not
-- see the seek: it began before the seek, and the seek replaces it); otherwise every first
-- pop's row, and then the oldest row's mode, and for 'new' the earliest point of all — a
-- transaction is new when any of their snapshots did not see it: the least xmax, and below it
-- every transaction one of them saw running —, for 'from' the earliest time. sub_key names
-- the result, with the time of the row that heads it: state derived from the subscription
-- (discovery points, a pop's carried point) records what it was derived from, and starts
-- again when it changes (a seek, a delete and a new first pop, an earlier first pop that
-- commits later).
CREATE VIEW queen.effective_subscriptions AS
SELECT o.queue_id, o.consumer_group, o.mode, c.from_ts, c.start_xmax, x.xip AS start_xip,
       o.mode || ':' || COALESCE(extract(epoch FROM c.from_ts)::text, '') || ':'
         || COALESCE(c.start_xmax::text, '') || ':' || array_to_string(x.xip, ',') || ':'
         || extract(epoch FROM o.since)::text || CASE WHEN o.seek THEN ':seek' ELSE '' END AS sub_key,
       o.shard
  FROM (SELECT DISTINCT ON (queue_id, consumer_group, shard) queue_id, consumer_group, shard, mode, seek,
               created_at AS since
          FROM queen.subscriptions
         ORDER BY queue_id, consumer_group, shard, seek DESC, CASE WHEN seek THEN created_at END DESC NULLS LAST,
                  created_at) AS o
  CROSS JOIN LATERAL (
        SELECT min(s.start_xmax) FILTER (WHERE s.mode = 'new') AS start_xmax,
               min(s.from_ts) FILTER (WHERE s.mode = 'from') AS from_ts
          FROM queen.subscriptions s
         WHERE s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = o.shard
           AND s.mode = o.mode AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)) AS c
  CROSS JOIN LATERAL (
        -- (An aggregate over the rows rather than ARRAY(subquery) in a SELECT without FROM:
        -- Citus routes no correlated subquery beside a subquery without FROM.)
        SELECT COALESCE(array_agg(DISTINCT u.x ORDER BY u.x), '{}'::bigint[]) AS xip
          FROM queen.subscriptions s CROSS JOIN LATERAL unnest(s.start_xip) AS u(x)
         WHERE o.mode = 'new'
           AND s.queue_id = o.queue_id AND s.consumer_group = o.consumer_group AND s.shard = o.shard
           AND s.mode = 'new'
           AND s.seek = o.seek AND (NOT o.seek OR s.created_at = o.since)
           AND u.x < c.start_xmax) AS x;

-- Per (partition, group): where the group is and what it holds. Created lazily by the first
-- pop of that partition (a subscribed group has a logical cursor on every partition; the row
-- appears when it is first needed), and keeps the start it was made with: a first pop that
-- subscribed earlier and commits later never adds to a partition messages that come before
-- ones already delivered there (semantics §3.2, order wins). Unique: claiming a partition is exactly the place where
-- one of two competitors must lose, and pops take it without waiting (SKIP LOCKED, advisory
-- try-locks).
--   done_txid/done_seq  frontier: every message at or before it is finished...
--   pending_txid[]      ...except those of these transactions, in progress when the frontier
--   pending_seq[]          passed them; pending_seq is how far within each one is finished
--   ahead_txid/seq[]    messages past the frontier finished out of order (completed after an
--                       unfinished one, or dead-lettered); never delivered again
--   fail_txid/seq,      the first unfinished message and the failures charged to it
--   failures              (attempt = failures + 1); starts afresh for the next message
--   retry_at            no delivery before this (retryDelay after a failed ack)
--   lease_*             the active lease, its batch in delivery order (lease_keys: packed,
--                       a few bytes a key; read in SQL through queen.batch_keys,
--                       src/packed_keys.rs), and the transactions the popping snapshot saw in
--                       progress inside the batch's range. The
--                       lease lives here and nowhere else: a pop writes it with the row it
--                       claims, the ack that releases it clears it with the row it moves (one
--                       write each per cycle; a table of leases grew with pops).
--   last_lease_id,      the last lease that ended here, and whether it ran out (settled by a
--   last_lease_expired    pop) rather than being released: a late ack of it still acks for the
--                       lease's group ('already acknowledged'), and hears 'lease expired' or
--                       'lease not held' as semantics §3.3 says
--   replayed_at         when the group last had dead letters replayed here: max wait counts
--                       afresh from then (src/dead_letters.rs)
CREATE TABLE queen.cursors (
    partition_id     uuid        NOT NULL,
    consumer_group   text        NOT NULL,
    queue_id         uuid        NOT NULL,
    done_txid        bigint      NOT NULL DEFAULT 0,
    done_seq         bigint      NOT NULL DEFAULT 0,
    pending_txid     bigint[]    NOT NULL DEFAULT '{}',
    pending_seq      bigint[]    NOT NULL DEFAULT '{}',
    ahead_txid       bigint[]    NOT NULL DEFAULT '{}',
    ahead_seq        bigint[]    NOT NULL DEFAULT '{}',
    fail_txid        bigint,
    fail_seq         bigint,
    failures         integer     NOT NULL DEFAULT 0,
    retry_at         timestamptz,
    lease_id         uuid,
    lease_expires_at timestamptz,
    lease_keys       bytea,
    lease_xip        bigint[],
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_lease_id    uuid,
    last_lease_expired boolean NOT NULL DEFAULT false,
    shard            integer     NOT NULL DEFAULT 0,
    replayed_at      timestamptz,
    PRIMARY KEY (partition_id, consumer_group, shard)
) WITH (fillfactor = 50);
-- The rows of a lease, for queen_renew (an ack finds its lease through the message's
-- partition, by the primary key). Only rows under a lease are in it; setting and clearing a
-- lease are not HOT updates because of it, which costs less than the lease table it replaces.
CREATE INDEX cursors_lease ON queen.cursors (lease_id) WHERE lease_id IS NOT NULL;

-- Work hints: "partition P may have work for group G from ready_at on". No uniqueness, so no
-- writer waits; a pop that finds a partition empty deletes the hints written by transactions
-- its look's snapshot sees (txid: the transaction that last wrote the row), which is safe
-- because such a hint's message is visible to the look too. The (queue, group, ready_at) index
-- hands pops the next claimable partition in O(log n), oldest first, so no partition starves;
-- a lease or a retry delay pushes ready_at into the future.
--
-- A hint also says which messages it accounts for: seen_xmin is the xmin of the snapshot its
-- writer read (the writer's own transaction counted as running), and every message of a
-- transaction below it was visible to the writer, so whoever sees the writer committed sees
-- those messages too; deleting or moving the hint is then safe for them. Discovery writes
-- nothing for a partition whose hint already accounts for what it found there, and otherwise
-- updates a hint in place (one it can lock without waiting) before it inserts one: so a pair
-- has one hint, plus one for each transaction that held its hint locked while discovery passed
-- — bounded by partitions × groups, not by pops (issue 10: 188 355 rows for 1 000 partitions
-- after 560 pops when every discovery inserted).
CREATE TABLE queen.ready (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    partition_id   uuid        NOT NULL,
    ready_at       timestamptz NOT NULL,
    txid           bigint      NOT NULL, -- queen.txid() of the transaction that last wrote it
    seen_xmin      bigint      NOT NULL DEFAULT 0,
    shard          integer     NOT NULL DEFAULT 0
);
-- ready_next orders a group's hints by due time and then partition: one total order, which a
-- page of candidates keeps without reading past it (hints of equal due times are many: one
-- discovery's, one batch push's).
CREATE INDEX ready_next ON queen.ready (queue_id, consumer_group, ready_at, partition_id);
CREATE INDEX ready_partition ON queen.ready (partition_id, consumer_group);

-- How far a group has scanned the queue log (messages_queue_log) for partitions with new
-- work: one row per scan, insert-only so that concurrent pops never wait on each other; the
-- row with the greatest position among those of the group's current subscription (sub_key,
-- effective_subscriptions) is the group's discovery point, the others are pruned.
CREATE TABLE queen.discovery (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    upto_txid      bigint      NOT NULL,
    upto_seq       bigint      NOT NULL,
    pending_txid   bigint[]    NOT NULL DEFAULT '{}',
    sub_key        text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    shard          integer     NOT NULL DEFAULT 0
);
CREATE INDEX discovery_point ON queen.discovery (queue_id, consumer_group, upto_txid DESC, upto_seq DESC);

-- Messages a group gave up on. The message itself stays in its partition. reopened: a seek
-- moved the group's position back before the message after it was filed, so the group is owed
-- the message again; once it finishes it again (completes it, or files it anew, which clears
-- the mark), the dead letter no longer stands: the view leaves it out and a replay delivers
-- nothing for it (semantics §3.4).
CREATE TABLE queen.dead_letters (
    queue_id       uuid        NOT NULL,
    partition_id   uuid        NOT NULL,
    consumer_group text        NOT NULL,
    message_id     uuid        NOT NULL,
    txid           bigint      NOT NULL,
    seq            bigint      NOT NULL,
    error          text,
    attempts       integer     NOT NULL,
    failed_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    shard          integer     NOT NULL DEFAULT 0,
    reopened       boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (partition_id, consumer_group, txid, seq)
);
CREATE INDEX dead_letters_queue ON queen.dead_letters (queue_id, consumer_group);

-- Message counts per queue, kept by maintenance so that queue_stats need not count millions of
-- rows: `counted` messages up to a point in the queue log (with the transactions still running
-- behind it, as for cursors); queue_stats adds what came after the point.
CREATE TABLE queen.queue_counts (
    queue_id     uuid        NOT NULL,
    upto_txid    bigint      NOT NULL,
    upto_seq     bigint      NOT NULL,
    pending_txid bigint[]    NOT NULL DEFAULT '{}',
    counted      bigint      NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    shard        integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, shard)
);

-- Partitions maintenance removed: a push that saw the registry row just before it went may
-- still commit a message there; the next passes re-register such partitions.
CREATE TABLE queen.retired_partitions (
    partition_id uuid        NOT NULL,
    queue_id     uuid        NOT NULL,
    name         text        NOT NULL,
    retired_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    shard        integer     NOT NULL DEFAULT 0
);

-- The shard keys (src/shards.rs): one per Citus shard of queen's tables, in shard order (idx
-- from 0); a partition's key is the one at h(partition_id) mod (number of keys). One key, 0,
-- until queen_distribute() runs; a reference table on Citus. Not dumped: a dump is restored
-- into one server, where the keys are CREATE EXTENSION's.
CREATE TABLE queen.shard_keys (
    idx   integer PRIMARY KEY,
    shard integer NOT NULL
);
INSERT INTO queen.shard_keys VALUES (0, 0);

-- On Citus, the shards of queen's tables whose rows this node's mapping covers (src/cluster.rs):
-- a shard that reaches the node (queen_distribute() moving a server's rows out, a shard move,
-- the rebalancer) brings ids of another node's counter, and the node settles its mapping above
-- them before any call uses it. A shard is known by its id and the local table that holds it
-- here (`relation`, the oid of queen.messages_<shardid>): a shard that left and came back is
-- in a table created at its return, so it is an arrival again even if this node never saw it
-- go. Node-local, like queen.cluster; empty on one server.
CREATE TABLE queen.settled_shards (
    shardid    bigint      PRIMARY KEY,
    settled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    relation   oid
);

-- On a Citus coordinator, a group's subscription in a shard its first pop could not reach (the
-- shard's worker was down; src/route.rs): the mode and start it is to have there, made by the
-- next pop that reaches the shard. `from_at` is the first pop's time for 'new' (what that
-- shard receives after it is new). Node-local; empty on one server and on workers.
CREATE TABLE queen.subscriptions_owed (
    queue_id       uuid        NOT NULL,
    consumer_group text        NOT NULL,
    shard          integer     NOT NULL,
    mode           text        NOT NULL,
    from_at        timestamptz,
    owed_since     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue_id, consumer_group, shard)
);

-- Visibility points (src/max_wait.rs): what a maintenance pass's snapshot saw, in stored ids
-- (transactions below seen_xmax and not in seen_xip had ended), and when. A message has waited
-- maxWaitTimeSeconds once the newest point older than that saw it. Thinned by every pass;
-- not dumped (a restored database counts waits from its own passes).
CREATE TABLE queen.visibility_points (
    taken_at timestamptz PRIMARY KEY,
    seen_xmax bigint     NOT NULL,
    seen_xip  bigint[]   NOT NULL
);

-- Key/value state (src/kv.rs, queen_kv): one row per live or expired-but-unpruned key of a
-- namespace. A key whose expires_at has passed is gone for every read and write (the
-- predicate decides, not the row); maintenance deletes such rows. `version` comes from
-- queen.kv_versions, so a key deleted and written again never repeats a version an old holder
-- may still carry in `expect`. `key` sorts by bytes (COLLATE "C") so that a prefix is a range
-- of the primary key.
CREATE SEQUENCE queen.kv_versions;
CREATE TABLE queen.kv (
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      jsonb       NOT NULL,
    version    bigint      NOT NULL,
    expires_at timestamptz,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX kv_expiry ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;

-- Timers (src/timers.rs, queen_schedule): one row per pending timer, removed when it fires
-- (its message pushed in the same transaction) or is cancelled. Kept by (queue, key); the
-- queue by id, derived from its name, as everywhere. message_id is the id its message will
-- have. timers_due serves the firing, earliest first. scheduled_by: the role that scheduled
-- it, whose `push` privilege on the queue the firing checks (NULL: scheduled before queen
-- kept it, fired as it was).
CREATE TABLE queen.timers (
    queue_id       uuid        NOT NULL,
    queue          text        NOT NULL,
    timer_key      text COLLATE "C" NOT NULL,
    partition      text        NOT NULL,
    payload        jsonb       NOT NULL,
    transaction_id text        NOT NULL,
    message_id     uuid        NOT NULL,
    trace_id       uuid,
    deliver_at     timestamptz NOT NULL,
    scheduled_at   timestamptz NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    last_error     text,
    scheduled_by   regrole,
    PRIMARY KEY (queue_id, timer_key)
);
CREATE INDEX timers_due ON queen.timers (deliver_at);

-- Composite types of the result shapes of docs/semantics.md §3, for users' PL/pgSQL (`DECLARE m queen.message`).
-- The functions return them (src/api/rows.rs).
CREATE TYPE queen.push_result AS (idx int, message_id uuid, transaction_id text, queue text,
                                  partition text, partition_id uuid, status text);
CREATE TYPE queen.message AS (message_id uuid, transaction_id text, queue text, partition text,
                              partition_id uuid, payload jsonb, trace_id uuid, created_at timestamptz,
                              consumer_group text, lease_id uuid, lease_expires_at timestamptz,
                              attempt int);
CREATE TYPE queen.ack_result AS (idx int, message_id uuid, success boolean, error text,
                                 lease_released boolean, dead_lettered boolean);
CREATE TYPE queen.timer_result AS (queue text, timer_key text, partition text, message_id uuid,
                                  transaction_id text, deliver_at timestamptz, status text);
CREATE TYPE queen.timer AS (queue text, timer_key text, partition text, payload jsonb, transaction_id text,
                            message_id uuid, trace_id uuid, deliver_at timestamptz,
                            scheduled_at timestamptz, attempts int, last_error text);

-- Who may use which queue (semantics §11, src/privilege.rs): one row per (role, queue, privilege);
-- queue '*' is every queue, present and future. kv_read and kv_write name a key/value
-- namespace instead (src/kv.rs), '*' every namespace. Read through the view queen.grants. A role is
-- kept by oid (regrole: pg_dump writes its name, and a restore finds the role by name); drop a
-- role's grants (queen_revoke) before dropping the role.
CREATE TABLE queen.privileges (
    role       regrole     NOT NULL,
    queue      text        NOT NULL,
    privilege  text        NOT NULL CHECK (privilege IN ('push', 'pop', 'configure', 'read', 'kv_read', 'kv_write')),
    granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (role, queue, privilege)
);
CREATE INDEX privileges_queue ON queen.privileges (queue);

-- What maintenance has done in this database (src/maintain.rs), read through the view
-- queen.maintenance_stats: one row, which the last unit of every pass (the worker's or
-- queen_maintain()'s) creates or adds its report to, and which a failed pass of the worker
-- notes. timers_cancelled: timers removed unfired because the role that scheduled them may no
-- longer push to their queue (src/timers.rs), by passes and by the worker's firings. Totals since the extension was created (or restored: the row is dumped); a pass that
-- stops midway (skipped, failed) adds nothing of what its committed units did.
CREATE TABLE queen.maintenance_totals (
    singleton                   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    passes                      bigint      NOT NULL DEFAULT 0,
    failed_passes               bigint      NOT NULL DEFAULT 0,
    retention_deleted           bigint      NOT NULL DEFAULT 0,
    completed_retention_deleted bigint      NOT NULL DEFAULT 0,
    max_wait_dead_lettered      bigint      NOT NULL DEFAULT 0,
    registry_rows_folded        bigint      NOT NULL DEFAULT 0,
    partitions_removed          bigint      NOT NULL DEFAULT 0,
    partitions_restored         bigint      NOT NULL DEFAULT 0,
    last_pass_at                timestamptz,
    last_pass_seconds           float8,
    last_report                 jsonb,
    last_failure_at             timestamptz,
    last_error                  text,
    timers_cancelled            bigint      NOT NULL DEFAULT 0
);

-- Every table's rows are data (semantics §12): pg_dump dumps them, pg_restore restores them. The
-- one row CREATE EXTENSION inserts (queen.cluster) is dumped too: restored next to the new
-- one, it unsettles the mapping, which the first queen call has settled (src/cluster.rs).
SELECT pg_catalog.pg_extension_config_dump('queen.cluster', '');
SELECT pg_catalog.pg_extension_config_dump('queen.queues', '');
SELECT pg_catalog.pg_extension_config_dump('queen.partitions', '');
SELECT pg_catalog.pg_extension_config_dump('queen.messages', '');
SELECT pg_catalog.pg_extension_config_dump('queen.subscriptions', '');
SELECT pg_catalog.pg_extension_config_dump('queen.cursors', '');
SELECT pg_catalog.pg_extension_config_dump('queen.ready', '');
SELECT pg_catalog.pg_extension_config_dump('queen.discovery', '');
SELECT pg_catalog.pg_extension_config_dump('queen.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('queen.queue_counts', '');
SELECT pg_catalog.pg_extension_config_dump('queen.retired_partitions', '');
SELECT pg_catalog.pg_extension_config_dump('queen.privileges', '');
SELECT pg_catalog.pg_extension_config_dump('queen.maintenance_totals', '');
SELECT pg_catalog.pg_extension_config_dump('queen.kv', '');
SELECT pg_catalog.pg_extension_config_dump('queen.kv_versions', '');
SELECT pg_catalog.pg_extension_config_dump('queen.timers', '');
