//! JSON parsing that rejects a duplicate key in any object, at any depth. `serde_json` keeps
//! the last value of a repeated key without a word, so a writer that emits a key twice goes
//! unnoticed by a plain `serde_json::from_str::<Value>`; tests of what the crate writes
//! (events, traces) parse with [`parse_strict`] instead.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses one JSON document like `serde_json::from_str::<Value>`, but fails on an object
/// that has some key twice (the error names the key).
pub fn parse_strict(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Strict>(text).map(|s| s.0)
}

/// A JSON value read by a visitor that refuses duplicate keys.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("not a JSON number: {v}")))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_key_is_an_error_at_any_depth() {
        assert_eq!(
            parse_strict(r#"{"a":1,"b":[{"c":null}]}"#).ok(),
            Some(serde_json::json!({"a":1,"b":[{"c":null}]}))
        );
        let top = parse_strict(r#"{"a":1,"a":2}"#).map_err(|e| e.to_string());
        assert!(
            top.as_ref().is_err_and(|e| e.contains("duplicate key `a`")),
            "{top:?}"
        );
        let deep = parse_strict(r#"[{"x":{"k":1,"k":1}}]"#).map_err(|e| e.to_string());
        assert!(
            deep.as_ref()
                .is_err_and(|e| e.contains("duplicate key `k`")),
            "{deep:?}"
        );
        // The same key in two objects is fine.
        assert!(parse_strict(r#"[{"k":1},{"k":2}]"#).is_ok());
    }
}
