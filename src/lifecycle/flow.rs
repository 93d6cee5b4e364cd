//! Flows: a whole graph of jobs enqueued in one call, and how far it got.
//!
//! `queue_flow` reads the graph into typed nodes (serde, fields checked by name), checks it as a
//! graph — keys unique, every `depends_on` a key of the flow, no cycle — and that every queue
//! exists and takes the caller's jobs, all before the first insert; then enqueues the nodes
//! parents first (`depend`), in the caller's transaction. A payload is kept as the text it was
//! given and read by PostgreSQL's own `jsonb` input, so its numbers keep every digit.
use std::collections::HashMap;

use pgrx::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::counters::{self, Event};
use crate::core::datum::{Jsonb, ParentFailure, QueuePrivilege};
use crate::core::errors;
use crate::core::settings;
use crate::core::spi::{self, INT8, Statement, TEXT_ARRAY};
use crate::lifecycle::depend;
use crate::lifecycle::enqueue::{INSERT, INSERT_BLOCKED};
use crate::lifecycle::job;
use crate::lifecycle::queue;

/// One node of a flow, as given.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Node<'a> {
    key: String,
    queue: String,
    /// Absent: `{}`; `null` is a payload like any other (as in `queue_enqueue`).
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "at_most_a_batch")]
    depends_on: Vec<String>,
    #[serde(default)]
    on_parent_failure: Option<String>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    max_attempts: Option<i32>,
}

/// A field that is there, `null` included (serde reads a `null` `Option` as absent).
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(field).map(Some)
}

/// A node's `depends_on`, refused at its 10001st key, before it is copied: a node's keys are
/// bounded while the document is read, not after.
fn at_most_a_batch<'de, D: serde::Deserializer<'de>>(field: D) -> Result<Vec<String>, D::Error> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of at most 10000 keys")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut keys = Vec::new();
            while let Some(key) = seq.next_element()? {
                if keys.len() == args::MAX_BATCH as usize {
                    return Err(serde::de::Error::custom(
                        "\"depends_on\" must have at most 10000 keys",
                    ));
                }
                keys.push(key);
            }
            Ok(keys)
        }
    }
    field.deserialize_seq(Keys)
}

/// A node checked: its payload read as `jsonb`, its parents as positions in the flow.
struct Checked {
    key: String,
    queue: String,
    payload: Jsonb,
    parents: Vec<usize>,
    on_parent_failure: ParentFailure,
    priority: i32,
    max_attempts: Option<i32>,
}

/// Enqueues a graph of jobs in one call, in the caller's transaction, and returns each node's
/// job id by key, in the order given. `jobs` is a JSON array of nodes:
/// `{"key": "resize", "queue": "images", "payload": {…}, "depends_on": ["fetch"],
/// "on_parent_failure": "cancel", "priority": 0, "max_attempts": 5}` — `key` and `queue`
/// required; `depends_on` names keys of the same flow (a node with none starts at once); the
/// rest as in `queue_enqueue`. A node that many others depend on is a fan-in: it runs once they
/// all succeeded ("when all 1,000 images are done"). Nothing is inserted unless the whole graph
/// is valid. `trace_context`: the producer's W3C `traceparent`, every node's job's (see
/// `queue_enqueue`).
///
/// Errors: `22004` NULL jobs, `22023` not an array of 1 to 10000 nodes, a node that is not an
/// object of the known fields with the right types, an empty or over-long key, a key used twice,
/// a `depends_on` naming a key the flow has not, a cycle, an invalid queue name, priority,
/// max_attempts or on_parent_failure — each naming the node and the field; `42704` an unknown
/// queue; `42501` without `produce` on a node's queue; `54000` a payload over
/// `leaseq.max_payload_bytes`.
#[pg_extern]
pub fn queue_flow(
    jobs: Option<Jsonb>,
    trace_context: default!(Option<&str>, "NULL"),
) -> TableIterator<'static, (name!(key, String), name!(job_id, i64))> {
    const F: &str = "queue_flow";
    let jobs = args::required(F, "jobs", jobs);
    if let Some(trace) = trace_context {
        args::trace_context(F, "trace_context", trace);
    }
    // Bounded before it is parsed: the nodes, their edges and every copy are at most linear in it.
    if jobs.size() > args::MAX_FLOW_BYTES {
        errors::too_large(
            F,
            "jobs",
            jobs.size(),
            args::MAX_FLOW_BYTES,
            "enqueue a larger graph in several flows, its later parts with depends_on",
        );
    }
    match jobs.array_len() {
        None => errors::invalid_argument(F, "jobs", "must be a JSON array of nodes"),
        Some(n) if n == 0 || n > args::MAX_BATCH as usize => {
            errors::invalid_argument(F, "jobs", "must have 1 to 10000 nodes")
        }
        Some(_) => {}
    }
    let text = jobs.to_text();
    let nodes = check(F, &text);
    let mut queues: Vec<&str> = nodes.iter().map(|node| node.queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    for queue in &queues {
        access::require_queue(F, queue, QueuePrivilege::Produce);
    }
    let now = clock::now();
    let notify = settings::notify();
    let ids = connect::connect(&JOB_PATH, |client| {
        for queue in &queues {
            queue::load(client, F, queue);
        }
        let mut ids = vec![0i64; nodes.len()];
        for at in order(F, &nodes) {
            let node = &nodes[at];
            let mut args = vec![
                node.queue.as_str().into(),
                Jsonb::arg(Some(node.payload)),
                node.priority.into(),
                None::<TimestampWithTimeZone>.into(),
                node.max_attempts.into(),
                now.into(),
            ];
            let id: i64 = if node.parents.is_empty() {
                args.extend([notify.into(), trace_context.into()]);
                spi::run(client, &INSERT, &args).first(|row| row.required(1))
            } else {
                args.push(trace_context.into());
                spi::run(client, &INSERT_BLOCKED, &args).first(|row| row.required(1))
            }
            .unwrap_or_else(|| errors::unknown_queue(F, &node.queue));
            if !node.parents.is_empty() {
                let parents = node.parents.iter().map(|&p| ids[p]).collect();
                depend::link(
                    client,
                    &[(id, &depend::unseen(parents))],
                    node.on_parent_failure,
                    now,
                );
            }
            counters::count(&node.queue, Event::Enqueued, 1);
            ids[at] = id;
        }
        ids
    });
    TableIterator::new(nodes.into_iter().map(|node| node.key).zip(ids))
}

