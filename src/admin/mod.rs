//! Who may do what, and what runs without anyone claiming. Admin uses observe, lifecycle and
//! core.
pub mod grant; // queue_grant, queue_revoke, queue_grants, queue_privileges
pub mod maintenance; // the background worker: reclaim, wake, retain, ticks, counting ahead
pub mod search; // queue_index_payloads: the index of payloads queue_jobs searches
