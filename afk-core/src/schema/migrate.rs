//! Pure conversion of v1 records to v2 (filled in below).