/// The nodes of `text` (a JSON array), checked one by one and then as a graph.
fn check(function: &str, text: &str) -> Vec<Checked> {
    let refuse = |what: String| -> ! { errors::invalid_argument(function, "jobs", &what) };
    let elements: Vec<&RawValue> = serde_json::from_str(text)
        .unwrap_or_else(|_| refuse("must be a JSON array of nodes".into()));
    if elements.is_empty() || elements.len() > args::MAX_BATCH as usize {
        refuse("must have 1 to 10000 nodes".into());
    }
    let mut nodes = Vec::with_capacity(elements.len());
    let mut edges = 0;
    for (i, element) in elements.iter().enumerate() {
        check_for_interrupts!();
        let node: Node = serde_json::from_str(element.get()).unwrap_or_else(|e| {
            refuse(format!(
                "node {}: {}",
                i + 1,
                without_position(&e.to_string())
            ))
        });
        edges += node.depends_on.len();
        args::at_most_edges(function, "jobs", edges);
        nodes.push(node);
    }
    let mut position = HashMap::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        let named = |field: &str, what: &str| -> ! {
            refuse(format!(
                "node {} (\"{}\"): \"{field}\" {what}",
                i + 1,
                node.key
            ))
        };
        if node.key.is_empty() || node.key.len() > 512 {
            refuse(format!(
                "node {}: \"key\" must be between 1 and 512 bytes long",
                i + 1
            ));
        }
        if position.insert(node.key.clone(), i).is_some() {
            named("key", "is used by an earlier node");
        }
        if !args::is_queue_name(&node.queue) {
            named("queue", "must be a queue name: ^[a-z][a-z0-9_]{0,47}$");
        }
        if node.max_attempts.is_some_and(|n| n < 1) {
            named("max_attempts", "must be at least 1");
        }
    }
    // Which node last named each node as a parent: a key twice in one list in constant time.
    let mut named_by = vec![usize::MAX; nodes.len()];
    let mut checked = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.into_iter().enumerate() {
        let named = |field: &str, what: &str| -> ! {
            refuse(format!(
                "node {} (\"{}\"): \"{field}\" {what}",
                i + 1,
                node.key
            ))
        };
        check_for_interrupts!();
        let mut parents = Vec::with_capacity(node.depends_on.len());
        for key in &node.depends_on {
            match position.get(key.as_str()) {
                Some(&p) if p == i => named("depends_on", "names the node itself"),
                Some(&p) if named_by[p] == i => {
                    named("depends_on", &format!("names \"{key}\" twice"))
                }
                Some(&p) => {
                    named_by[p] = i;
                    parents.push(p);
                }
                None => named(
                    "depends_on",
                    &format!("names \"{key}\", which is not a key of this flow"),
                ),
            }
        }
        let on_parent_failure = match node.on_parent_failure.as_deref() {
            None => ParentFailure::Cancel,
            Some(label) => ParentFailure::from_label(label)
                .unwrap_or_else(|| named("on_parent_failure", "must be cancel, dead or run")),
        };
        let payload = Jsonb::from_text(node.payload.map_or("{}", RawValue::get));
        args::document(function, &format!("jobs[{}].payload", i + 1), &payload);
        checked.push(Checked {
            key: node.key,
            queue: node.queue,
            payload,
            parents,
            on_parent_failure,
            priority: node.priority.unwrap_or(0),
            max_attempts: node.max_attempts,
        });
    }
    checked
}

