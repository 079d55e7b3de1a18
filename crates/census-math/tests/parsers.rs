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

/// Census descriptions and job keys of every kind: an error, never a panic.
mod census_kinds {
    use census_math::census::Census;
    use proptest::prelude::*;

    /// Built once: the 9x9 counter's tables take a while.
    fn counters() -> &'static [census_math::census::JobCounter] {
        static COUNTERS: std::sync::OnceLock<Vec<census_math::census::JobCounter>> = std::sync::OnceLock::new();
        COUNTERS.get_or_init(|| {
            ["sudoku", "essentially-different", "shape boxes=2x2", "shape boxes=2x4"]
                .iter()
                .map(|text| text.parse::<Census>().unwrap().job_counter())
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn census_descriptions_never_panic(
            kind in prop::sample::select(vec!["sudoku", "essentially-different", "shape", ""]),
            parameters in "( ?[a-z]{0,8}=?[0-9a-zx-]{0,6}){0,3}",
        ) {
            if let Ok(census) = format!("{kind} {parameters}").parse::<Census>() {
                prop_assert_eq!(census.to_string().parse::<Census>().unwrap(), census);
            }
        }

        #[test]
        fn job_keys_never_panic(
            prefix in prop::sample::select(vec!["", "2x2:", "2x4:", "ed1 ", "123456789456789123789123456 "]),
            tail in ".{0,40}",
        ) {
            for counter in counters() {
                let _ = counter.count(&format!("{prefix}{tail}"));
            }
        }
    }
}
