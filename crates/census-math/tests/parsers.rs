//! Every parser of outside input, fed anything: an error, never a panic.

use census_math::{Band, CounterKind, Stage};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn band_parse_never_panics(text in any::<String>()) {
        let _ = Band::parse(&text);
    }

    /// Near misses of the accepted form: 27 characters from a small alphabet,
    /// so that most inputs reach the sudoku checks, not the length check.
    #[test]
    fn near_bands_are_accepted_only_when_valid(text in "[0-9a/ ]{20,30}") {
        if let Ok(band) = Band::parse(&text) {
            prop_assert_eq!(Band::parse(&band.to_string()).unwrap(), band);
        }
    }

    #[test]
    fn stage_and_counter_names_never_panic(text in any::<String>()) {
        let _ = text.parse::<Stage>();
        let _ = text.parse::<CounterKind>();
    }
}
