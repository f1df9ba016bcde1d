//! A finished HTTP response as the tests read it: JSON for errors, the parsed
//! server-sent events for streams.

use serde_json::Value;

/// A finished response: JSON for errors, parsed events for streams.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub events: Vec<(String, Value)>,
    pub json: Value,
}

impl Reply {
    pub fn names(&self) -> Vec<&str> {
        self.events.iter().map(|(n, _)| n.as_str()).collect()
    }

    pub fn event(&self, name: &str) -> &Value {
        self.events
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no {name} event in {:?}", self.names()))
    }

    pub fn all(&self, name: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn text(&self) -> String {
        self.all("delta")
            .iter()
            .map(|d| d["text"].as_str().unwrap_or_default())
            .collect()
    }

    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or_default()
    }

    pub fn conversation(&self) -> String {
        self.event("turn")["conversation"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

pub async fn read(response: reqwest::Response) -> Reply {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let is_stream = headers
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    if is_stream {
        Reply {
            status,
            headers,
            events: parse_sse(&text),
            json: Value::Null,
        }
    } else {
        Reply {
            status,
            headers,
            events: Vec::new(),
            json: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }
}

pub fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(n) = line
                    .strip_prefix("event: ")
                    .or_else(|| line.strip_prefix("event:"))
                {
                    name = Some(n.trim().to_string());
                } else if let Some(d) = line
                    .strip_prefix("data: ")
                    .or_else(|| line.strip_prefix("data:"))
                {
                    data = Some(serde_json::from_str(d.trim()).unwrap());
                }
            }
            Some((name?, data?))
        })
        .collect()
}

/// Like `parse_sse`, with each event's `id` (0 when it has none).
pub fn parse_sse_with_ids(text: &str) -> Vec<(i64, String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let (name, data) = parse_sse(block).into_iter().next()?;
            Some((id, name, data))
        })
        .collect()
}
