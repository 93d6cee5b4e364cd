//! The lifecycle, in order: a queue, a job enqueued, claimed (expired leases reclaimed), its lease
//! renewed under the fence, finished — completed, failed, snoozed or handed back unstarted, closing its attempt in
//! history —, redriven when dead, cancelled, purged when old; ordered groups and periodic jobs
//! around them. Lifecycle uses core.
pub mod queue; // queue_create
pub mod pause; // queue_pause, queue_resume
pub mod enqueue; // queue_enqueue, queue_enqueue_batch
pub mod claim; // queue_claim (reclaim, claim, attempt numbers)
pub mod lease; // queue_renew, queue_renew_batch; the fence, in words
pub mod complete; // queue_complete, queue_complete_batch
pub mod fail; // queue_fail, queue_fail_batch
pub mod snooze; // queue_snooze
pub mod hand_back; // queue_hand_back
pub mod step; // queue_step, queue_steps: what a handler did, kept for its retries
pub mod progress; // queue_progress: how far a running job has got
pub mod history; // how every close writes its attempt
pub mod redrive; // queue_redrive, queue_redrive_all, queue_redrive_batch
pub mod cancel; // queue_cancel, queue_cancel_batch
pub mod purge; // queue_purge
pub mod job; // a job named by id: whether it exists
pub mod flow; // queue_flow, queue_flow_status: a graph of jobs at once
pub mod depend; // dependencies: blocked jobs, released by their last parent's finish
pub mod group; // ordered groups: which of a group's jobs may run, and when the next one may
pub mod schedule; // queue_schedule, queue_unschedule, queue_schedules; ticks materialised on claim
