//! Broken stores the suite must catch.
