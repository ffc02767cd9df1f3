//! The NFS server's families (`cairn_nfs_*`), what `cairn stat nfs` shows: calls and errors by
//! program (`nfs`, `mount`) and procedure, with a latency histogram for every procedure
//! called; bytes read and written; WRITEs by the stability asked and answered; what COMMITs
//! carried; refusals, stale handles, duplicate-cache replies; connections; the memory limit of calls
//! in flight (limit, charged, peak, waits); and per client
//! address (label `client`, at most `nfs_stats::CLIENTS_MAX` of them, so the series stay
//! bounded). Counters and gauges of every procedure are always present, so a rate starts
//! from zero.

use super::families::{Families, Labels};
use super::sample::LatencyBuckets;
use crate::nfs_stats::{MOUNT_PROCEDURES, NFS_PROCEDURES, NfsSnapshot, STABILITIES};

const CALLS_HELP: &str = "NFS and MOUNT calls answered, by procedure (cairn stat nfs)";

/// Every NFS family of one snapshot.
pub(super) fn nfs(families: &mut Families, s: &NfsSnapshot) {
    procedures(families, s);
    writes(families, s);
    totals(families, s);
    clients(families, s);
}

/// The server-wide counters and levels.
fn totals(families: &mut Families, s: &NfsSnapshot) {
    let server = &s.server;
    let report = s.report();
    for (name, help, value) in [
        (
            "cairn_nfs_read_bytes",
            "bytes READ calls returned",
            report.read_bytes,
        ),
        (
            "cairn_nfs_written_bytes",
            "bytes WRITE calls wrote",
            report.written_bytes,
        ),
        (
            "cairn_nfs_commit_carried_writes",
            "UNSTABLE writes of a file acknowledged since its previous COMMIT, summed over COMMITs",
            s.commits.carried_writes,
        ),
        (
            "cairn_nfs_commit_carried_bytes",
            "bytes of those UNSTABLE writes, summed over COMMITs",
            s.commits.carried_bytes,
        ),
        (
            "cairn_nfs_commits_empty",
            "COMMITs that carried no UNSTABLE write",
            s.commits.empty,
        ),
        (
            "cairn_nfs_pending_dropped",
            "files whose uncommitted UNSTABLE writes were forgotten (bound of tracked files)",
            server.pending_dropped,
        ),
    ] {
        families.counter(name, help, Vec::new(), value);
    }
    refusals(families, s);
}

/// Calls answered without data, refusals, verifier changes, connections and clients.
fn refusals(families: &mut Families, s: &NfsSnapshot) {
    let server = &s.server;
    for (name, help, value) in [
        (
            "cairn_nfs_portmap_calls",
            "PORTMAP calls answered",
            server.portmap_calls,
        ),
        (
            "cairn_nfs_stale_handles",
            "handles answered STALE",
            server.stale_handles,
        ),
        (
            "cairn_nfs_duplicate_replies",
            "retransmissions answered from the duplicate-request cache",
            server.duplicate_replies,
        ),
        (
            "cairn_nfs_auth_refusals",
            "calls refused for their credential (AUTH_SYS needed)",
            server.auth_refusals,
        ),
        (
            "cairn_nfs_garbage_calls",
            "records whose RPC header or arguments did not decode",
            server.garbage_calls,
        ),
        (
            "cairn_nfs_unsupported_calls",
            "calls of a program, version or procedure not served",
            server.unsupported_calls,
        ),
        (
            "cairn_nfs_verifier_changes",
            "write verifier changes",
            server.verifier_changes,
        ),
        (
            "cairn_nfs_connections",
            "connections accepted",
            server.connections_total,
        ),
        (
            "cairn_nfs_connections_refused",
            "connections closed at once: the server was full",
            server.connections_refused,
        ),
        (
            "cairn_nfs_memory_waits",
            "calls that waited for room in the NFS memory limit (their connection stopped reading)",
            server.memory_waits,
        ),
        (
            "cairn_nfs_clients_dropped",
            "client addresses dropped from the per-client statistics (least recently active)",
            server.clients_dropped,
        ),
    ] {
        families.counter(name, help, Vec::new(), value);
    }
    for (name, help, value) in [
        (
            "cairn_nfs_connections_open",
            "connections open now",
            server.connections_open,
        ),
        (
            "cairn_nfs_memory_max_bytes",
            "what the calls in flight of all connections may hold at once",
            server.memory_max_bytes,
        ),
        (
            "cairn_nfs_memory_charged_bytes",
            "what the calls in flight hold now",
            server.memory_charged_bytes,
        ),
        (
            "cairn_nfs_memory_peak_bytes",
            "the most the calls in flight have held at once",
            server.memory_peak_bytes,
        ),
        (
            "cairn_nfs_pending_files",
            "files with UNSTABLE writes not yet committed",
            s.pending_files,
        ),
        (
            "cairn_nfs_clients",
            "client addresses tracked",
            s.clients.len() as u64,
        ),
    ] {
        families.gauge(name, help, Vec::new(), value as f64);
    }
}

