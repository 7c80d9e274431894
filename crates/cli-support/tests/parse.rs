//! Property tests of the command-line programs' shared parsers: whatever the text, a value or
//! a message, never a panic.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn a_duration_parses_or_says_why(text in prop_oneof![
        "-?[0-9]{0,25}(ns|us|ms|s|m|h|d|w|y|months|)? ?([0-9]{0,5}(ms|s))?",
        any::<String>(),
    ]) {
        match cli_support::parse_duration(&text) {
            Ok(_) => prop_assert!(!text.trim_start().starts_with('-')),
            Err(message) => prop_assert!(!message.is_empty()),
        }
    }
}
