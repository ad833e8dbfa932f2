//! Unit tests of the thread index: key escaping, and the claim/removal races against real
//! servers (`race`).

mod race;

#[test]
fn glob_characters_are_escaped() {
    assert_eq!(super::glob_escape("{a*b?[c]\\:"), "{a\\*b\\?\\[c\\]\\\\:");
}
