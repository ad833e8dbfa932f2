//! A run's entry in the store's index of runs that need attention (the runner's
//! [`RunMark`]), as `runs` and `show` display it: where the run stands, who holds it and until
//! when, when a suspended run may go on, and whether it waits for a human. A store without the
//! index (`Capabilities::attention` off) has no entries: the commands show nothing of them, and
//! their output is what it was before the index existed.
//!
//! Lease times are compared with this machine's clock; the entry's times are those of the
//! process that wrote it. A worker allows its `lease_skew` on top before it takes a run over,
//! so a lease shown as expired a moment ago may still be honoured.
//!
//! JSON (the `"attention"` field of a run in `runs`, and of the document in `show`; absent for
//! a run without an entry): `{"state", "owner", "lease_until_ms", "lease_until",
//! "lease_remaining_ms", "not_before_ms", "not_before", "waiting_for_human", "agent",
//! "version", "depth", "epoch", "updated_ms"}`. `state` is the entry's (`running`, `stopped`,
//! `paused`, `uncertain`, `ready`, `suspended`, `mismatch`); `owner` the runner holding the run (null when
//! nobody does); `lease_until_ms` and `lease_until` (UTC) the lease's end, null without a
//! lease; `lease_remaining_ms` how long it still holds by this machine's clock, negative once
//! it has expired; `not_before_ms` and `not_before` when a suspended run may go on (null
//! otherwise); `waiting_for_human` `"decision"` (paused), `"settlement"` (uncertain) or
//! `"deployment"` (mismatch: a resume by another agent than the run's was refused; `agent` and
//! `version` name the run's), null when no human is needed.

use afk_core::schema::{MarkState, RunMark};
use afk_core::store::Store;
use afk_core::{ErrorKind, Result, RunId, ThreadId};
use serde::Serialize;

use super::output::utc;

/// A run's entry as the console shows it (see the module docs for the fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// The entry's state.
    pub state: String,
    /// The runner holding the run.
    pub owner: Option<String>,
    /// The lease's end (ms since the epoch).
    pub lease_until_ms: Option<u64>,
    /// The lease's end as a UTC timestamp.
    pub lease_until: Option<String>,
    /// How long the lease still holds at the time of reading; negative once expired.
    pub lease_remaining_ms: Option<i64>,
    /// When a suspended run may go on (ms since the epoch).
    pub not_before_ms: Option<u64>,
    /// The same as a UTC timestamp.
    pub not_before: Option<String>,
    /// What a human has to give: `decision` or `settlement`.
    pub waiting_for_human: Option<&'static str>,
    /// The agent that runs it.
    pub agent: String,
    /// That agent's declared version.
    pub version: Option<String>,
    /// 0 for a top-level run, more for a subagent's child run.
    pub depth: u32,
    /// The claim epoch the entry was written under.
    pub epoch: u64,
    /// When the entry was written (ms since the epoch).
    pub updated_ms: u64,
    /// The time of reading, for the text (not in JSON).
    #[serde(skip)]
    now_ms: u64,
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether `store` keeps the index at all (asked once per command).
pub fn has_index(store: &dyn Store) -> bool {
    store.capabilities().attention
}

/// The entry of `run`, read at `now_ms`: `None` when the run has none (finished, or never
/// committed) and when the store keeps no index (`Unsupported`). Bytes that are not a runner's
/// entry read as none too.
pub async fn entry_of(
    store: &dyn Store,
    thread: &ThreadId,
    run: &RunId,
    now_ms: u64,
) -> Result<Option<Entry>> {
    match store.attention(thread, run).await {
        Ok(Some(bytes)) => Ok(RunMark::decode(&bytes).map(|m| Entry::new(&m, now_ms))),
        Ok(None) => Ok(None),
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a human has to give a run whose entry is in `state`, if one has to.
fn waiting_for(state: MarkState) -> Option<&'static str> {
    match state {
        MarkState::Paused => Some("decision"),
        MarkState::Uncertain => Some("settlement"),
        MarkState::Mismatch => Some("deployment"),
        _ => None,
    }
}

/// `ms` as a short span: `40s`, `4m05s`, `3h07m`, `2d05h`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn signed_diff(a: u64, b: u64) -> i64 {
    if a >= b {
        i64::try_from(a - b).unwrap_or(i64::MAX)
    } else {
        i64::try_from(b - a).map_or(i64::MIN, |d| -d)
    }
}

