//! A store written outside the workspace backends (work in progress).
