//! JSON Schema (draft 2020-12) checks of tool input schemas and of call arguments.
//! The validator is built without remote `$ref` resolution, so a schema can never
//! make the server fetch a URL.

use serde_json::Value;

/// Checks that a tool's input schema is a valid draft 2020-12 object schema.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("must be a JSON Schema with \"type\" = \"object\"".into());
    }
    jsonschema::draft202012::meta::validate(schema)
        .map_err(|e| format!("is not a valid JSON Schema: {e}"))?;
    compile(schema).map(|_| ())
}

pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::draft202012::new(schema).map_err(|e| format!("cannot be compiled: {e}"))
}

/// Validates arguments, describing every failure (at most a few) for the model.
pub fn check_instance(validator: &jsonschema::Validator, instance: &Value) -> Result<(), String> {
    let problems: Vec<String> = validator
        .iter_errors(instance)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
