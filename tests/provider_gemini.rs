//! Gemini over HTTP against a loopback server: what the request looks like (the model in the
//! path, the key only in `x-goog-api-key`, `contents` / `functionDeclarations`), and how its
//! HTTP errors land in the shared error classes (429 with `Retry-After`, 5xx, 401/403, 400,
//! context too long).

#[path = "provider_support/mod.rs"]
mod support;

use std::time::Duration;

use agentloop::provider::http::ProviderKind;
use agentloop::ErrorKind;
use agentloop::MessageDelta;
use support::server::*;
use support::*;

const P: ProviderKind = ProviderKind::Gemini;

#[tokio::test]
async fn a_text_answer_and_the_request_it_came_from() {
    let server = Server::start(vec![Reply::Sse {
        pieces: vec![fixture("gemini_text.sse")],
        gap: Duration::ZERO,
    }])
    .await;
    let (deltas, error) = run(P, config(P, &server)).await.expect("stream opens");
    assert!(error.is_none(), "{error:?}");
    assert_eq!(text_of(&deltas), "Hello, wörld é😀!");
    assert_eq!(deltas.last(), Some(&MessageDelta::Finish));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let head = &reqs[0].head;
    assert!(
        head.starts_with("POST /v1beta/models/gemini-test:streamGenerateContent?alt=sse HTTP/1.1"),
        "{head}"
    );
    assert_eq!(reqs[0].header("x-goog-api-key").as_deref(), Some(KEY));
    assert!(
        !head.lines().next().unwrap_or("").contains(KEY),
        "no key in the URL"
    );
    assert!(reqs[0].header("authorization").is_none());
    let body = &reqs[0].body;
    assert_eq!(
        body["systemInstruction"]["parts"][0]["text"],
        "You are terse."
    );
    assert_eq!(body["contents"][0]["role"], "user");
    assert_eq!(body["contents"][0]["parts"][0]["text"], "What is 2+2?");
    let decl = &body["tools"][0]["functionDeclarations"][0];
    assert_eq!(decl["name"], "calculator");
    assert_eq!(decl["parametersJsonSchema"]["type"], "object");
}

/// Gemini's error bodies (`{"error": {"code", "message", "status"}}`) by status.
#[tokio::test]
async fn http_errors_are_classified_like_every_provider() {
    let body = |code: u16, status: &str, message: &str| {
        format!(r#"{{"error": {{"code": {code}, "message": "{message}", "status": "{status}"}}}}"#)
    };
    let cases = [
        (
            429,
            vec![("retry-after", "2".to_string())],
            body(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
            ErrorKind::RateLimited,
        ),
        (
            500,
            vec![],
            body(500, "INTERNAL", "An internal error has occurred."),
            ErrorKind::ServerError,
        ),
        (
            401,
            vec![],
            body(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."),
            ErrorKind::Authentication,
        ),
        (
            403,
            vec![],
            body(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers."),
            ErrorKind::Permission,
        ),
        (
            400,
            vec![],
            body(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."),
            ErrorKind::BadRequest,
        ),
        (
            400,
            vec![],
            body(
                400,
                "INVALID_ARGUMENT",
                "The input token count (1048577) exceeds the maximum number of tokens allowed (1048576).",
            ),
            ErrorKind::ContextOverflow,
        ),
    ];
    for (status, headers, body, kind) in cases {
        let mut headers = headers;
        headers.push(("content-type", "application/json".to_string()));
        let server = Server::start(vec![Reply::Status {
            status,
            headers,
            body,
        }])
        .await;
        let e = run(P, config(P, &server)).await.expect_err("an error");
        assert_eq!(e.kind, kind, "{status}: {}", e.message);
        assert_eq!(e.http_status, Some(status));
        assert!(!e.message.contains(KEY));
        if status == 429 {
            assert_eq!(e.retry_after_ms, Some(2000));
            assert!(e.retryable());
        }
        assert_eq!(server.requests().len(), 1, "never retried by the client");
    }
}

/// A tool choice becomes `toolConfig.functionCallingConfig`, sent only with tools.
#[test]
fn request_body_sends_each_tool_choice_only_with_tools() {
    use agentloop::model::ToolChoice;
    use agentloop::provider::gemini::request_body;
    use serde_json::json;

    let cases = [
        (ToolChoice::Auto, json!({"mode": "AUTO"})),
        (ToolChoice::None, json!({"mode": "NONE"})),
        (ToolChoice::Required, json!({"mode": "ANY"})),
        (
            ToolChoice::Tool("calc".into()),
            json!({"mode": "ANY", "allowedFunctionNames": ["calc"]}),
        ),
    ];
    for (choice, wire) in cases {
        let b = request_body(&tool_choice_request(
            true,
            with_choice(Some(choice.clone())),
        ));
        assert_eq!(b["toolConfig"]["functionCallingConfig"], wire, "{choice}");
        let b = request_body(&tool_choice_request(false, with_choice(Some(choice))));
        assert!(b.get("toolConfig").is_none(), "{b}");
    }
    let b = request_body(&tool_choice_request(true, with_choice(None)));
    assert!(
        b.get("toolConfig").is_none(),
        "no choice: the API's default"
    );
}
