//! Paging: a store with more threads, and a thread with more runs, than a page holds. The
//! pages of `/` and `/threads/T` followed by their "Next page" links, and those of the API
//! followed by `next_cursor` / `next_after`, show every thread and run exactly once, never more
//! than the page's limit at a time; a page of the API is the document of `afk threads
//! --page-size` / `afk runs --page-size`.

#![allow(clippy::unwrap_used)]

use serde_json::Value;

use super::{Server, Session, TOKEN, rocks};
use crate::cli_ops::{paused_run, uncertain_run};
use crate::common::afk_in;

/// An attribute's value with the escaped `&` (askama writes `&#38;`) undone.
fn unescape(href: &str) -> String {
    href.replace("&#38;", "&").replace("&amp;", "&")
}

/// Every `href` in `page` that starts with `prefix`, in order.
fn links(page: &str, prefix: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .map(|rest| unescape(rest.split('"').next().unwrap()))
        .filter(|href| href.starts_with(prefix))
        .collect()
}

/// The link marked `rel="next"`.
fn next_link(page: &str) -> Option<String> {
    let at = page.find("\" rel=\"next\"")?;
    let start = page[..at].rfind("href=\"")? + 6;
    Some(unescape(&page[start..at]))
}

/// Follow the pages from `first`: the rows each page listed (the first cell's link, after
/// `row`).
fn walk_html(me: &Session<'_>, first: &str, row: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut path = Some(first.to_owned());
    while let Some(p) = path {
        let r = me.get(&p);
        assert_eq!(r.status, 200, "{p}: {}", r.body);
        let rows: Vec<String> = r
            .body
            .split("<tr><td><a href=\"")
            .skip(1)
            .filter_map(|rest| rest.strip_prefix(row))
            .map(|rest| rest.split('"').next().unwrap().to_owned())
            .collect();
        pages.push(rows);
        path = next_link(&r.body);
        assert!(pages.len() < 20, "the pages do not end");
    }
    pages
}

/// Follow the API's pages from `first`: the documents.
fn walk_api(s: &Server, first: &str, cursor: &str, param: &str) -> Vec<Value> {
    let bearer = format!("Bearer {TOKEN}");
    let mut docs: Vec<Value> = Vec::new();
    let mut path = first.to_owned();
    loop {
        let r = s.get(&path, &[("Authorization", &bearer)]);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let doc = r.json();
        let next = doc[cursor].as_str().map(str::to_owned);
        docs.push(doc);
        match next {
            Some(c) => path = format!("{first}&{param}={}", encode(&c)),
            None => return docs,
        }
        assert!(docs.len() < 20, "the pages do not end");
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn names(doc: &Value, list: &str, field: &str) -> Vec<String> {
    doc[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[field].as_str().unwrap().to_owned())
        .collect()
}

/// Every item once, and more than one page each at most `limit` long.
fn check_pages(pages: &[Vec<String>], limit: usize, mut expected: Vec<String>) {
    assert!(pages.len() > 1, "one page: {pages:?}");
    assert!(pages.iter().all(|p| p.len() <= limit), "{pages:?}");
    let mut seen: Vec<String> = pages.concat();
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "{pages:?}");
}

#[test]
fn threads_and_runs_are_paged_in_html_and_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let url = rocks(dir.path());
    let threads: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    for t in &threads[1..] {
        paused_run(&url, t, "r");
    }
    let runs: Vec<String> = (0..5).map(|i| format!("r{i}")).collect();
    for (i, r) in runs.iter().enumerate() {
        if i % 2 == 0 {
            paused_run(&url, "t0", r);
        } else {
            uncertain_run(&url, "t0", r);
        }
    }
    let paused: Vec<String> = ["r0", "r2", "r4"].map(str::to_owned).to_vec();
    let s = Server::start(&url, &[]);
    let me = s.session();

    let pages = walk_html(&me, "/?limit=2", "/threads/");
    check_pages(&pages, 2, threads.clone());
    let pages = walk_html(&me, "/threads/t0?limit=2", "/threads/t0/runs/");
    check_pages(&pages, 2, runs.clone());
    assert_eq!(pages.concat(), runs, "not in run order");
    let pages = walk_html(&me, "/threads/t0?state=paused&limit=2", "/threads/t0/runs/");
    check_pages(&pages, 2, paused.clone());
    // The first page is one link away from any other.
    let second = me.get("/threads/t0?after=r1&limit=2");
    assert_eq!(
        links(&second.body, "/threads/t0?limit=2"),
        ["/threads/t0?limit=2"]
    );

    let docs = walk_api(&s, "/api/threads?limit=2", "next_cursor", "cursor");
    let pages: Vec<Vec<String>> = docs.iter().map(|d| names(d, "threads", "thread")).collect();
    check_pages(&pages, 2, threads);
    let first_threads = docs[0].clone();
    let docs = walk_api(&s, "/api/threads/t0/runs?limit=2", "next_after", "after");
    let pages: Vec<Vec<String>> = docs.iter().map(|d| names(d, "runs", "run")).collect();
    check_pages(&pages, 2, runs);
    assert!(docs.iter().all(|d| d["total_runs"] == 5), "{docs:?}");
    let second_runs = docs[1].clone();
    let docs = walk_api(
        &s,
        "/api/threads/t0/runs?state=paused&limit=2",
        "next_after",
        "after",
    );
    let pages: Vec<Vec<String>> = docs.iter().map(|d| names(d, "runs", "run")).collect();
    check_pages(&pages, 2, paused);
    // A bad limit is refused with the error document.
    let bearer = format!("Bearer {TOKEN}");
    let r = s.get("/api/threads?limit=0", &[("Authorization", &bearer)]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"]["kind"], "invalid_input");
    drop(me);
    s.stop();

    // The API's pages are the documents of the commands' pages.
    let cli = |args: &[&str]| -> Value {
        let mut all = vec!["--store", url.as_str(), "--json"];
        all.extend_from_slice(args);
        let out = afk_in(dir.path(), &all);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        serde_json::from_str(&out.stdout).unwrap()
    };
    assert_eq!(cli(&["threads", "--page-size", "2"]), first_threads);
    assert_eq!(second_runs["runs"][0]["run"], "r2", "{second_runs}");
    let args = [
        "runs",
        "--thread",
        "t0",
        "--page-size",
        "2",
        "--after",
        "r1",
    ];
    assert_eq!(by_the_clock(cli(&args)), by_the_clock(second_runs));
}

/// A runs document without what depends on the moment it was read (a lease's remaining
/// time).
fn by_the_clock(mut doc: Value) -> Value {
    for run in doc["runs"].as_array_mut().unwrap() {
        if let Some(a) = run["attention"].as_object_mut() {
            a.remove("lease_remaining_ms");
        }
    }
    doc
}
