//! The embedded corpus names every fixture file of `fixtures/afk-python/`, and each entry is
//! that file byte for byte, so a fixture added to the folder cannot be left out of the suite.

use std::collections::BTreeMap;
use std::path::Path;

use afk_conformance::cases::corpus::FIXTURES;

#[test]
fn embedded_corpus_is_the_fixture_folder() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/afk-python");
    let mut on_disk = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("the fixture folder") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "json") && stem != "hash-vectors" {
            let text = std::fs::read_to_string(&path).expect("a fixture file");
            on_disk.insert(stem.to_owned(), text);
        }
    }
    let embedded: BTreeMap<String, String> = FIXTURES
        .iter()
        .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
        .collect();
    assert_eq!(embedded.len(), FIXTURES.len(), "a fixture is listed twice");
    assert_eq!(
        embedded.keys().collect::<Vec<_>>(),
        on_disk.keys().collect::<Vec<_>>(),
        "the embedded list and the folder differ"
    );
    assert!(
        embedded == on_disk,
        "an embedded fixture differs from its file"
    );
    assert!(FIXTURES.len() >= 70, "only {} fixtures", FIXTURES.len());
}
