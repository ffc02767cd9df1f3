//! Boots a guest running the script in the first argument (a path) and prints its console and
//! times: `cargo run -p cairn-guest --example guest_run -- CACHE_DIR SCRIPT`.

use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(cache), Some(script)) = (args.get(1), args.get(2)) else {
        return Err("usage: guest_run CACHE_DIR SCRIPT".into());
    };
    let guest = cairn_guest::Guest::prepare(std::path::Path::new(cache))?;
    let script = std::fs::read_to_string(script)?;
    let options = cairn_guest::BootOptions {
        timeout: Duration::from_secs(600),
        ..Default::default()
    };
    let run = guest.boot(&script, &options)?;
    println!("{}", run.console);
    println!(
        "exit {} boot {:?} total {:?}",
        run.exit_code, run.boot_time, run.total_time
    );
    Ok(())
}
