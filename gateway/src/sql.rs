//! The gateway's statements, one per file in gateway/sql/, each prepared once per connection.

pub const SETUP: &str = include_str!("../sql/setup.sql");
pub const PUSH: &str = include_str!("../sql/push.sql");
pub const POP: &str = include_str!("../sql/pop.sql");
pub const ACK: &str = include_str!("../sql/ack.sql");
pub const RENEW: &str = include_str!("../sql/renew.sql");
pub const CONFIGURE: &str = include_str!("../sql/configure.sql");
pub const DELETE_QUEUE: &str = include_str!("../sql/delete_queue.sql");
pub const DELETE_GROUP: &str = include_str!("../sql/delete_group.sql");
pub const SEEK: &str = include_str!("../sql/seek.sql");
pub const DLQ: &str = include_str!("../sql/dlq.sql");
pub const QUEUES: &str = include_str!("../sql/queues.sql");
pub const GROUPS: &str = include_str!("../sql/groups.sql");
pub const HEALTH: &str = include_str!("../sql/health.sql");
pub const KV: &str = include_str!("../sql/kv.sql");
pub const TIMER_SCHEDULE: &str = include_str!("../sql/timer_schedule.sql");
pub const TIMER_CANCEL: &str = include_str!("../sql/timer_cancel.sql");
pub const TIMERS: &str = include_str!("../sql/timers.sql");
pub const LOCK: &str = include_str!("../sql/lock.sql");
pub const MESSAGE: &str = include_str!("../sql/message.sql");
pub const SWITCH_ROLE: &str = include_str!("../sql/switch_role.sql");
