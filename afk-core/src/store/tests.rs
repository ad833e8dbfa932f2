//! Unit tests of the store module: key helpers, and what the wrappers forward (`forward`).

mod forward;

use super::*;

#[test]
fn run_of_key_finds_the_run() {
    assert_eq!(run_of_key("checkpoint:r1:3:pre_llm"), Some("r1"));
    assert_eq!(run_of_key("checkpoint:r1:latest"), Some("r1"));
    assert_eq!(run_of_key("effect:r1:2:call_1"), Some("r1"));
    assert_eq!(run_of_key("messages:r1:00000000000000000003"), Some("r1"));
    assert_eq!(run_of_key("run:r1"), Some("r1"));
    assert_eq!(run_of_key("other:r1"), None);
    assert_eq!(run_of_key("checkpoint::x"), None);
    assert_eq!(run_of_key("run:"), None);
}
