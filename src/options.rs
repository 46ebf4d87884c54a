//! Queue options (semantics §4): their names, defaults, ranges, and how a `queen_configure` patch
//! applies to them. Plain Rust, no server needed.
//!
//! A stored option is `None` until it is set; `None` means the default. A patch changes only
//! the options it names (Queen itself resets every option not sent; semantics §3.4 does not).

use crate::error::{shorten, QueenError, QueenResult};
use serde_json::{Map, Value};

/// The value of every option, as stored (`None` = default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredOptions {
    pub lease_time: Option<i32>,
    pub retry_limit: Option<i32>,
    pub retry_delay: Option<i32>,
    pub dead_letter_queue: Option<bool>,
    pub delayed_processing: Option<i32>,
    pub window_buffer: Option<i32>,
    pub max_size: Option<i64>,
    pub retention_seconds: Option<i32>,
    pub completed_retention_seconds: Option<i32>,
    pub max_wait_time_seconds: Option<i32>,
}

/// The effective value of every option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueOptions {
    pub lease_time: i32,
    pub retry_limit: i32,
    pub retry_delay: i32,
    pub dead_letter_queue: bool,
    pub delayed_processing: i32,
    pub window_buffer: i32,
    pub max_size: i64,
    pub retention_seconds: i32,
    pub completed_retention_seconds: i32,
    pub max_wait_time_seconds: i32,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            lease_time: 300,
            retry_limit: 3,
            retry_delay: 1000,
            dead_letter_queue: true,
            delayed_processing: 0,
            window_buffer: 0,
            max_size: 0,
            retention_seconds: 0,
            completed_retention_seconds: 0,
            max_wait_time_seconds: 0,
        }
    }
}

/// A lease of `seconds` (semantics §3.2): 1 or more, and at most `queen.max_lease_seconds`; `what`
/// names where the length came from.
pub fn check_lease(what: &str, seconds: i32) -> QueenResult<()> {
    lease_in_bounds(what, seconds, crate::gucs::MAX_LEASE_SECONDS.get())
}

fn lease_in_bounds(what: &str, seconds: i32, max: i32) -> QueenResult<()> {
    match seconds {
        s if s <= 0 => Err(QueenError::invalid(what, format!("must be 1 or more, got {s}"))),
        s if s > max => {
            Err(QueenError::invalid(what, format!("must be at most queen.max_lease_seconds ({max}), got {s}")))
        }
        _ => Ok(()),
    }
}

/// What kind of value an option takes, with its inclusive range for integers.
enum Kind {
    Int { min: i64, max: i64 },
    Bool,
}

