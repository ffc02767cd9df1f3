//! Helpers shared by the send and receive tests of the CLI (`send_receive_*.rs`,
//! `send_digest_cli.rs`): `cairn send` into a file and `cairn receive` from one, as real
//! processes, and a stream's records decoded with `cairn_format` (to compare two streams
//! without their END, which names the snapshot per pool).

#![allow(dead_code)]

use crate::nbd_common::{CommandOutcome, Env, outcome};
use cairn_format::send_stream::{StreamReader, StreamRecord};
use std::process::Stdio;

/// Every record of a stream but END.
pub fn records(stream: &[u8]) -> Vec<StreamRecord> {
    let mut input = stream;
    let mut reader = StreamReader::new(&mut input).expect("a stream");
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().expect("an intact stream") {
        if !matches!(record, StreamRecord::End { .. }) {
            out.push(record);
        }
    }
    out
}

/// `cairn send ARGS > FILE` (FILE in the test's directory, stdin closed).
pub fn send_to(env: &Env, args: &[&str], file: &str) -> CommandOutcome {
    let out = std::fs::File::create(env.path(file)).unwrap();
    let mut cmd = env.cairn_command();
    cmd.arg("send").args(args).stdout(out).stdin(Stdio::null());
    outcome(cmd)
}

/// `cairn receive ARGS < FILE`.
pub fn receive_from(env: &Env, args: &[&str], file: &str) -> CommandOutcome {
    let input = std::fs::File::open(env.path(file)).unwrap();
    let mut cmd = env.cairn_command();
    cmd.arg("receive")
        .args(args)
        .stdin(Stdio::from(input))
        .stdout(Stdio::null());
    outcome(cmd)
}