impl Entry {
    /// The view of `mark` read at `now_ms`.
    pub fn new(mark: &RunMark, now_ms: u64) -> Entry {
        let lease = (mark.lease_until_ms > 0).then_some(mark.lease_until_ms);
        let not_before = (mark.state == MarkState::Suspended && mark.not_before_ms > 0)
            .then_some(mark.not_before_ms);
        Entry {
            state: mark.state.as_str().to_owned(),
            owner: mark.owner.clone(),
            lease_until_ms: lease,
            lease_until: lease.map(utc),
            lease_remaining_ms: lease.map(|l| signed_diff(l, now_ms)),
            not_before_ms: not_before,
            not_before: not_before.map(utc),
            waiting_for_human: waiting_for(mark.state),
            agent: mark.agent.clone(),
            version: mark.version.clone(),
            depth: mark.depth,
            epoch: mark.epoch,
            updated_ms: mark.updated_ms,
            now_ms,
        }
    }

    /// Whether a runner holds the run (the entry is `running`: it has a lease).
    fn held(&self) -> bool {
        self.lease_until_ms.is_some()
    }

    /// The owner (`worker-a`); in parentheses when it let go of the run (`(worker-a)`: it
    /// wrote the entry, paused or suspended the run, and holds no lease); `-` without one.
    pub fn owner_text(&self) -> String {
        match &self.owner {
            Some(o) if self.held() => o.clone(),
            Some(o) => format!("({o})"),
            None => "-".to_owned(),
        }
    }

    /// The lease by this machine's clock: `29s left`, `expired 40s ago`, or `-` without one.
    pub fn lease_text(&self) -> String {
        match self.lease_remaining_ms {
            None => "-".to_owned(),
            Some(left) if left >= 0 => format!("{} left", span(left.unsigned_abs())),
            Some(left) => format!("expired {} ago", span(left.unsigned_abs())),
        }
    }

    /// What the entry means for the operator, or `""` when a live runner holds the run.
    pub fn note(&self) -> String {
        if self.waiting_for_human == Some("deployment") {
            let version = self.version.as_deref().unwrap_or("(none)");
            return format!(
                "waiting for a human: a resume by another agent was refused; deploy agent '{}' \
                 version {version}, or one declaring that version compatible",
                self.agent
            );
        }
        if let Some(what) = self.waiting_for_human {
            let cmd = if what == "decision" {
                "afk decide"
            } else {
                "afk settle"
            };
            return format!("waiting for a human: a {what} (`{cmd}`)");
        }
        match self.state.as_str() {
            "running" if self.lease_remaining_ms.is_some_and(|l| l < 0) => {
                "its runner stopped renewing the lease: a worker takes it over".to_owned()
            }
            "stopped" => "stopped without an ending: a worker resumes it".to_owned(),
            "ready" => "answered by a human: a worker continues it".to_owned(),
            "suspended" => match self.not_before_ms {
                Some(t) if t > self.now_ms => format!(
                    "suspended until {} (in {}): then a worker resumes it",
                    utc(t),
                    span(t - self.now_ms)
                ),
                _ => "suspended, due now: a worker resumes it".to_owned(),
            },
            _ => String::new(),
        }
    }

