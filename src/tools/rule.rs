//! `confirm_when` (SPEC §20): a CEL expression on a call's canonical arguments
//! that says whether the call needs its policy's gate (a visitor's card, a
//! teammate's approval) or runs on its own. CEL is the `cel` crate's: a small,
//! non-Turing-complete language with no side effects, so a rule cannot loop,
//! read files or reach the network.
//!
//! An expression that does not compile is a configuration error with its
//! position. One that fails when evaluated (a missing field, a wrong type) or
//! gives anything but a boolean means "gate": a rule never lets a call run on
//! its own by accident.

use std::sync::Arc;

use serde_json::json;

/// A compiled `confirm_when`.
pub struct Rule {
    pub source: String,
    program: cel::Program,
    env: Arc<cel::Env>,
}

/// What a rule said of one call, recorded on its `requested` audit row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// True when the call goes through the policy's gate.
    pub gated: bool,
    /// JSON: `{"confirm_when": "<source>", "result": true|false|"error: …"}`.
    pub record: String,
}

impl Rule {
    /// Compiles `source`; the error names the line and column (1-based).
    pub fn compile(source: &str) -> Result<Rule, String> {
        if source.trim().is_empty() {
            return Err("is empty".into());
        }
        let env = Arc::new(cel::Env::stdlib());
        let program = env
            .compile(source)
            .map_err(|errors| match errors.errors.first() {
                Some(e) => format!(
                    "does not compile at line {}, column {}: {}",
                    e.pos.0,
                    e.pos.1,
                    first_line(&e.msg)
                ),
                None => "does not compile".into(),
            })?;
        Ok(Rule {
            source: source.to_string(),
            program,
            env,
        })
    }

    /// Evaluates the rule on `arguments` (the canonical value, as `args`).
    pub fn decide(&self, arguments: &serde_json::Value) -> Decision {
        let result = self.evaluate(arguments);
        let (gated, said) = match &result {
            Ok(b) => (*b, json!(b)),
            Err(why) => (true, json!(format!("error: {why}"))),
        };
        Decision {
            gated,
            record: json!({"confirm_when": self.source, "result": said}).to_string(),
        }
    }

    fn evaluate(&self, arguments: &serde_json::Value) -> Result<bool, String> {
        let mut context = cel::Context::with_env(Arc::clone(&self.env));
        context
            .add_variable("args", arguments.clone())
            .map_err(|e| e.to_string())?;
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "the rule gave {:?}, not true or false",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn first_line(message: &str) -> &str {
    message.lines().next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_gates_only_the_calls_it_is_true_for() {
        let rule = Rule::compile("args.amount > 100").unwrap();
        assert!(rule.decide(&json!({"amount": 150})).gated);
        assert!(!rule.decide(&json!({"amount": 100})).gated);
        assert!(!rule.decide(&json!({"amount": 99.5})).gated);
        assert_eq!(
            rule.decide(&json!({"amount": 5})).record,
            r#"{"confirm_when":"args.amount > 100","result":false}"#
        );
    }

    #[test]
    fn a_rule_that_throws_or_gives_no_boolean_gates_the_call() {
        let rule = Rule::compile("args.amount > 100").unwrap();
        for args in [
            json!({}),
            json!({"amount": "lots"}),
            json!({"amount": null}),
        ] {
            let d = rule.decide(&args);
            assert!(d.gated, "{args}");
            assert!(d.record.contains("\"result\":\"error: "), "{}", d.record);
        }
        let not_bool = Rule::compile("args.amount").unwrap();
        assert!(not_bool.decide(&json!({"amount": 1})).gated);
    }

    #[test]
    fn a_rule_that_does_not_compile_names_its_position() {
        let why = Rule::compile("args.amount >").err().unwrap();
        assert!(
            why.starts_with("does not compile at line 1, column "),
            "{why}"
        );
        assert!(Rule::compile("  ").is_err());
    }
}
