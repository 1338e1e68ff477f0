//! The OpenAI chat-completions request as this server accepts it, and OpenAI-style errors.
//! Request fields are checked one by one so an error names the field (`param`) and the bad value.

use http::StatusCode;
use serde_json::{Value, json};

/// One message of a request, its role normalised ("developer" is OpenAI's newer name for "system"). The server
/// hands these to the chat template as `nibble_llama::chat::Message`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.into(), content: content.into() }
    }
}

/// An error answered as OpenAI does: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a Retry-After header (busy).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: Some(param.into()),
            code: None,
            retry_after: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn not_found(message: impl Into<String>, param: Option<&str>, code: &'static str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(Into::into),
            code: Some(code),
            retry_after: None,
        }
    }

    pub fn busy(message: impl Into<String>, retry_after: u64) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            kind: "server_busy",
            message: message.into(),
            param: None,
            code: Some("queue_full"),
            retry_after: Some(retry_after),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

#[cfg(feature = "server")]
impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> axum::response::Response {
        use axum::http::{HeaderValue, header};
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// A parsed, checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    pub stream: bool,
    pub include_usage: bool,
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub stop: Vec<String>,
    pub seed: Option<u64>,
}

impl ChatRequest {
    /// Checks `body` (the raw JSON bytes).
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid("body", format!("the request body is not valid JSON: {e}")))?;
        let obj = v.as_object().ok_or_else(|| ApiError::invalid("body", "the request body must be a JSON object"))?;
        const KNOWN: &[&str] = &[
            "model",
            "messages",
            "stream",
            "stream_options",
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
            "stop",
            "seed",
            "n",
            "user",
        ];
        // OpenAI arguments many clients send with their no-effect value: accepted at exactly that value,
        // refused by name at any other (this server does not implement them).
        let neutral = |k: &str, v: &Value| match k {
            "frequency_penalty" | "presence_penalty" => v.is_null() || v.as_f64() == Some(0.0),
            "logprobs" | "parallel_tool_calls" | "store" => v.is_null() || v == &Value::Bool(false),
            "response_format" => v.is_null() || v.get("type").and_then(Value::as_str) == Some("text"),
            "metadata" => true,
            _ => false,
        };
        if let Some((k, v)) = obj.iter().find(|(k, v)| !KNOWN.contains(&k.as_str()) && !neutral(k, v)) {
            let why = if neutral(k, &Value::Null) {
                format!("`{k}` = {v} is not supported by this server (only its default)")
            } else {
                format!("unrecognized request argument `{k}` (this server accepts: {})", KNOWN.join(", "))
            };
            return Err(ApiError::invalid(k, why));
        }
        let model = match obj.get("model") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(other) => return Err(ApiError::invalid("model", format!("`model` must be a string, got {other}"))),
            None => return Err(ApiError::invalid("model", "`model` is required")),
        };
        let messages = parse_messages(obj.get("messages"))?;
        let stream = opt_bool(obj.get("stream"), "stream")?.unwrap_or(false);
        let include_usage = match obj.get("stream_options") {
            None | Some(Value::Null) => false,
            Some(Value::Object(o)) => {
                opt_bool(o.get("include_usage"), "stream_options.include_usage")?.unwrap_or(false)
            }
            Some(other) => {
                return Err(ApiError::invalid(
                    "stream_options",
                    format!("`stream_options` must be an object, got {other}"),
                ));
            }
        };
        if include_usage && !stream {
            return Err(ApiError::invalid("stream_options", "`stream_options` is only allowed with `stream: true`"));
        }
        let max_tokens = match (obj.get("max_completion_tokens"), obj.get("max_tokens")) {
            (Some(v), _) if !v.is_null() => Some(positive_int(v, "max_completion_tokens")?),
            (_, Some(v)) if !v.is_null() => Some(positive_int(v, "max_tokens")?),
            _ => None,
        };
        let temperature = opt_number(obj.get("temperature"), "temperature")?.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(ApiError::invalid("temperature", format!("`temperature` {temperature} must be in [0, 2]")));
        }
        let top_p = opt_number(obj.get("top_p"), "top_p")?.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid("top_p", format!("`top_p` {top_p} must be in (0, 1]")));
        }
        let stop = match obj.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.len() <= 4 => a
                .iter()
                .map(|x| x.as_str().map(String::from))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ApiError::invalid("stop", "`stop` must be a string or an array of strings"))?,
            Some(Value::Array(_)) => return Err(ApiError::invalid("stop", "`stop` takes at most 4 sequences")),
            Some(other) => {
                return Err(ApiError::invalid(
                    "stop",
                    format!("`stop` must be a string or an array of strings, got {other}"),
                ));
            }
        };
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid("stop", "`stop` sequences must not be empty"));
        }
        let seed = match obj.get("seed") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .map(|s| s as u64)
                    .or_else(|| v.as_u64())
                    .ok_or_else(|| ApiError::invalid("seed", format!("`seed` must be an integer, got {v}")))?,
            ),
        };
        match obj.get("n") {
            None | Some(Value::Null) => {}
            Some(v) if v.as_u64() == Some(1) => {}
            Some(v) => {
                return Err(ApiError::invalid("n", format!("`n` {v}: this server generates one choice (n = 1)")));
            }
        }
        match obj.get("user") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(v) => return Err(ApiError::invalid("user", format!("`user` must be a string, got {v}"))),
        }
        Ok(Self { model, messages, stream, include_usage, max_tokens, temperature, top_p, stop, seed })
    }
}