/// Every option of semantics §4 in the order `queen_configure` reports them.
const OPTIONS: &[(&str, Kind)] = &[
    ("leaseTime", Kind::Int { min: 1, max: i32::MAX as i64 }),
    ("retryLimit", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("retryDelay", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("deadLetterQueue", Kind::Bool),
    ("delayedProcessing", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("windowBuffer", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("maxSize", Kind::Int { min: 0, max: i64::MAX }),
    ("retentionSeconds", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("completedRetentionSeconds", Kind::Int { min: 0, max: i32::MAX as i64 }),
    ("maxWaitTimeSeconds", Kind::Int { min: 0, max: i32::MAX as i64 }),
];

/// A validated option value.
enum Setting {
    Int(i64),
    Bool(bool),
}

fn validate(name: &str, kind: &Kind, value: &Value) -> QueenResult<Setting> {
    let what = format!("option \"{name}\"");
    match kind {
        Kind::Bool => value.as_bool().map(Setting::Bool).ok_or_else(|| {
            QueenError::invalid(what, format!("must be true or false, got {}", shorten(&value.to_string())))
        }),
        Kind::Int { min, max } => {
            let range = format!("must be an integer from {min} to {max}");
            // serde_json keeps integers exact (i64/u64) and floats as f64: 300.0 and 1e3 are
            // floats and are refused like 1.5, so that a typo never silently truncates.
            match value.as_i64() {
                Some(n) if n >= *min && n <= *max => Ok(Setting::Int(n)),
                Some(_) => Err(QueenError::invalid(what, format!("{range}, got {value}"))),
                None if value.is_u64() => Err(QueenError::invalid(what, format!("{range}, got {value}"))),
                None => Err(QueenError::invalid(what, format!("{range}, got {}", shorten(&value.to_string())))),
            }
        }
    }
}

impl StoredOptions {
    /// The options after `patch` (a JSON object of option names to values) is applied.
    /// Every name and value is checked before anything changes: an error leaves `self` as is.
    pub fn patched(&self, patch: &Value) -> QueenResult<StoredOptions> {
        let obj: &Map<String, Value> = patch.as_object().ok_or_else(|| {
            QueenError::invalid(
                "argument \"options\"",
                format!("must be a JSON object of option names to values, got {}", shorten(&patch.to_string())),
            )
        })?;
        let mut out = self.clone();
        for (name, value) in obj {
            let kind = OPTIONS.iter().find(|(n, _)| n == name).map(|(_, k)| k).ok_or_else(|| {
                QueenError::invalid(
                    format!("option \"{}\"", shorten(name)),
                    format!(
                        "unknown option; the options are {}",
                        OPTIONS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            let setting = validate(name, kind, value)?;
            // Ranges above guarantee the narrowing casts below are exact.
            match (name.as_str(), setting) {
                ("leaseTime", Setting::Int(n)) => out.lease_time = Some(n as i32),
                ("retryLimit", Setting::Int(n)) => out.retry_limit = Some(n as i32),
                ("retryDelay", Setting::Int(n)) => out.retry_delay = Some(n as i32),
                ("deadLetterQueue", Setting::Bool(b)) => out.dead_letter_queue = Some(b),
                ("delayedProcessing", Setting::Int(n)) => out.delayed_processing = Some(n as i32),
                ("windowBuffer", Setting::Int(n)) => out.window_buffer = Some(n as i32),
                ("maxSize", Setting::Int(n)) => out.max_size = Some(n),
                ("retentionSeconds", Setting::Int(n)) => out.retention_seconds = Some(n as i32),
                ("completedRetentionSeconds", Setting::Int(n)) => out.completed_retention_seconds = Some(n as i32),
                ("maxWaitTimeSeconds", Setting::Int(n)) => out.max_wait_time_seconds = Some(n as i32),
                (other, _) => unreachable!("option {other} is listed in OPTIONS but not applied"),
            }
        }
        Ok(out)
    }

    pub fn effective(&self) -> QueueOptions {
        let d = QueueOptions::default();
        QueueOptions {
            lease_time: self.lease_time.unwrap_or(d.lease_time),
            retry_limit: self.retry_limit.unwrap_or(d.retry_limit),
            retry_delay: self.retry_delay.unwrap_or(d.retry_delay),
            dead_letter_queue: self.dead_letter_queue.unwrap_or(d.dead_letter_queue),
            delayed_processing: self.delayed_processing.unwrap_or(d.delayed_processing),
            window_buffer: self.window_buffer.unwrap_or(d.window_buffer),
            max_size: self.max_size.unwrap_or(d.max_size),
            retention_seconds: self.retention_seconds.unwrap_or(d.retention_seconds),
            completed_retention_seconds: self.completed_retention_seconds.unwrap_or(d.completed_retention_seconds),
            max_wait_time_seconds: self.max_wait_time_seconds.unwrap_or(d.max_wait_time_seconds),
        }
    }
}

impl QueueOptions {
    /// Every option with its value, by its semantics §4 name, in that section's order.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("leaseTime".into(), self.lease_time.into());
        m.insert("retryLimit".into(), self.retry_limit.into());
        m.insert("retryDelay".into(), self.retry_delay.into());
        m.insert("deadLetterQueue".into(), self.dead_letter_queue.into());
        m.insert("delayedProcessing".into(), self.delayed_processing.into());
        m.insert("windowBuffer".into(), self.window_buffer.into());
        m.insert("maxSize".into(), self.max_size.into());
        m.insert("retentionSeconds".into(), self.retention_seconds.into());
        m.insert("completedRetentionSeconds".into(), self.completed_retention_seconds.into());
        m.insert("maxWaitTimeSeconds".into(), self.max_wait_time_seconds.into());
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_those_of_the_spec() {
        let v = StoredOptions::default().effective().to_json();
        assert_eq!(
            v,
            json!({"leaseTime": 300, "retryLimit": 3, "retryDelay": 1000, "deadLetterQueue": true,
                   "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0, "retentionSeconds": 0,
                   "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0})
        );
        // Every listed option appears in the report, and nothing else.
        assert_eq!(v.as_object().unwrap().len(), OPTIONS.len());
    }

    #[test]
    fn a_patch_changes_only_what_it_names() {
        let a = StoredOptions::default().patched(&json!({"leaseTime": 60, "retryLimit": 0})).unwrap();
        let b = a.patched(&json!({"deadLetterQueue": false})).unwrap();
        let e = b.effective();
        assert_eq!((e.lease_time, e.retry_limit, e.dead_letter_queue), (60, 0, false));
        assert_eq!(e.retry_delay, 1000);
        assert_eq!(b.patched(&json!({})).unwrap(), b);
    }

    #[test]
    fn every_option_can_be_set() {
        let all = json!({"leaseTime": 1, "retryLimit": 9, "retryDelay": 0, "deadLetterQueue": false,
                         "delayedProcessing": 5, "windowBuffer": 6, "maxSize": 5000000000i64,
                         "retentionSeconds": 7, "completedRetentionSeconds": 8, "maxWaitTimeSeconds": 9});
        assert_eq!(StoredOptions::default().patched(&all).unwrap().effective().to_json(), all);
    }

    fn err(patch: Value) -> String {
        StoredOptions::default().patched(&patch).unwrap_err().to_string()
    }

    #[test]
    fn bad_input_names_the_option_and_value() {
        assert!(err(json!({"leaseTme": 5})).contains("option \"leaseTme\": unknown option"));
        assert!(err(json!({"leaseTime": "300"})).contains("option \"leaseTime\": must be an integer"));
        assert!(err(json!({"leaseTime": "300"})).contains("got \"300\""));
        assert!(err(json!({"leaseTime": 0})).contains("from 1 to"));
        assert!(err(json!({"leaseTime": 1.5})).contains("got 1.5"));
        assert!(err(json!({"leaseTime": 2147483648i64})).contains("got 2147483648"));
        assert!(err(json!({"retryLimit": -1})).contains("option \"retryLimit\""));
        assert!(err(json!({"maxSize": 18446744073709551615u64})).contains("option \"maxSize\""));
        assert!(err(json!({"deadLetterQueue": 1})).contains("must be true or false, got 1"));
        assert!(err(json!({"deadLetterQueue": null})).contains("option \"deadLetterQueue\""));
        assert!(err(json!([1, 2])).contains("argument \"options\": must be a JSON object"));
    }

    #[test]
    fn a_bad_patch_changes_nothing() {
        let base = StoredOptions::default().patched(&json!({"leaseTime": 10})).unwrap();
        // The valid leaseTime in the same patch must not be applied either.
        assert!(base.patched(&json!({"leaseTime": 20, "retryLimit": -5})).is_err());
        assert_eq!(base.effective().lease_time, 10);
    }

    #[test]
    fn leases_are_bounded_both_ways() {
        assert!(lease_in_bounds("argument \"lease_seconds\"", 1, 86_400).is_ok());
        assert!(lease_in_bounds("argument \"lease_seconds\"", 86_400, 86_400).is_ok());
        let e = lease_in_bounds("argument \"lease_seconds\"", 86_401, 86_400).unwrap_err();
        assert_eq!(
            e.to_string(),
            "queen: argument \"lease_seconds\": must be at most queen.max_lease_seconds (86400), got 86401"
        );
        assert!(lease_in_bounds("x", 0, 86_400).unwrap_err().to_string().contains("must be 1 or more, got 0"));
        assert!(lease_in_bounds("x", i32::MAX, 86_400).is_err());
    }
}
