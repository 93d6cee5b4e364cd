//! Who may do what, and what runs without anyone claiming. Admin uses lifecycle and core.
pub mod grant; // queue_grant, queue_revoke, queue_grants, queue_privileges
pub mod maintenance; // the background worker: reclaim, wake, retain, ticks
