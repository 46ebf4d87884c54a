//! The wire forms of `queen_ack` (semantics §3.3): the statuses, and a batch's entries as JSON —
//! Queen's shape (camelCase) or rows of `queen_pop` turned into JSON (snake_case) — checked,
//! each in its place.

use crate::error::{shorten, QueenError, QueenResult};
use crate::jsonb::{Element, Field};
use crate::names;
#[cfg(test)]
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    Completed,
    Failed,
    Retry,
    Dlq,
}

impl AckStatus {
    pub fn parse(what: &str, value: &str) -> QueenResult<AckStatus> {
        match value {
            "completed" | "true" => Ok(AckStatus::Completed),
            "failed" | "false" => Ok(AckStatus::Failed),
            "retry" => Ok(AckStatus::Retry),
            "dlq" => Ok(AckStatus::Dlq),
            other => Err(QueenError::invalid(
                what.to_string(),
                format!(
                    "must be 'completed', 'failed', 'retry' or 'dlq' (or true / false), got \"{}\"",
                    shorten(other)
                ),
            )),
        }
    }

    fn from_field(what: &str, v: &Field) -> QueenResult<AckStatus> {
        match v {
            Field::Bool(true) => Ok(AckStatus::Completed),
            Field::Bool(false) => Ok(AckStatus::Failed),
            Field::Str(s) => AckStatus::parse(what, s),
            other => Err(QueenError::invalid(
                what.to_string(),
                format!("must be a status string or a boolean, got {}", shorten(&other.json())),
            )),
        }
    }
}

/// One acknowledgement, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AckEntry {
    pub message_id: Option<uuid::Uuid>,
    pub transaction_id: Option<String>,
    pub partition_id: Option<uuid::Uuid>,
    pub lease_id: Option<uuid::Uuid>,
    /// None: queue mode.
    pub group: Option<String>,
    pub status: AckStatus,
    pub error: Option<String>,
}

/// The entries of the batch form given as JSON text (the unit tests'; the SQL function reads
/// jsonb with `parse_acks_jsonb`): a JSON array of objects in Queen's shape (camelCase) or rows
/// of `queen_pop` turned into JSON (snake_case).
#[cfg(test)]
pub fn parse_acks(acks: &Value) -> QueenResult<Vec<AckEntry>> {
    let arr = acks.as_array().ok_or_else(|| {
        QueenError::invalid(
            "argument \"acks\"",
            format!("must be a JSON array of objects, got {}", shorten(&acks.to_string())),
        )
    })?;
    let elements: Vec<Element> = arr.iter().map(|v| Element::of(v, ACK_KEYS)).collect();
    parse_elements(&elements)
}

/// Check the elements of a batch ack, each in its place.
pub fn parse_elements(elements: &[Element]) -> QueenResult<Vec<AckEntry>> {
    elements.iter().enumerate().map(|(i, e)| parse_ack(i, e)).collect()
}

fn parse_ack(i: usize, e: &Element) -> QueenResult<AckEntry> {
    let obj = match e {
        Element::Object(obj) => obj,
        Element::Other(kind) => {
            return Err(QueenError::invalid(format!("acks[{i}]"), format!("must be an object, got a JSON {kind}")))
        }
    };
    // The first of the names that is present (camelCase wins over snake_case).
    let field = |names: &[&'static str]| -> Option<(&'static str, &Field)> {
        names.iter().find_map(|n| obj.get(n).filter(|v| **v != Field::Null).map(|v| (*n, v)))
    };
    let text = |names: &[&'static str]| -> QueenResult<Option<(&'static str, &str)>> {
        match field(names) {
            None => Ok(None),
            Some((n, Field::Str(s))) => Ok(Some((n, s.as_ref()))),
            Some((n, other)) => Err(QueenError::invalid(
                format!("acks[{i}].{n}"),
                format!("must be a string, got {}", shorten(&other.json())),
            )),
        }
    };
    let uuid = |names: &[&'static str]| -> QueenResult<Option<uuid::Uuid>> {
        let Some((n, s)) = text(names)? else {
            return Ok(None);
        };
        uuid::Uuid::parse_str(s).map(Some).map_err(|_| QueenError::InvalidText {
            what: format!("acks[{i}].{n}"),
            value: s.to_string(),
            kind: "uuid",
        })
    };
    let message_id = uuid(&["messageId", "message_id"])?;
    let partition_id = uuid(&["partitionId", "partition_id"])?;
    let transaction_id = text(&["transactionId", "transaction_id"])?.map(|(_, s)| s.to_string());
    if message_id.is_none() && (transaction_id.is_none() || partition_id.is_none()) {
        return Err(QueenError::invalid(
            format!("acks[{i}]"),
            "names no message: give \"messageId\", or \"transactionId\" and \"partitionId\"",
        ));
    }
    let lease_id = uuid(&["leaseId", "lease_id"])?;
    let group = match field(&["consumerGroup", "consumer_group"]) {
        None => None,
        Some((_, Field::Str(g))) => {
            // (The label an error names is made only when the name is not plainly valid.)
            if !names::plainly_valid(g) || g == names::QUEUE_MODE_GROUP {
                names::check_group(&format!("acks[{i}].consumerGroup"), g)?;
            }
            Some(g.to_string())
        }
        Some((n, other)) => {
            return Err(QueenError::invalid(
                format!("acks[{i}].{n}"),
                format!("must be a string or null, got {}", shorten(&other.json())),
            ))
        }
    };
    let status = match field(&["_status", "status"]) {
        None => AckStatus::Completed,
        Some((n, v)) => AckStatus::from_field(&format!("acks[{i}].{n}"), v)?,
    };
    let error = match field(&["_error", "error"]) {
        None => None,
        Some((_, Field::Str(s))) => Some(s.to_string()),
        Some((_, other)) => Some(other.json()),
    };
    Ok(AckEntry { message_id, transaction_id, partition_id, lease_id, group, status, error })
}

