//! The typed run status on the wire: records keep their `"state"` strings byte for byte, and a
//! label this version does not know, read from a stored record, is kept (not lost, no panic,
//! no `Corrupt`): the terminal short-circuit returns the stored result with it.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;

use afk_core::normalize::normalize_record;
use afk_core::runner::Outcome;
use afk_core::runner::scripted::{InvocationCounter, ScriptedLlm};
use afk_core::schema::RunStatus;
use afk_core::store::latest_key;
use afk_core::{
    MemoryStore, RunId, ThreadId,
    store::{Commit, Store},
};
use common::{agent_with, runner, script};

#[tokio::test]
async fn an_unknown_stored_status_is_kept_through_normalize_and_resume() {
    let store = Arc::new(MemoryStore::new());
    let thread = ThreadId::new("t-status").unwrap();
    let run = RunId::new("r-status").unwrap();
    let r = runner(store.clone(), true);
    let llm = ScriptedLlm::new(script());
    let agent = agent_with(llm.clone(), &InvocationCounter::new());
    let out = r
        .run_with_id(&agent, &thread, run.clone(), "go")
        .result()
        .await
        .unwrap();
    assert_eq!(out.result().unwrap().state, RunStatus::Completed);

    // The terminal record as written: typed on read, the same bytes on write.
    let key = latest_key(&run);
    let bytes = store.get(&thread, &key).await.unwrap().unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains(r#""state":"completed""#), "{text}");
    let rec = normalize_record(&bytes, &thread, &key).unwrap();
    assert_eq!(rec.to_bytes().unwrap(), bytes);

    // A newer writer's label, in the record and in its stored result.
    let odd = text.replace(r#""state":"completed""#, r#""state":"archived_by_v9""#);
    assert_ne!(odd, text);
    let rec = normalize_record(odd.as_bytes(), &thread, &key).unwrap();
    assert_eq!(
        rec.to_bytes().unwrap(),
        odd.as_bytes(),
        "written back unchanged"
    );
    let epoch = store.claim(&thread, &run).await.unwrap();
    store
        .commit(&Commit {
            thread: thread.clone(),
            run: run.clone(),
            epoch,
            puts: Vec::new(),
            latest: Some(odd.into_bytes()),
            attention: None,
        })
        .await
        .unwrap();

    let calls = llm.calls();
    let out = r.resume(&agent, &thread, &run).result().await.unwrap();
    let Outcome::Completed(result) = out else {
        panic!("a terminal record resumes to its result")
    };
    assert_eq!(result.state, RunStatus::Other("archived_by_v9".to_owned()));
    assert_eq!(result.state_snapshot.state, "archived_by_v9");
    assert_eq!(llm.calls(), calls, "nothing re-executed");
}