fn parse_messages(v: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let arr = match v {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "`messages` must not be empty")),
        Some(other) => return Err(ApiError::invalid("messages", format!("`messages` must be an array, got {other}"))),
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
    };
    arr.iter()
        .enumerate()
        .map(|(i, m)| {
            let p = |f: &str| format!("messages[{i}].{f}");
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid(&p("role"), format!("messages[{i}] needs a string `role`")))?;
            if !["system", "developer", "user", "assistant"].contains(&role) {
                return Err(ApiError::invalid(
                    &p("role"),
                    format!("messages[{i}].role `{role}` is not supported (system, developer, user, assistant)"),
                ));
            }
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                // [{"type": "text", "text": "..."}, ...]: the text parts, concatenated
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| {
                        match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => Ok(t),
                            _ => Err(ApiError::invalid(
                                &p("content"),
                                format!("messages[{i}].content: only text parts are supported, got {part}"),
                            )),
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .concat(),
                Some(other) => {
                    return Err(ApiError::invalid(
                        &p("content"),
                        format!("messages[{i}].content must be a string, got {other}"),
                    ));
                }
                None => return Err(ApiError::invalid(&p("content"), format!("messages[{i}] needs `content`"))),
            };
            // "developer" is OpenAI's newer name for the system role.
            Ok(Message::new(if role == "developer" { "system" } else { role }, &content))
        })
        .collect()
}

fn opt_bool(v: Option<&Value>, name: &str) -> Result<Option<bool>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(ApiError::invalid(name, format!("`{name}` must be a boolean, got {other}"))),
    }
}

fn opt_number(v: Option<&Value>, name: &str) -> Result<Option<f32>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64().map(|x| x as f32)),
        Some(other) => Err(ApiError::invalid(name, format!("`{name}` must be a number, got {other}"))),
    }
}

