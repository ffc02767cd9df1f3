//! One txg per dataset command (issue 34): every command that changes one dataset (create,
//! set, snapshot, hold, release, bookmark, clone, promote, rollback, destroy of a dataset, a
//! snapshot or a bookmark) commits its change and its pool-history entry in one txg, as a
//! user runs it: through `cairn serve`, counted by the pool's txg counter (`pool txgs`), each
//! command's entry in `pool history` once. A destroy of a dataset and a rollback free blocks:
//! they also sync the few empty txgs after their own that make the freed space reusable at
//! once (`reclaim_deferred`, at most `RECLAIM_TXGS_MAX`), which is space accounting, not the
//! change: their change and history entry still take one txg, the one before those.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;

/// Empty txgs a command that frees blocks syncs after its own so that the freed space is
/// reusable when it returns (cairn-pool's `DEFER_TXGS`).
const RECLAIM_TXGS_MAX: usize = 3;

/// The txgs the server synced (`pool txgs -H -p`): (txg, trigger).
fn synced(env: &Env) -> Vec<(u64, String)> {
    env.ok(&["pool", "txgs", "-H", "-p", "tank"])
        .lines()
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').collect();
            let txg = cells[0]
                .parse()
                .unwrap_or_else(|_| panic!("a txg number in {line:?}"));
            (txg, cells[1].to_string())
        })
        .collect()
}

/// Runs `cairn ARGS` and returns the txgs that synced while it ran, other than the txg
/// timer's (an idle pool's timer may sync a txg of its own meanwhile; a command asks for its
/// txg, it never waits for the timer), and all of them.
fn txgs_of(env: &Env, args: &[&str]) -> (Vec<u64>, Vec<u64>) {
    let last = synced(env).last().map_or(0, |(txg, _)| *txg);
    env.ok(args);
    let after: Vec<(u64, String)> = synced(env)
        .into_iter()
        .filter(|(txg, _)| *txg > last)
        .collect();
    let requested = after
        .iter()
        .filter(|(_, trigger)| trigger != "timeout")
        .map(|(txg, _)| *txg)
        .collect();
    (requested, after.into_iter().map(|(txg, _)| txg).collect())
}

#[test]
fn every_dataset_command_commits_its_change_and_its_history_in_one_txg() {
    let env = Env::new();
    env.create_pool();
    let _server = env.serve();

    // (command, empty txgs it may sync after its own to reclaim what it freed)
    let commands: Vec<(Vec<&str>, usize)> = vec![
        (
            vec!["create", "-V", "16M", "-o", "volblocksize=8K", "tank/vol"],
            0,
        ),
        (vec!["create", "tank/fs"], 0),
        (vec!["set", "compression=off", "tank/vol"], 0),
        (vec!["snapshot", "tank/vol@a"], 0),
        (vec!["snapshot", "tank/vol@b", "tank/fs@b"], 0),
        (vec!["hold", "keep", "tank/vol@a"], 0),
        (vec!["release", "keep", "tank/vol@a"], 0),
        (vec!["bookmark", "tank/vol@a", "tank/vol#a"], 0),
        (vec!["clone", "tank/vol@a", "tank/c"], 0),
        (vec!["promote", "tank/c"], 0),
        (vec!["promote", "tank/vol"], 0),
        (vec!["destroy", "tank/c"], RECLAIM_TXGS_MAX),
        (vec!["rollback", "tank/vol@b"], RECLAIM_TXGS_MAX),
        (vec!["destroy", "tank/vol#a"], 0),
        (vec!["destroy", "tank/vol@b"], 0),
        (vec!["destroy", "-d", "tank/vol@a"], 0),
        (vec!["destroy", "tank/fs@b"], 0),
        (vec!["destroy", "tank/fs"], RECLAIM_TXGS_MAX),
    ];
    let mut counts = Vec::new();
    for (args, reclaim) in &commands {
        let (requested, all) = txgs_of(&env, args);
        counts.push((args.join(" "), *reclaim, requested, all));
    }
    let report: String = counts
        .iter()
        .map(|(command, _, requested, all)| {
            format!("cairn {command}: txgs {requested:?} (with the timer's: {all:?})\n")
        })
        .collect();
    for (command, reclaim, requested, all) in &counts {
        assert!(
            requested.len() <= 1 + reclaim,
            "cairn {command} took {} txgs, not one (+ at most {reclaim} to reclaim space):\n{report}",
            requested.len()
        );
        assert!(
            !all.is_empty(),
            "cairn {command} committed in no txg:\n{report}"
        );
    }

    // Each command's entry is in the history once (it was recorded, and only once).
    let history = env.ok(&["pool", "history", "tank"]);
    for (args, _) in &commands {
        let line = format!("cairn {}", args.join(" "));
        let times = history
            .lines()
            .filter(|entry| entry.ends_with(&line))
            .count();
        assert_eq!(times, 1, "{line:?} in the history:\n{history}");
    }
    // A command that fails records nothing and takes no txg of its own.
    let (requested, _) = {
        let last = synced(&env).last().map_or(0, |(txg, _)| *txg);
        let refused = env.cairn(&["set", "volsize=1", "tank/nothing"]);
        assert!(!refused.success(), "{}", refused.describe());
        let after: Vec<u64> = synced(&env)
            .into_iter()
            .filter(|(txg, trigger)| *txg > last && trigger != "timeout")
            .map(|(txg, _)| txg)
            .collect();
        (after, ())
    };
    assert!(requested.is_empty(), "a refused set synced {requested:?}");
    let history = env.ok(&["pool", "history", "tank"]);
    assert!(!history.contains("tank/nothing"), "{history}");
}
