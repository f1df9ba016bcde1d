//! The demo shop's backend: the tool endpoints an operator would run. It checks the
//! `Deskbell-Signature` of every call, as a real backend should.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::secret::verify_hmac_sha256;

/// Signatures older than this are refused, so a captured call cannot be replayed.
const MAX_SKEW_S: i64 = 300;

#[derive(Clone)]
struct Shop {
    secret: Arc<Vec<u8>>,
    clock: Arc<dyn Clock>,
    orders: Arc<Mutex<BTreeMap<u64, Value>>>,
}

pub fn router<S: Clone + Send + Sync + 'static>(
    secret: Vec<u8>,
    clock: Arc<dyn Clock>,
) -> axum::Router<S> {
    let orders = BTreeMap::from([
        (
            41,
            json!({"order_id": 41, "status": "delivered", "items": ["Espresso cups (set of 2)"], "total_eur": 24.0, "address": "Hauptstraße 5, 10115 Berlin, Germany"}),
        ),
        (
            42,
            json!({"order_id": 42, "status": "processing", "items": ["Pour-over kettle", "Paper filters"], "total_eur": 58.5, "address": "Rue de Rivoli 10, 75001 Paris, France"}),
        ),
        (
            43,
            json!({"order_id": 43, "status": "shipped", "items": ["Coffee grinder"], "total_eur": 129.0, "address": "Keizersgracht 100, 1015 Amsterdam, Netherlands", "tracking": "AC123456789NL"}),
        ),
        (
            44,
            json!({"order_id": 44, "status": "processing", "items": ["Travel mug"], "total_eur": 19.9, "address": "Via Roma 1, 00184 Rome, Italy"}),
        ),
    ]);
    let shop = Shop {
        secret: Arc::new(secret),
        clock,
        orders: Arc::new(Mutex::new(orders)),
    };
    axum::Router::new()
        .route("/demo-shop/{tool}", post(call))
        .with_state(shop)
}

async fn call(
    State(shop): State<Shop>,
    axum::extract::Path(tool): axum::extract::Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, Json<Value>) {
    if !shop.signed(&headers, &body) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "bad signature"})),
        );
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "bad body"})));
    };
    let args = &request["arguments"];
    let Some(id) = args["order_id"].as_u64() else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "order_id is required"})),
        );
    };
    let mut orders = shop.orders.lock().unwrap_or_else(|e| e.into_inner());
    let Some(order) = orders.get_mut(&id) else {
        return (
            StatusCode::OK,
            Json(json!({"found": false, "message": format!("There is no order {id}.")})),
        );
    };
    let shipped = matches!(order["status"].as_str(), Some("shipped" | "delivered"));
    match tool.as_str() {
        "lookup_order" => (StatusCode::OK, Json(order.clone())),
        "cancel_order" if shipped => (
            StatusCode::OK,
            Json(
                json!({"cancelled": false, "message": "The order has already shipped; it can be returned instead."}),
            ),
        ),
        "cancel_order" => {
            order["status"] = json!("cancelled");
            (
                StatusCode::OK,
                Json(json!({"cancelled": true, "order": order.clone()})),
            )
        }
        "change_address" if shipped => (
            StatusCode::OK,
            Json(json!({"changed": false, "message": "The order has already shipped."})),
        ),
        "change_address" => {
            let a = &args["address"];
            let text = format!(
                "{}, {} {}, {}",
                a["street"].as_str().unwrap_or(""),
                a["postal_code"].as_str().unwrap_or(""),
                a["city"].as_str().unwrap_or(""),
                a["country"].as_str().unwrap_or("")
            );
            order["address"] = json!(text);
            (
                StatusCode::OK,
                Json(json!({"changed": true, "order": order.clone()})),
            )
        }
        "refund" => {
            let amount = args["amount"].as_f64().unwrap_or(0.0);
            (
                StatusCode::OK,
                Json(json!({"refunded": true, "order_id": id, "amount": amount})),
            )
        }
        "reorder" => {
            let quantity = args["quantity"].as_u64().unwrap_or(1);
            (
                StatusCode::OK,
                Json(
                    json!({"ordered": true, "from_order": id, "quantity": quantity, "items": order["items"].clone()}),
                ),
            )
        }
        _ => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "unknown tool"})),
        ),
    }
}

impl Shop {
    /// Checks `Deskbell-Signature: t=…,v1=…` over `"<t>.<body>"`, in constant time.
    fn signed(&self, headers: &HeaderMap, body: &[u8]) -> bool {
        let Some(header) = headers
            .get("deskbell-signature")
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let mut t = None;
        let mut v1 = None;
        for part in header.split(',') {
            match part.trim().split_once('=') {
                Some(("t", value)) => t = value.parse::<i64>().ok(),
                Some(("v1", value)) => v1 = hex::decode(value).ok(),
                _ => {}
            }
        }
        let (Some(t), Some(tag)) = (t, v1) else {
            return false;
        };
        if (self.clock.now_ms() / 1000 - t).abs() > MAX_SKEW_S {
            return false;
        }
        let mut message = format!("{t}.").into_bytes();
        message.extend_from_slice(body);
        verify_hmac_sha256(&self.secret, &message, &tag)
    }
}