fn positive_int(v: &Value, name: &str) -> Result<usize, ApiError> {
    v.as_u64()
        .filter(|&n| n >= 1)
        .map(|n| n as usize)
        .ok_or_else(|| ApiError::invalid(name, format!("`{name}` must be an integer >= 1, got {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> ApiError {
        ChatRequest::parse(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn parses_a_full_request() {
        let r = ChatRequest::parse(
            br#"{"model": "m", "messages": [{"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]}],
                "stream": true, "stream_options": {"include_usage": true}, "max_tokens": 5, "temperature": 0,
                "top_p": 0.5, "stop": ["\n"], "seed": 3, "n": 1}"#,
        )
        .unwrap();
        assert_eq!(r.messages, vec![Message::new("system", "Be brief."), Message::new("user", "Hi!")]);
        assert!(r.stream && r.include_usage);
        assert_eq!((r.max_tokens, r.temperature, r.top_p, r.seed), (Some(5), 0.0, 0.5, Some(3)));
        assert_eq!(r.stop, vec!["\n".to_string()]);
    }

    #[test]
    fn arguments_clients_send_at_their_default_are_accepted_and_refused_otherwise() {
        let m = r#""model": "m", "messages": [{"role": "user", "content": "x"}]"#;
        let ok = format!(
            r#"{{{m}, "frequency_penalty": 0, "presence_penalty": 0.0, "logprobs": false, "store": false,
                "response_format": {{"type": "text"}}, "parallel_tool_calls": null, "metadata": {{"a": "b"}}}}"#
        );
        assert!(ChatRequest::parse(ok.as_bytes()).is_ok());
        for (arg, param) in [
            (r#""frequency_penalty": 0.5"#, "frequency_penalty"),
            (r#""logprobs": true"#, "logprobs"),
            (r#""response_format": {"type": "json_object"}"#, "response_format"),
            (r#""tools": []"#, "tools"),
        ] {
            let e = err(&format!("{{{m}, {arg}}}"));
            assert_eq!(e.param.as_deref(), Some(param), "{arg}: {}", e.message);
            assert!(e.message.contains(param), "{}", e.message);
        }
        assert!(err(&format!(r#"{{{m}, "presence_penalty": 1}}"#)).message.contains("only its default"));
    }

    #[test]
    fn defaults() {
        let r = ChatRequest::parse(br#"{"model": "m", "messages": [{"role": "user", "content": "x"}]}"#).unwrap();
        assert!(!r.stream && r.max_tokens.is_none() && r.stop.is_empty() && r.seed.is_none());
        assert_eq!((r.temperature, r.top_p), (1.0, 1.0));
    }

    #[test]
    fn errors_name_the_field() {
        let m = r#""messages": [{"role": "user", "content": "x"}]"#;
        for (body, param) in [
            ("{".to_string(), "body"),
            ("[1]".to_string(), "body"),
            (format!(r#"{{{m}}}"#), "model"),
            (format!(r#"{{"model": 3, {m}}}"#), "model"),
            (r#"{"model": "m", "messages": []}"#.to_string(), "messages"),
            (r#"{"model": "m", "messages": [{"role": "tool", "content": "x"}]}"#.to_string(), "messages[0].role"),
            (r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#.to_string(), "messages[0].content"),
            (format!(r#"{{"model": "m", {m}, "max_tokens": 0}}"#), "max_tokens"),
            (format!(r#"{{"model": "m", {m}, "temperature": "hot"}}"#), "temperature"),
            (format!(r#"{{"model": "m", {m}, "temperature": 3}}"#), "temperature"),
            (format!(r#"{{"model": "m", {m}, "top_p": 0}}"#), "top_p"),
            (format!(r#"{{"model": "m", {m}, "stop": [1]}}"#), "stop"),
            (format!(r#"{{"model": "m", {m}, "stop": ["a","b","c","d","e"]}}"#), "stop"),
            (format!(r#"{{"model": "m", {m}, "n": 2}}"#), "n"),
            (format!(r#"{{"model": "m", {m}, "seed": "x"}}"#), "seed"),
            (format!(r#"{{"model": "m", {m}, "stream": "yes"}}"#), "stream"),
            (format!(r#"{{"model": "m", {m}, "stream_options": {{"include_usage": true}}}}"#), "stream_options"),
            (format!(r#"{{"model": "m", {m}, "frequency_penalty": 1}}"#), "frequency_penalty"),
        ] {
            let e = err(&body);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            let b = e.body();
            assert_eq!(b["error"]["type"], "invalid_request_error");
            assert!(b["error"]["message"].as_str().unwrap().len() > 10);
        }
    }
}
