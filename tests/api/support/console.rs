//! An operator's side of the tests: accounts made through the library, and a
//! signed-in client that carries the session cookie and the CSRF header as the
//! console does.

use reqwest::Method;
use serde_json::Value;

use super::{Reply, TestApp, read};
use deskbell::states::OperatorRole;

pub const PASSWORD: &str = "operator-password-0123";

/// A signed-in operator: the session cookie and its CSRF token.
pub struct Console {
    pub base: String,
    pub http: reqwest::Client,
    pub cookie: String,
    pub csrf: String,
}

impl TestApp {
    pub async fn add_operator(&self, email: &str, role: OperatorRole) {
        deskbell::operator::accounts::add_operator(
            &self.app.store,
            email,
            role,
            PASSWORD,
            self.clock_now(),
        )
        .await
        .unwrap();
    }

    pub fn clock_ms(&self) -> i64 {
        self.clock_now()
    }

    fn clock_now(&self) -> i64 {
        use deskbell::clock::Clock;
        self.clock.now_ms()
    }

    /// `POST /v1/operator/session`.
    pub async fn sign_in(&self, email: &str, password: &str) -> Reply {
        let req = self
            .http
            .post(format!("{}/v1/operator/session", self.base))
            .json(&serde_json::json!({"email": email, "password": password}));
        read(req.send().await.unwrap()).await
    }

    /// A new operator of `role`, signed in.
    pub async fn console(&self, role: OperatorRole) -> Console {
        let email = format!("{}-{}@example.test", role.as_str(), uuid_like());
        self.add_operator(&email, role).await;
        let r = self.sign_in(&email, PASSWORD).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        Console {
            base: self.base.clone(),
            http: self.http.clone(),
            cookie: session_cookie(&r),
            csrf: r.json["csrf"].as_str().unwrap().to_string(),
        }
    }

    /// A request with a bearer token and no cookie.
    pub async fn with_token(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        read(req.send().await.unwrap()).await
    }
}

fn uuid_like() -> String {
    deskbell::ids::new_id("o")[2..14].to_string()
}

/// The `name=value` of the session cookie a sign-in set.
pub fn session_cookie(r: &Reply) -> String {
    let set = r
        .headers
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap();
    set.split(';').next().unwrap().to_string()
}

impl Console {
    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None, true).await
    }

    /// A state-changing call with the CSRF header, as the console sends it.
    pub async fn send(&self, method: Method, path: &str, body: Value) -> Reply {
        self.call(method, path, Some(body), true).await
    }

    /// A call with the cookie; `csrf` says whether the CSRF header goes too.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>, csrf: bool) -> Reply {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("cookie", &self.cookie);
        if csrf {
            req = req.header("x-deskbell-csrf", &self.csrf);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        read(req.send().await.unwrap()).await
    }

    /// The text of a download.
    pub async fn download(&self, path: &str) -> (u16, reqwest::header::HeaderMap, String) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap())
    }

    pub async fn patch_tool(&self, site: &str, tool: &str, body: Value) -> Reply {
        self.send(
            Method::PATCH,
            &format!("/v1/operator/tools/{site}/{tool}"),
            body,
        )
        .await
    }

    pub async fn tool(&self, site: &str, name: &str) -> Value {
        let r = self.get(&format!("/v1/operator/tools?site={site}")).await;
        assert_eq!(r.status, 200, "{:?}", r.json);
        r.json["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no tool {name}"))
    }
}
