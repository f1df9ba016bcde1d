//! The first model round's request, sent as soon as the prompt is ready.
//!
//! A question reads its site's budget and tool version before its first round
//! (`Turn::first_reads`). When a hundred visitors ask at once on PostgreSQL
//! that read waits its turn, and the model's first token waited behind it and
//! then behind the turn's first writes. So when this replica last saw plenty of
//! the budget left (`Store::may_ask_before_reading`), neither waits for the
//! read: the model is asked with the tools as last read, and the turn's start
//! is written — its reservation is what decides the budget, and a start
//! refused for it writes nothing. A refusal drops the request before any of it
//! was shown; tools that moved meanwhile drop it and ask again with the new
//! ones. Otherwise the read comes first and a spent budget is refused before
//! the model is asked.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::app::App;
use crate::llm::{ChatRequest, ModelStream, ProviderError};
use crate::tools::Toolbox;

type Head = (Result<ModelStream, ProviderError>, Instant);

/// A model request in flight on a task of its own, dropped (and its connection
/// closed) when this value is.
pub(super) struct Asked {
    /// The tools the request offered.
    tools: Arc<Toolbox>,
    task: JoinHandle<Head>,
}

impl Asked {
    /// Sends `request`, which offers `tools`; the wait for its first piece ends
    /// by `deadline`.
    pub(super) fn send(
        app: &App,
        request: ChatRequest,
        tools: Arc<Toolbox>,
        deadline: Instant,
    ) -> Asked {
        let provider = app.provider.clone();
        let head = async move {
            let first = tokio::time::timeout_at(deadline, provider.stream(request))
                .await
                .unwrap_or(Err(ProviderError::TurnTimeout));
            (first, Instant::now())
        };
        Asked {
            tools,
            task: tokio::spawn(head.in_current_span()),
        }
    }

    /// Whether the request offered exactly `tools`, the toolbox the site's tool
    /// version just read stands for.
    pub(super) fn offered(&self, tools: &Arc<Toolbox>) -> bool {
        Arc::ptr_eq(&self.tools, tools)
    }

    /// The model's first piece (or why there is none), and when it came.
    pub(super) async fn head(mut self) -> Head {
        match (&mut self.task).await {
            Ok(head) => head,
            Err(e) => (
                Err(ProviderError::Connect(format!(
                    "the model's request ended early: {e}"
                ))),
                Instant::now(),
            ),
        }
    }
}

impl Drop for Asked {
    fn drop(&mut self) {
        // Aborting a finished task does nothing; its stream, if it was not
        // taken, is dropped with it.
        self.task.abort();
    }
}
