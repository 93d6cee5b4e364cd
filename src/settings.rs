//! leaseq's settings (GUCs). They exist once the library is loaded: after the first call of any
//! leaseq function in a session, or at start with `shared_preload_libraries` / `session_preload_libraries`.
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Default largest JSON document (payload, result or error): 1 MiB.
const DEFAULT_MAX_PAYLOAD_BYTES: i32 = 1024 * 1024;

static MAX_PAYLOAD_BYTES: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_PAYLOAD_BYTES);
static NOTIFY: GucSetting<bool> = GucSetting::<bool>::new(true);

pub fn register() {
    GucRegistry::define_int_guc(
        c"leaseq.max_payload_bytes",
        c"Largest JSON document, in bytes, that leaseq accepts as a payload, result or error.",
        c"Measured as the jsonb size before compression. Larger documents are refused with \
          SQLSTATE 54000: a queue row is read on every claim, so big data belongs elsewhere.",
        &MAX_PAYLOAD_BYTES,
        1,
        i32::MAX,
        GucContext::Userset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_bool_guc(
        c"leaseq.notify",
        c"Whether enqueues send NOTIFY leaseq_<queue> to wake idle workers.",
        c"Notifying transactions take a global lock in turn at commit, so at peak enqueue rates \
          they serialize; off leaves wake-ups to the workers' polling.",
        &NOTIFY,
        GucContext::Userset,
        GucFlags::default(),
    );
}

pub fn notify() -> bool {
    NOTIFY.get()
}

pub fn max_payload_bytes() -> i32 {
    MAX_PAYLOAD_BYTES.get()
}
