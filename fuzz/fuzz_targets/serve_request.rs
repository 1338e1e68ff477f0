//! Fuzz target `serve_request`: nibble-serve's request parsing and validation (`nibble_serve::api::ChatRequest::
//! parse`, what POST /v1/chat/completions calls on the body) on arbitrary bytes. A request either parses into one
//! that satisfies every rule the parser enforces, or is refused with a 400 naming a field; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nibble_serve::api::ChatRequest;

fuzz_target!(|body: &[u8]| {
    match ChatRequest::parse(body) {
        Ok(r) => {
            assert!(!r.model.is_empty());
            assert!(!r.messages.is_empty());
            assert!((0.0..=2.0).contains(&r.temperature), "{r:?}");
            assert!(r.top_p > 0.0 && r.top_p <= 1.0, "{r:?}");
            assert!(r.stop.len() <= 4 && r.stop.iter().all(|s| !s.is_empty()), "{r:?}");
            assert!(!r.include_usage || r.stream, "{r:?}");
            assert!(r.max_tokens.is_none_or(|t| t >= 1), "{r:?}");
        }
        Err(e) => {
            assert_eq!(e.status.as_u16(), 400, "{e:?}");
            assert!(e.param.is_some(), "{e:?}");
            assert!(!e.message.is_empty());
            serde_json::to_vec(&e.body()).expect("the error body serializes");
        }
    }
});
