//! The coordinator's parsers of outside input, fed anything: an error,
//! never a panic. (Request fields are covered by tests/hostile.rs.)

use census_coordinator::auth::{hash_token, parse_token};
use census_coordinator::limits;
use census_proto::client::ClientConfig;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tokens(text in any::<String>()) {
        if parse_token(&text).is_ok() {
            prop_assert!(text.starts_with("census_") && text.len() == 71);
        }
        prop_assert_eq!(hash_token(&text).len(), 64);
    }

    #[test]
    fn token_like_text(text in "census_[0-9a-fA-Fg]{60,70}") {
        let _ = parse_token(&text);
    }

    #[test]
    fn elapsed_times(seconds in any::<f64>()) {
        if let Ok(duration) = limits::elapsed(seconds) {
            prop_assert!(duration.as_secs_f64() <= limits::MAX_ELAPSED_SECONDS);
        }
    }

    /// Coordinator URLs and tokens as a client is given them.
    #[test]
    fn client_settings(url in any::<String>(), token in any::<String>()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let _guard = runtime.enter();
        let _ = census_proto::client::connect_lazy(&ClientConfig { url, token: Some(token), ..ClientConfig::default() });
    }
}
