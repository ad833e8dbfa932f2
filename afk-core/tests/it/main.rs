//! The integration tests of `afk-core`, as one test binary: each module was a
//! `tests/<module>.rs` of its own. One binary per crate, because each test binary links the
//! whole dependency graph: add a new test file here as a module, not as another `tests/*.rs`.

mod common;
mod fixtures_normalize;
mod fixtures_resume;
mod hash_vectors;
mod normalize_props;
mod resume_budgets;
mod resume_changed_agent;
mod resume_crashes;
mod resume_records;
mod resume_rules;
mod resume_v1_v2;
mod run_status;
mod runner_abort;
mod runner_agent_version;
mod runner_big_outputs;
mod runner_budgets;
mod runner_control;
mod runner_crash;
mod runner_errors;
mod runner_events;
mod runner_fn_tools;
mod runner_fork;
mod runner_operator;
mod runner_outage;
mod runner_pause;
mod runner_policies;
mod runner_repeated_ids;
mod runner_retention;
mod runner_settle;
mod runner_specs;
mod runner_start_race;
mod runner_stats;
mod runner_subagent;
mod runner_suspend;
mod runner_telemetry;
mod runner_worker;
mod write_behind_merge;
