//! The states and names the product keeps — a tool's policy, a call's kind and
//! status, an audit event and its reason, a message's role and status — as types.
//! Each is TEXT in the database and in JSON, and `as_str`/`parse` are its one
//! conversion, so no state is compared as a string literal anywhere else.

use std::fmt;

/// A stored or configured name that is not one of a state's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a known {what}")]
pub struct UnknownState {
    pub what: &'static str,
    pub text: String,
}

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident ($what:literal) { $($(#[$vmeta:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),*
                }
            }

            pub fn parse(text: &str) -> Result<$name, UnknownState> {
                match text {
                    $($text => Ok($name::$variant),)*
                    _ => Err(UnknownState { what: $what, text: text.to_string() }),
                }
            }
        }

        // In the OpenAPI document: a string that is one of the values.
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),*]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let text = String::deserialize(d)?;
                $name::parse(&text).map_err(|_| {
                    serde::de::Error::unknown_variant(&text, &[$($text),*])
                })
            }
        }
    };
}

text_enum!(
    /// Shown to operators as Off / Runs automatically / Needs confirmation.
    Policy ("tool policy") {
        Off = "off",
        Auto = "auto",
        Confirm = "confirm",
        /// A teammate approves in the console; the visitor sees no card (SPEC §20).
        Approve = "approve",
        /// The visitor confirms on a card, then a teammate approves (SPEC §20).
        ConfirmApprove = "confirm+approve",
    }
);

impl Policy {
    /// True when a call needs somebody's yes before it runs.
    pub fn is_gated(self) -> bool {
        matches!(
            self,
            Policy::Confirm | Policy::Approve | Policy::ConfirmApprove
        )
    }

    /// True when the visitor is shown a card to confirm.
    pub fn asks_visitor(self) -> bool {
        matches!(self, Policy::Confirm | Policy::ConfirmApprove)
    }

    /// True when a teammate must approve before the call runs.
    pub fn asks_teammate(self) -> bool {
        matches!(self, Policy::Approve | Policy::ConfirmApprove)
    }
}

text_enum!(
    /// Whether a call ran on its own or needed the visitor's confirmation.
    CallKind ("call kind") {
        Auto = "auto",
        Confirmation = "confirmation",
    }
);

text_enum!(
    /// A call's status; for a confirmation, its card's (its run has its own).
    CallStatus ("call status") {
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Refused = "refused",
        Pending = "pending",
        Confirmed = "confirmed",
        Cancelled = "cancelled",
        Expired = "expired",
        /// Waiting in the console's approvals queue for a teammate (SPEC §20).
        AwaitingApproval = "awaiting_approval",
    }
);

text_enum!(
    /// What an audit row records (SPEC §10).
    AuditEvent ("audit event") {
        Requested = "requested",
        Confirmed = "confirmed",
        Cancelled = "cancelled",
        Expired = "expired",
        Executed = "executed",
        Failed = "failed",
        Refused = "refused",
        /// An operator changed a tool in the console (SPEC §15).
        ToolChanged = "tool_changed",
        /// A conversation went to a person: the queue or an operator (SPEC §19).
        Handoff = "handoff",
        /// A conversation went back to the assistant (SPEC §19).
        Released = "released",
    }
);

text_enum!(
    /// What an operator may do (SPEC §15): an admin everything, an agent read.
    OperatorRole ("operator role") {
        Admin = "admin",
        Agent = "agent",
    }
);

text_enum!(
    /// Why a call was cancelled, failed or refused (SPEC §10).
    Reason ("reason") {
        Visitor = "visitor",
        Superseded = "superseded",
        HttpStatus = "http_status",
        Timeout = "timeout",
        Unreachable = "unreachable",
        Interrupted = "interrupted",
        /// An MCP tool answered with `isError` (SPEC §17; an extension of §10).
        ToolError = "tool_error",
        InvalidArguments = "invalid_arguments",
        ToolOff = "tool_off",
        OnePerTurn = "one_per_turn",
        TooManyCalls = "too_many_calls",
        Forged = "forged",
        Altered = "altered",
        Replayed = "replayed",
        Late = "late",
        Stale = "stale",
        ForeignConversation = "foreign_conversation",
        /// An operator cancelled a pending card from the console (SPEC §19);
        /// the audit row names the operator.
        Operator = "operator",
        /// The tool's quota for the visitor or site is spent (SPEC §20).
        Quota = "quota",
        /// A teammate declined the call in the console (SPEC §20); the audit
        /// row names the operator.
        Declined = "declined",
        /// An operator whose role may not approve the call answered it, or an
        /// operator answered a visitor's own card (SPEC §20).
        NotApprover = "not_approver",
    }
);

text_enum!(
    /// Who wrote a message.
    Role ("message role") {
        Visitor = "visitor",
        Assistant = "assistant",
        /// A person on the desk replying (SPEC §19), shown with their display name.
        Operator = "operator",
        /// A line of the conversation's own, such as "Back with the assistant".
        Event = "event",
    }
);

text_enum!(
    /// A message's status. `Streaming` is internal: history never shows it.
    MessageStatus ("message status") {
        Sent = "sent",
        Streaming = "streaming",
        Answered = "answered",
        AwaitingConfirmation = "awaiting_confirmation",
        Failed = "failed",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_as_itself_and_nothing_else_is_accepted() {
        for s in Reason::ALL {
            assert_eq!(Reason::parse(s.as_str()), Ok(*s));
        }
        for s in CallStatus::ALL {
            assert_eq!(CallStatus::parse(s.as_str()), Ok(*s));
        }
        for s in MessageStatus::ALL {
            assert_eq!(MessageStatus::parse(s.as_str()), Ok(*s));
        }
        assert!(AuditEvent::parse("Requested").is_err());
        assert_eq!(
            serde_json::to_string(&Policy::Confirm).unwrap(),
            "\"confirm\""
        );
        assert!(serde_json::from_str::<Policy>("\"sometimes\"").is_err());
    }
}
