//! End-to-end tests of pools the pool cache remembers but that cannot be opened (issue 13,
//! "faulted pools are first-class"): device files deleted or labels wiped. Such a pool is
//! listed UNAVAIL with its reason, never stops a command on another pool nor `cairn serve`, and
//! `pool export` (or `pool destroy -f`) forgets it so its name can be used again. Both ways of
//! running a command are covered: directly, and forwarded to a running server.
//!
//! Real `cairn` processes on sparse files; the served pool is checked with qemu-io and nbdinfo
//! (Debian packages qemu-utils and libnbd-bin; a missing one fails the test).

mod nbd_common;

use nbd_common::*;

/// The `-H` row of `pool list` whose first field is `name`.
fn pool_row(list: &str, name: &str) -> Option<Vec<String>> {
    list.lines()
        .map(|line| line.split('\t').map(str::to_string).collect::<Vec<_>>())
        .find(|fields| fields[0] == name)
}

/// A run that must succeed; returns it whole (stdout and stderr).
fn ok_run(env: &Env, args: &[&str]) -> Run {
    let run = env.cairn(args);
    assert!(run.success(), "cairn {args:?} failed:\n{}", run.describe());
    run
}

/// A run that must fail with exit code 1; returns its stderr.
fn fails(env: &Env, args: &[&str]) -> String {
    let run = env.cairn(args);
    assert_eq!(
        run.status.code(),
        Some(1),
        "cairn {args:?} should fail:\n{}",
        run.describe()
    );
    run.stderr
}

/// `pool list -H -p`: exits 0, `unavail` are listed UNAVAIL with dashes (each reason, naming
/// its device, on stderr) and `online` ONLINE with numbers.
fn assert_listed(env: &Env, unavail: &[(&str, &str)], online: &[&str]) {
    let run = ok_run(env, &["pool", "list", "-H", "-p"]);
    for (name, device) in unavail {
        let row = pool_row(&run.stdout, name)
            .unwrap_or_else(|| panic!("{name} not listed:\n{}", run.describe()));
        assert_eq!(
            row,
            vec![*name, "-", "-", "-", "-", "-", "UNAVAIL"],
            "{}",
            run.describe()
        );
        assert!(
            run.stderr.contains(&format!("pool '{name}' is UNAVAIL"))
                && run.stderr.contains(device),
            "the reason names the device {device}:\n{}",
            run.describe()
        );
    }
    for name in online {
        let row = pool_row(&run.stdout, name)
            .unwrap_or_else(|| panic!("{name} not listed:\n{}", run.describe()));
        assert_eq!(row[6], "ONLINE", "{}", run.describe());
        let size: u64 = row[1].parse().expect("exact SIZE");
        assert!(size > 0, "{}", run.describe());
    }
}