/// The fields of an ack batch's elements that queen reads.
const ACK_KEYS: &[&str] = &[
    "messageId",
    "message_id",
    "partitionId",
    "partition_id",
    "transactionId",
    "transaction_id",
    "leaseId",
    "lease_id",
    "consumerGroup",
    "consumer_group",
    "_status",
    "status",
    "_error",
    "error",
];

/// The entries of a batch ack given as jsonb: the fields queen reads are taken out of the
/// binary jsonb (`Jsonb::elements`), so a popped row's payload is never turned into text,
/// then checked by `parse_elements`.
pub fn parse_acks_jsonb(acks: crate::jsonb::Jsonb) -> QueenResult<Vec<AckEntry>> {
    let elements = acks.elements(ACK_KEYS).map_err(|kind| {
        QueenError::invalid("argument \"acks\"", format!("must be a JSON array of objects, got a JSON {kind}"))
    })?;
    parse_elements(&elements)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: &str = "0190a5b4-0000-7000-8000-000000000001";
    const L: &str = "0190a5b4-0000-7000-8000-0000000000aa";

    #[test]
    fn statuses() {
        for (s, want) in [
            ("completed", AckStatus::Completed),
            ("true", AckStatus::Completed),
            ("failed", AckStatus::Failed),
            ("false", AckStatus::Failed),
            ("retry", AckStatus::Retry),
            ("dlq", AckStatus::Dlq),
        ] {
            assert_eq!(AckStatus::parse("status", s).unwrap(), want);
        }
        assert!(AckStatus::parse("argument \"status\"", "done").unwrap_err().to_string().contains("\"done\""));
    }

    #[test]
    fn queens_shape_and_popped_rows_are_accepted() {
        let a = parse_acks(&json!([
            {"messageId": M, "leaseId": L, "consumerGroup": "g", "_status": "failed", "_error": "boom",
             "status": "completed"},
            {"message_id": M, "lease_id": L, "consumer_group": null, "payload": {"x": 1}, "attempt": 1},
            {"transactionId": "t1", "partitionId": M, "status": false, "error": "e"},
        ]))
        .unwrap();
        assert_eq!(a[0].status, AckStatus::Failed, "_status wins over status");
        assert_eq!(a[0].error.as_deref(), Some("boom"));
        assert_eq!(a[0].group.as_deref(), Some("g"));
        assert_eq!(a[1].status, AckStatus::Completed, "completed by default");
        assert_eq!(a[1].group, None, "null consumer_group is queue mode");
        assert_eq!(a[1].lease_id, Some(uuid::Uuid::parse_str(L).unwrap()));
        assert_eq!(a[2].transaction_id.as_deref(), Some("t1"));
        assert_eq!(a[2].status, AckStatus::Failed);
    }

    #[test]
    fn malformed_acks_are_errors() {
        let err = |v: Value| parse_acks(&v).unwrap_err();
        assert!(err(json!({})).to_string().contains("argument \"acks\""));
        assert!(err(json!([3])).to_string().contains("acks[0]: must be an object"));
        assert!(err(json!([{"leaseId": L}])).to_string().contains("names no message"));
        assert!(err(json!([{"transactionId": "t"}])).to_string().contains("names no message"));
        assert!(matches!(err(json!([{"messageId": "nope"}])), QueenError::InvalidText { .. }));
        assert!(matches!(err(json!([{"messageId": M, "leaseId": "x"}])), QueenError::InvalidText { .. }));
        assert!(err(json!([{"messageId": M, "consumerGroup": 5}])).to_string().contains("acks[0].consumerGroup"));
        assert!(err(json!([{"messageId": M, "_status": "nope"}])).to_string().contains("acks[0]._status"));
        assert!(err(json!([{"messageId": 7}])).to_string().contains("must be a string"));
    }
}