fn procedures(families: &mut Families, s: &NfsSnapshot) {
    let named = NFS_PROCEDURES
        .iter()
        .map(|(_, name)| ("nfs", *name))
        .zip(&s.nfs)
        .chain(
            MOUNT_PROCEDURES
                .iter()
                .map(|(_, name)| ("mount", *name))
                .zip(&s.mount),
        );
    for ((program, procedure), op) in named {
        let labels: Labels = vec![
            ("program", program.to_string()),
            ("procedure", procedure.to_string()),
        ];
        families.counter("cairn_nfs_calls", CALLS_HELP, labels.clone(), op.ops);
        families.counter(
            "cairn_nfs_call_errors",
            "calls answered with an error status",
            labels.clone(),
            op.errors,
        );
        if op.ops > 0 {
            families.histogram(
                "cairn_nfs_call_latency_seconds",
                "time to answer a call, from its record to its reply",
                labels,
                &LatencyBuckets::from_histogram(&op.latency_us),
            );
        }
    }
}

fn writes(families: &mut Families, s: &NfsSnapshot) {
    for (asked, row) in STABILITIES.iter().zip(&s.writes) {
        for (answered, tally) in STABILITIES.iter().zip(row) {
            let labels: Labels = vec![
                ("asked", (*asked).to_string()),
                ("answered", (*answered).to_string()),
            ];
            families.counter(
                "cairn_nfs_writes",
                "WRITEs by the stability the client asked and the one the server answered",
                labels.clone(),
                tally.count,
            );
            families.counter(
                "cairn_nfs_write_stability_bytes",
                "bytes of WRITEs by the stability asked and answered",
                labels,
                tally.bytes,
            );
        }
    }
}

fn clients(families: &mut Families, s: &NfsSnapshot) {
    for (address, tally) in &s.clients {
        let labels: Labels = vec![("client", address.to_string())];
        for (name, help, value) in [
            (
                "cairn_nfs_client_calls",
                "calls of one client address",
                tally.calls.ops,
            ),
            (
                "cairn_nfs_client_errors",
                "calls of one client answered with an error",
                tally.calls.errors,
            ),
            (
                "cairn_nfs_client_refused",
                "records of one client refused (garbage, unsupported, credential)",
                tally.refused,
            ),
            (
                "cairn_nfs_client_read_bytes",
                "bytes one client read",
                tally.read_bytes,
            ),
            (
                "cairn_nfs_client_written_bytes",
                "bytes one client wrote",
                tally.written_bytes,
            ),
            (
                "cairn_nfs_client_commits",
                "COMMITs of one client",
                tally.commits,
            ),
        ] {
            families.counter(name, help, labels.clone(), value);
        }
        families.gauge(
            "cairn_nfs_client_connections_open",
            "connections of one client open now",
            labels,
            tally.connections_open as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs_stats::{NfsStats, Seen};
    use std::net::IpAddr;
    use std::time::Duration;

    #[test]
    fn every_procedure_has_a_counter_and_called_ones_a_histogram() {
        let stats = NfsStats::default();
        let client = IpAddr::from([127, 0, 0, 1]);
        stats.connection_opened(client);
        let call = cairn_nfs::nfs3::Nfs3Call::Null;
        let reply = cairn_nfs::nfs3::Nfs3Reply::Null;
        stats.record(client, Seen::nfs(&call, &reply), Duration::from_micros(3));
        stats.record(client, Seen::AuthRefused, Duration::from_micros(3));
        let mut families = Families::default();
        nfs(&mut families, &stats.snapshot());
        let text = super::super::families::encode_text(families).unwrap();
        assert!(
            text.contains("cairn_nfs_calls_total{program=\"nfs\",procedure=\"null\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cairn_nfs_calls_total{program=\"mount\",procedure=\"mnt\"} 0"),
            "{text}"
        );
        assert!(text.contains(
            "cairn_nfs_call_latency_seconds_count{program=\"nfs\",procedure=\"null\"} 1"
        ));
        assert!(
            !text.contains(
                "cairn_nfs_call_latency_seconds_count{program=\"nfs\",procedure=\"write\"}"
            )
        );
        assert!(text.contains("cairn_nfs_auth_refusals_total 1"), "{text}");
        assert!(text.contains("cairn_nfs_connections_open 1"), "{text}");
        assert!(
            text.contains("cairn_nfs_client_refused_total{client=\"127.0.0.1\"} 1"),
            "{text}"
        );
    }
}