/// Imported pools whose devices disappear (files deleted; labels zeroed) while no server runs:
/// listed UNAVAIL with the reason, other pools unaffected, `pool destroy` refuses without -f,
/// `pool export` and `pool destroy -f` forget them, and the name can then be created again.
#[test]
fn a_pool_whose_devices_are_gone_is_unavail_and_can_be_forgotten() {
    let env = Env::new();
    let (d0, d1, other, wiped) = (
        env.dev("d0.img"),
        env.dev("d1.img"),
        env.dev("other.img"),
        env.dev("wiped.img"),
    );
    env.create_pool_of("128M");
    env.ok(&["pool", "create", "--size", "128M", "good", &other]);
    env.ok(&["pool", "create", "--size", "128M", "zeroed", &wiped]);
    env.create_volume("good/vol", "16M", &[]);

    std::fs::remove_file(&d0).unwrap();
    std::fs::remove_file(&d1).unwrap();
    // Labels, uberblocks, everything: zeros (the file stays, at its size).
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&wiped)
        .unwrap();
    let size = file.metadata().unwrap().len();
    file.set_len(0).unwrap();
    file.set_len(size).unwrap();
    drop(file);

    assert_listed(&env, &[("tank", &d0), ("zeroed", &wiped)], &["good"]);
    let human = ok_run(&env, &["pool", "list"]);
    assert!(human.stdout.contains("UNAVAIL"), "{}", human.describe());

    let status = ok_run(&env, &["pool", "status"]);
    for needle in [
        "pool: tank",
        "state: UNAVAIL",
        "cannot be opened",
        "cairn pool export tank",
        &d1,
        "pool: good",
        "state: ONLINE",
    ] {
        assert!(
            status.stdout.contains(needle),
            "status shows {needle:?}:\n{}",
            status.describe()
        );
    }
    let json = ok_run(&env, &["pool", "status", "-j", "tank"]);
    let doc = Json::parse(&json.stdout).unwrap_or_else(|err| panic!("{err}: {}", json.stdout));
    let tank = doc
        .get("pools")
        .and_then(|pools| pools.get("tank"))
        .unwrap();
    assert_eq!(tank.get("state").and_then(Json::as_str), Some("UNAVAIL"));
    let reason = tank.get("reason").and_then(Json::as_str).unwrap();
    assert!(reason.contains(&d0), "{reason}");

    // Other pools work as before.
    let list = ok_run(&env, &["list", "-H", "-o", "name"]);
    assert!(
        list.stdout.lines().any(|l| l == "good/vol"),
        "{}",
        list.describe()
    );
    env.create_volume("good/vol2", "8M", &[]);
    ok_run(&env, &["pool", "sync"]);
    for command in ["io", "zil"] {
        let stat = ok_run(&env, &["stat", command]);
        assert!(
            stat.stderr.contains("pool 'tank' is unavailable"),
            "{}",
            stat.describe()
        );
    }
    let io = ok_run(&env, &["stat", "io", "-H", "-p"]);
    assert!(
        io.stdout
            .lines()
            .any(|line| line.starts_with("good.pipeline.")),
        "{}",
        io.describe()
    );

    // Naming the pool where it must open is a clear error; destroy needs -f.
    let err = fails(&env, &["create", "-V", "8M", "tank/v"]);
    assert!(err.contains("unavailable") && err.contains(&d0), "{err}");
    let err = fails(&env, &["pool", "destroy", "tank"]);
    assert!(err.contains("destroy -f tank"), "{err}");
    let err = fails(&env, &["pool", "create", "--size", "128M", "tank", &d0]);
    assert!(err.contains("already imported"), "{err}");

    // Forgotten: export for one, destroy -f for the other.
    let export = ok_run(&env, &["pool", "export", "tank"]);
    assert!(export.stderr.contains("forgotten"), "{}", export.describe());
    ok_run(&env, &["pool", "destroy", "-f", "zeroed"]);
    let list = ok_run(&env, &["pool", "list", "-H"]);
    assert!(
        pool_row(&list.stdout, "tank").is_none() && pool_row(&list.stdout, "zeroed").is_none(),
        "{}",
        list.describe()
    );
    assert!(list.stderr.is_empty(), "{}", list.describe());

    // The names are free again.
    env.create_pool_of("128M");
    env.ok(&["pool", "create", "-f", "zeroed", &wiped]);
    assert_listed(&env, &[], &["tank", "good", "zeroed"]);
}