    /// The `show` lines (`entry:` and what it means).
    pub fn lines(&self) -> Vec<String> {
        let mut head = format!("entry:    {}", self.state);
        match &self.owner {
            Some(o) if self.held() => head.push_str(&format!(", owner {o}")),
            Some(o) => head.push_str(&format!(", let go by {o}")),
            None => head.push_str(", no owner"),
        }
        if let (Some(until), Some(_)) = (self.lease_until_ms, self.lease_remaining_ms) {
            head.push_str(&format!(", lease {} ({})", self.lease_text(), utc(until)));
        }
        head.push_str(&format!(", epoch {}", self.epoch));
        if self.depth > 0 {
            head.push_str(&format!(
                ", child run (depth {}): its parent resumes it",
                self.depth
            ));
        }
        let mut out = vec![head];
        let note = self.note();
        if !note.is_empty() {
            out.push(format!("          {note}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn mark(state: MarkState) -> RunMark {
        RunMark {
            state,
            owner: Some("worker-a".into()),
            lease_until_ms: NOW + 29_400,
            not_before_ms: 0,
            agent: "helpdesk".into(),
            version: Some("2".into()),
            depth: 0,
            parent: None,
            updated_ms: NOW - 600,
            epoch: 3,
            refused: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn a_held_run_shows_its_owner_and_the_time_left() {
        let e = Entry::new(&mark(MarkState::Running), NOW);
        assert_eq!(e.owner_text(), "worker-a");
        assert_eq!(e.lease_text(), "29s left");
        assert_eq!(e.note(), "");
        assert_eq!(
            e.lines(),
            [
                "entry:    running, owner worker-a, lease 29s left (2027-01-15T08:00:29.400Z), epoch 3"
            ]
        );
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["lease_until"], "2027-01-15T08:00:29.400Z");
        assert_eq!(j["lease_until_ms"], NOW + 29_400);
        assert_eq!(j["lease_remaining_ms"], 29_400);
        assert_eq!(j["waiting_for_human"], serde_json::Value::Null);
        assert!(j.get("now_ms").is_none(), "{j}");
    }

    #[test]
    fn an_expired_lease_says_how_long_ago() {
        let e = Entry::new(&mark(MarkState::Running), NOW + 70_000);
        assert_eq!(e.lease_text(), "expired 40s ago");
        assert_eq!(e.lease_remaining_ms, Some(-40_600));
        assert!(e.note().contains("a worker takes it over"), "{}", e.note());
        let long = Entry::new(&mark(MarkState::Running), NOW + 2 * 86_400_000);
        assert_eq!(long.lease_text(), "expired 1d23h ago");
    }

    #[test]
    fn paused_and_uncertain_runs_wait_for_a_human() {
        let mut m = mark(MarkState::Paused);
        m.lease_until_ms = 0;
        let e = Entry::new(&m, NOW);
        assert_eq!(e.waiting_for_human, Some("decision"));
        assert_eq!(e.lease_text(), "-");
        assert_eq!(e.owner_text(), "(worker-a)");
        assert_eq!(
            e.lines(),
            [
                "entry:    paused, let go by worker-a, epoch 3",
                "          waiting for a human: a decision (`afk decide`)"
            ]
        );
        m.owner = None;
        assert_eq!(Entry::new(&m, NOW).owner_text(), "-");
        m.state = MarkState::Uncertain;
        let e = Entry::new(&m, NOW);
        assert_eq!(e.waiting_for_human, Some("settlement"));
        assert_eq!(e.note(), "waiting for a human: a settlement (`afk settle`)");
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["waiting_for_human"], "settlement");
        assert_eq!(j["lease_until"], serde_json::Value::Null);
        m.state = MarkState::Mismatch;
        let e = Entry::new(&m, NOW);
        assert_eq!(e.waiting_for_human, Some("deployment"));
        assert_eq!(
            e.note(),
            "waiting for a human: a resume by another agent was refused; deploy agent \
             'helpdesk' version 2, or one declaring that version compatible"
        );
    }

    #[test]
    fn a_suspended_run_shows_its_not_before_time() {
        let mut m = mark(MarkState::Suspended);
        m.owner = None;
        m.lease_until_ms = 0;
        m.not_before_ms = NOW + 25_000;
        let e = Entry::new(&m, NOW);
        assert_eq!(e.not_before.as_deref(), Some("2027-01-15T08:00:25.000Z"));
        assert_eq!(
            e.note(),
            "suspended until 2027-01-15T08:00:25.000Z (in 25s): then a worker resumes it"
        );
        let due = Entry::new(&m, NOW + 30_000);
        assert_eq!(due.note(), "suspended, due now: a worker resumes it");
        // Not-before means nothing for other states.
        m.state = MarkState::Stopped;
        assert_eq!(Entry::new(&m, NOW).not_before_ms, None);
    }

    #[test]
    fn spans_stay_short() {
        assert_eq!(span(999), "0s");
        assert_eq!(span(59_999), "59s");
        assert_eq!(span(245_000), "4m05s");
        assert_eq!(span(3 * 3_600_000 + 7 * 60_000), "3h07m");
    }
}
