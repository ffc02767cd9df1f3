//! Rebuilds the device images a crash test left behind as a write log.
//!
//! A crash test that fails keeps its round's write logs (`*.wlog`) and cut point (`cut.txt`) in
//! a directory named in its failure message. This rebuilds the crashed images from them:
//!
//! ```text
//! cargo run -p cairn-emulate --example replay-cut -- DIR [OUT]
//! cairn pool import -d OUT tank && cairn pool check tank
//! ```
//!
//! OUT defaults to `DIR/crashed`. The images are exactly the bytes that had reached the emulated
//! media when the power went.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (dir, out) = match args.as_slice() {
        [dir] => (PathBuf::from(dir), PathBuf::from(dir).join("crashed")),
        [dir, out] => (PathBuf::from(dir), PathBuf::from(out)),
        _ => {
            eprintln!(
                "usage: replay-cut DIR [OUT]  (DIR holds the *.wlog files a crash test kept)"
            );
            return ExitCode::from(2);
        }
    };
    if let Ok(cut) = std::fs::read_to_string(dir.join("cut.txt")) {
        print!("{cut}");
    }
    match cairn_emulate::record::replay(&dir, &out) {
        Ok(images) => {
            for image in images {
                println!(
                    "{}: {} records{}",
                    image.image.display(),
                    image.records,
                    if image.truncated {
                        " (the log ended mid-record)"
                    } else {
                        ""
                    }
                );
            }
            println!(
                "inspect with: cairn pool import -d {} <pool>",
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("replay-cut: {err}");
            ExitCode::FAILURE
        }
    }
}