/// The nodes in an order that puts every parent before its children, the given order kept where
/// the graph leaves it free; `22023` names a node on a cycle when there is one.
fn order(function: &str, nodes: &[Checked]) -> Vec<usize> {
    let mut waiting: Vec<usize> = nodes.iter().map(|node| node.parents.len()).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, node) in nodes.iter().enumerate() {
        for &parent in &node.parents {
            children[parent].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..nodes.len()).filter(|&i| waiting[i] == 0).collect();
    let mut ordered = Vec::with_capacity(nodes.len());
    while let Some(next) = ready.pop_first() {
        check_for_interrupts!();
        ordered.push(next);
        for &child in &children[next] {
            waiting[child] -= 1;
            if waiting[child] == 0 {
                ready.insert(child);
            }
        }
    }
    if let Some(stuck) = (0..nodes.len()).find(|&i| waiting[i] > 0) {
        errors::invalid_argument(
            function,
            "jobs",
            &format!(
                "node {} (\"{}\"): \"depends_on\" closes a cycle",
                stuck + 1,
                nodes[stuck].key
            ),
        );
    }
    ordered
}

/// A serde error without its "at line 1 column N" (the node is named instead).
fn without_position(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// How many jobs of the flow from `$1` (it and every job that depends on it, directly or not)
/// are in each status, but those of the queues `$2`.
pub(crate) const STATUS: Statement = Statement {
    name: "flow.status",
    sql: "WITH RECURSIVE flow (id) AS (
              SELECT $1::bigint
              UNION
              SELECT edge.child_id FROM flow
                JOIN leaseq.job_parents AS edge ON edge.parent_id = flow.id)
          SELECT count(*),
                 count(*) FILTER (WHERE job.status = 'blocked'),
                 count(*) FILTER (WHERE job.status = 'pending' OR job.status = 'waiting'),
                 count(*) FILTER (WHERE job.status = 'running'),
                 count(*) FILTER (WHERE job.status = 'succeeded'),
                 count(*) FILTER (WHERE job.status = 'dead'),
                 count(*) FILTER (WHERE job.status = 'cancelled')
            FROM flow JOIN leaseq.jobs AS job ON job.id = flow.id
           WHERE job.queue <> ALL ($2)",
    params: &[INT8, TEXT_ARRAY],
};

/// How far the flow from `root` got: it and every job that depends on it, directly or not,
/// counted by status (`pending` includes jobs waiting for their group), and whether every one
/// of them is final. Purged jobs are not counted, nor those of queues the caller may neither
/// observe nor work (their counts would tell their statuses).
///
/// Errors: `22004` NULL root, `42704` no such job, `42501` its queue not observable by the
/// caller.
#[pg_extern]
pub fn queue_flow_status(
    root: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(jobs, i64),
        name!(blocked, i64),
        name!(pending, i64),
        name!(running, i64),
        name!(succeeded, i64),
        name!(dead, i64),
        name!(cancelled, i64),
        name!(finished, bool),
    ),
> {
    const F: &str = "queue_flow_status";
    let root = args::required(F, "root", root);
    access::require_jobs(F, &[root], QueuePrivilege::Observe);
    let hidden = access::hidden_related();
    let row = connect::connect(&WHOLE_QUEUE, |client| {
        job::require_exists(client, F, root);
        spi::run(client, &STATUS, &[root.into(), hidden.into()]).single(|row| {
            let counts: [i64; 7] = std::array::from_fn(|i| row.required(i + 1));
            counts
        })
    });
    let [jobs, blocked, pending, running, succeeded, dead, cancelled] = row;
    let finished = succeeded + dead + cancelled == jobs;
    TableIterator::once((
        jobs, blocked, pending, running, succeeded, dead, cancelled, finished,
    ))
}