/// The acceptance's case: a pool the server exported at stop (still remembered) loses its
/// files. `pool list` shows it UNAVAIL and exits 0; `cairn serve` starts, reports it and serves
/// the healthy pool; forwarded commands see it UNAVAIL; `pool export` through the server
/// forgets it and `pool create` of the same name then works and is served.
#[test]
fn serve_starts_beside_an_unavailable_pool_and_forgets_it_on_export() {
    let env = Env::new();
    let (d0, other) = (env.dev("d0.img"), env.dev("other.img"));
    env.create_pool_of("128M");
    env.ok(&["pool", "create", "--size", "128M", "good", &other]);
    env.create_volume("good/vol", "16M", &[]);
    let mut server = env.serve();
    server.terminate();
    drop(server);

    std::fs::remove_file(&d0).unwrap();
    std::fs::remove_file(env.dev("d1.img")).unwrap();
    assert_listed(&env, &[("tank", &d0)], &["good"]);

    let mut server = env.serve();
    assert_eq!(server.announced_exports(), vec!["good/vol".to_string()]);
    assert!(
        server.stderr().contains("pool 'tank' is unavailable"),
        "the server reports the pool it does not serve:\n{}",
        server.logs()
    );
    let uri = server.uri("good/vol");
    qemu_io_ok(&uri, &["write -P 0x5a 0 64k", "flush"]);
    let read = qemu_io_ok(&uri, &["read -P 0x5a 0 64k"]);
    assert!(
        !read.stdout.contains("Pattern verification failed"),
        "{}",
        read.describe()
    );
    assert!(nbdinfo_list(&server.list_uri()).contains_key("good/vol"));

    // Forwarded to the server: the same answers.
    assert_listed(&env, &[("tank", &d0)], &["good"]);
    let status = ok_run(&env, &["pool", "status", "tank"]);
    assert!(
        status.stdout.contains("state: UNAVAIL"),
        "{}",
        status.describe()
    );
    ok_run(&env, &["pool", "export", "tank"]);
    let list = ok_run(&env, &["pool", "list", "-H"]);
    assert!(
        pool_row(&list.stdout, "tank").is_none(),
        "{}",
        list.describe()
    );

    env.create_pool_of("128M");
    env.create_volume("tank/vol", "16M", &[]);
    assert!(nbdinfo_list(&server.list_uri()).contains_key("tank/vol"));
    assert_listed(&env, &[], &["tank", "good"]);
    server.terminate();
    assert!(
        server.stderr().contains("exporting pool 'tank'"),
        "{}",
        server.logs()
    );
    env.assert_pool_check_clean();
}

/// With only an unavailable pool, `cairn serve` still starts (serving nothing) so the pool can
/// be looked at and forgotten through it; a pool whose device comes back is served again as
/// soon as a command names it.
#[test]
fn a_pool_whose_device_comes_back_is_served_again() {
    let env = Env::new();
    let dev = env.dev("solo.img");
    env.ok(&["pool", "create", "--size", "128M", "solo", &dev]);
    env.create_volume("solo/vol", "16M", &[]);
    let moved = env.path("solo.img.away");
    std::fs::rename(&dev, &moved).unwrap();

    let mut server = env.serve();
    assert_eq!(server.announced, 0, "{}", server.logs());
    assert_listed(&env, &[("solo", &dev)], &[]);

    std::fs::rename(&moved, &dev).unwrap();
    assert_listed(&env, &[], &["solo"]);
    assert!(nbdinfo_list(&server.list_uri()).contains_key("solo/vol"));
    server.terminate();
    env.ok(&["pool", "check", "solo"]);
}

/// A pool another process has open (here a server of another state directory that remembers
/// the same devices) is listed UNAVAIL with that reason, but it is busy, not lost: `pool export`
/// and `pool destroy -f` refuse to forget it.
#[test]
fn a_pool_in_use_by_another_process_is_not_forgotten() {
    let env = Env::new();
    env.create_pool_of("128M");
    let other_state = env.path("other-state");
    std::fs::create_dir(&other_state).unwrap();
    std::fs::copy(
        env.state().join("pools.cache"),
        other_state.join("pools.cache"),
    )
    .unwrap();
    let mut server = env.serve();
    let other = |args: &[&str]| {
        run_limited(
            std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
                .arg("--state-dir")
                .arg(&other_state)
                .args(args)
                .env_remove("CAIRN_STATE_DIR")
                .env("HOME", env.dir.path()),
            TOOL_TIME,
        )
    };
    let list = other(&["pool", "list", "-H"]).ok();
    assert!(
        list.stdout.starts_with("tank\t-") && list.stderr.contains("in use by another process"),
        "{}",
        list.describe()
    );
    for args in [
        &["pool", "export", "tank"][..],
        &["pool", "destroy", "-f", "tank"],
    ] {
        let run = other(args).failed();
        assert!(
            run.stderr.contains("another process has it open"),
            "{}",
            run.describe()
        );
    }
    assert!(
        other(&["pool", "list", "-H"])
            .ok()
            .stdout
            .starts_with("tank\t")
    );
    server.terminate();
    let list = other(&["pool", "list", "-H"]).ok();
    assert!(list.stdout.contains("ONLINE"), "{}", list.describe());
}
