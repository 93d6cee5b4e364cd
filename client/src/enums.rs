//! The extension's SQL enums as Rust enums, each with its labels in the SQL enum's order:
//! `job_status`, `attempt_outcome` and `queue_enqueue`'s `on_parent_failure` (`access` makes
//! `queue_privilege` with the same macro). They cross as text (`status::text`) and are decoded
//! from the label, so that a label this client does not know is a decoding error of that column
//! rather than a silent default.

/// Generates a Rust enum for one of the extension's SQL enums, with its labels, `Display`,
/// `FromStr` and decoding from the label's text.
macro_rules! sql_enum {
    ($(#[$doc:meta])* $ty:ident, $what:literal, { $($variant:ident => $label:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($variant,)*
        }

        impl $ty {
            /// Every value, in the SQL enum's order.
            pub const ALL: &[$ty] = &[$($ty::$variant,)*];

            /// The SQL label.
            pub fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label,)*
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.label())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(label: &str) -> Result<$ty, String> {
                match label {
                    $($label => Ok($ty::$variant),)*
                    _ => Err(format!(
                        concat!("unknown ", $what, " {:?}: expected one of {}"),
                        label,
                        $ty::ALL.iter().map(|v| v.label()).collect::<Vec<_>>().join(", ")
                    )),
                }
            }
        }

        impl<'a> tokio_postgres::types::FromSql<'a> for $ty {
            fn from_sql(
                ty: &tokio_postgres::types::Type,
                raw: &'a [u8],
            ) -> Result<$ty, Box<dyn std::error::Error + Sync + Send>> {
                Ok(<&str as tokio_postgres::types::FromSql>::from_sql(ty, raw)?.parse()?)
            }

            fn accepts(ty: &tokio_postgres::types::Type) -> bool {
                <&str as tokio_postgres::types::FromSql>::accepts(ty)
            }
        }
    };
}
pub(crate) use sql_enum;

sql_enum!(
    /// `leaseq.job_status`.
    JobStatus, "job status", {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Dead => "dead",
        Cancelled => "cancelled",
        Waiting => "waiting",
        Blocked => "blocked",
    }
);

impl JobStatus {
    /// Whether `queue_cancel` changes a job in this status: every status but the two a job
    /// ends in for good (a dead job can still be redriven, so it can be cancelled). A match
    /// without a wildcard: a status added to the enum does not compile until it is decided here.
    pub fn cancellable(self) -> bool {
        match self {
            JobStatus::Pending
            | JobStatus::Running
            | JobStatus::Dead
            | JobStatus::Waiting
            | JobStatus::Blocked => true,
            JobStatus::Succeeded | JobStatus::Cancelled => false,
        }
    }
}

sql_enum!(
    /// `queue_enqueue`'s `on_parent_failure`: what a job does when a parent goes dead or is
    /// cancelled.
    ParentFailure, "parent failure policy", {
        Cancel => "cancel",
        Dead => "dead",
        Run => "run",
    }
);

impl Default for ParentFailure {
    /// The extension's default.
    fn default() -> ParentFailure {
        ParentFailure::Cancel
    }
}

sql_enum!(
    /// `leaseq.attempt_outcome`.
    AttemptOutcome, "attempt outcome", {
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        LeaseExpired => "lease_expired",
        Cancelled => "cancelled",
        Snoozed => "snoozed",
        HandedBack => "handed_back",
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::types::{FromSql, Type};

    #[test]
    fn labels_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(status.label().parse::<JobStatus>(), Ok(*status));
        }
        for outcome in AttemptOutcome::ALL {
            assert_eq!(outcome.label().parse::<AttemptOutcome>(), Ok(*outcome));
        }
    }

    #[test]
    fn unknown_label_is_a_decoding_error() {
        assert!(JobStatus::from_sql(&Type::TEXT, b"paused").is_err());
        assert_eq!(
            JobStatus::from_sql(&Type::TEXT, b"dead").unwrap(),
            JobStatus::Dead
        );
        assert_eq!(
            "lost".parse::<AttemptOutcome>(),
            Err(
                "unknown attempt outcome \"lost\": expected one of running, succeeded, failed, \
                 lease_expired, cancelled, snoozed, handed_back"
                    .into()
            )
        );
    }
}
