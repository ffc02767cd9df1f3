//! `nbd-load`: synchronous random writes over NBD with the FUA flag, which fio's nbd engine
//! cannot send (it has no per-write flags; its `fsync=1` adds a FLUSH round trip per write).
//!
//! ```text
//! nbd-load (--socket PATH | --tcp HOST:PORT) [--export NAME] [--bs BYTES] [--connections N]
//!          [--qd N] [--seconds S] [--ramp S] [--mode fua|flush|none] [--seed N]
//! ```
//!
//! Opens N connections (over the Unix socket, or TCP with Nagle off: bench/nfs.sh compares
//! with NFS over TCP on the same transport) (one thread each), keeps up to QD writes in flight on each, at random
//! block-aligned offsets over the whole export, every write carrying NBD_CMD_FLAG_FUA (`fua`),
//! or followed by a FLUSH once answered (`flush`), or neither (`none`). Counts completed writes
//! after the ramp and prints one line of `key=value` pairs: iops, mb_per_s, p50_us, p99_us
//! (submission to reply of the write, plus its flush in `flush` mode). Any error reply or
//! protocol violation ends the run with a non-zero exit: a benchmark of a failing server is no
//! benchmark.

use anyhow::{Context, Result, bail, ensure};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_FLAG_FUA: u16 = 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Fua,
    Flush,
    None,
}

#[derive(Clone, Debug)]
struct Args {
    socket: String,
    tcp: String,
    export: String,
    block_bytes: u32,
    connections: usize,
    queue_depth: usize,
    seconds: f64,
    ramp_seconds: f64,
    mode: Mode,
    seed: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        socket: String::new(),
        tcp: String::new(),
        export: String::new(),
        block_bytes: 8192,
        connections: 1,
        queue_depth: 1,
        seconds: 10.0,
        ramp_seconds: 2.0,
        mode: Mode::Fua,
        seed: 1,
    };
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let mut value = || {
            words
                .next()
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--socket" => args.socket = value()?,
            "--tcp" => args.tcp = value()?,
            "--export" => args.export = value()?,
            "--bs" => args.block_bytes = value()?.parse()?,
            "--connections" => args.connections = value()?.parse()?,
            "--qd" => args.queue_depth = value()?.parse()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--ramp" => args.ramp_seconds = value()?.parse()?,
            "--seed" => args.seed = value()?.parse()?,
            "--mode" => {
                args.mode = match value()?.as_str() {
                    "fua" => Mode::Fua,
                    "flush" => Mode::Flush,
                    "none" => Mode::None,
                    other => bail!("unknown mode {other} (fua, flush, none)"),
                }
            }
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        args.socket.is_empty() != args.tcp.is_empty(),
        "one of --socket and --tcp is required"
    );
    ensure!(
        args.block_bytes >= 512 && args.block_bytes.is_power_of_two(),
        "--bs must be a power of two >= 512"
    );
    ensure!(args.connections >= 1 && args.queue_depth >= 1, "need >= 1");
    Ok(args)
}

/// A connected socket, Unix or TCP.
trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

struct Connection {
    stream: Box<dyn Stream>,
    size: u64,
}

fn read_array<const N: usize>(stream: &mut dyn Stream) -> Result<[u8; N]> {
    let mut raw = [0u8; N];
    stream.read_exact(&mut raw)?;
    Ok(raw)
}

fn connect(args: &Args) -> Result<Connection> {
    let mut stream: Box<dyn Stream> = if args.tcp.is_empty() {
        let stream = UnixStream::connect(&args.socket)
            .with_context(|| format!("connecting to {}", args.socket))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Box::new(stream)
    } else {
        let stream =
            TcpStream::connect(&args.tcp).with_context(|| format!("connecting to {}", args.tcp))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.set_nodelay(true)?;
        Box::new(stream)
    };
    ensure!(
        u64::from_be_bytes(read_array(&mut *stream)?) == NBDMAGIC,
        "not an NBD server"
    );
    ensure!(
        u64::from_be_bytes(read_array(&mut *stream)?) == IHAVEOPT,
        "not a newstyle server"
    );
    let handshake = u16::from_be_bytes(read_array(&mut *stream)?);
    ensure!(handshake & 1 != 0, "server is not fixed newstyle");
    let client_flags: u32 = 1 | (u32::from(handshake) & 2);
    stream.write_all(&client_flags.to_be_bytes())?;
    let mut data = Vec::new();
    data.extend_from_slice(&(args.export.len() as u32).to_be_bytes());
    data.extend_from_slice(args.export.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    let mut option = Vec::new();
    option.extend_from_slice(&IHAVEOPT.to_be_bytes());
    option.extend_from_slice(&OPT_GO.to_be_bytes());
    option.extend_from_slice(&(data.len() as u32).to_be_bytes());
    option.extend_from_slice(&data);
    stream.write_all(&option)?;
    let mut size = None;
    loop {
        ensure!(
            u64::from_be_bytes(read_array(&mut *stream)?) == OPTION_REPLY_MAGIC,
            "bad option reply"
        );
        let _option = u32::from_be_bytes(read_array(&mut *stream)?);
        let kind = u32::from_be_bytes(read_array(&mut *stream)?);
        let len = u32::from_be_bytes(read_array(&mut *stream)?) as usize;
        ensure!(len < 1 << 20, "option reply of {len} bytes");
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload)?;
        ensure!(
            kind & (1 << 31) == 0,
            "server refused export '{}'",
            args.export
        );
        match kind {
            REP_INFO if payload.len() >= 12 && payload[..2] == [0, 0] => {
                size = Some(u64::from_be_bytes(payload[2..10].try_into()?));
            }
            REP_INFO => {}
            REP_ACK => break,
            other => bail!("unexpected option reply {other:#x}"),
        }
    }
    Ok(Connection {
        stream,
        size: size.context("no export size")?,
    })
}

fn request(command: u16, flags: u16, cookie: u64, offset: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(28 + data.len());
    out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&command.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

fn read_reply(stream: &mut dyn Stream) -> Result<u64> {
    let header: [u8; 16] = read_array(stream)?;
    ensure!(
        u32::from_be_bytes(header[0..4].try_into()?) == SIMPLE_REPLY_MAGIC,
        "bad reply magic"
    );
    let error = u32::from_be_bytes(header[4..8].try_into()?);
    ensure!(error == 0, "server replied with error {error}");
    Ok(u64::from_be_bytes(header[8..16].try_into()?))
}

/// splitmix64
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One connection's run: completed writes after the ramp and their latencies (µs).
fn run_connection(args: &Args, index: usize, start: Instant) -> Result<Vec<u64>> {
    let mut conn = connect(args)?;
    let blocks = conn.size / u64::from(args.block_bytes);
    ensure!(blocks > 0, "export smaller than one block");
    let mut rng = args.seed.wrapping_mul(1_000_003).wrapping_add(index as u64);
    let mut data = vec![0u8; args.block_bytes as usize];
    for chunk in data.chunks_mut(8) {
        chunk.copy_from_slice(&next_random(&mut rng).to_le_bytes()[..chunk.len()]);
    }
    let ramp_end = start + Duration::from_secs_f64(args.ramp_seconds);
    let end = ramp_end + Duration::from_secs_f64(args.seconds);
    let mut latencies = Vec::new();
    let mut in_flight: std::collections::BTreeMap<u64, (Instant, bool)> = Default::default();
    let mut cookie = 0u64;
    loop {
        let now = Instant::now();
        if now < end && in_flight.len() < args.queue_depth {
            cookie += 1;
            let offset = next_random(&mut rng) % blocks * u64::from(args.block_bytes);
            let flags = if args.mode == Mode::Fua {
                CMD_FLAG_FUA
            } else {
                0
            };
            conn.stream
                .write_all(&request(CMD_WRITE, flags, cookie, offset, &data))?;
            in_flight.insert(cookie, (now, false));
            continue;
        }
        if in_flight.is_empty() {
            break;
        }
        let answered = read_reply(&mut *conn.stream)?;
        let (submitted, is_flush) = in_flight
            .remove(&answered)
            .with_context(|| format!("reply to unknown cookie {answered}"))?;
        if args.mode == Mode::Flush && !is_flush {
            // The write is acknowledged; it counts once its flush is.
            cookie += 1;
            conn.stream
                .write_all(&request(CMD_FLUSH, 0, cookie, 0, &[]))?;
            in_flight.insert(cookie, (submitted, true));
            continue;
        }
        let done = Instant::now();
        if submitted >= ramp_end && done <= end {
            latencies.push(done.duration_since(submitted).as_micros() as u64);
        }
    }
    let _ = conn
        .stream
        .write_all(&request(CMD_DISC, 0, cookie + 1, 0, &[]));
    Ok(latencies)
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let start = Instant::now();
    let results: Vec<Result<Vec<u64>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.connections)
            .map(|index| {
                let args = &args;
                scope.spawn(move || run_connection(args, index, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("connection thread panicked"))
            .collect()
    });
    let mut latencies = Vec::new();
    for result in results {
        latencies.extend(result?);
    }
    ensure!(
        !latencies.is_empty(),
        "no write completed in the measured window"
    );
    latencies.sort_unstable();
    let percentile = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    let iops = latencies.len() as f64 / args.seconds;
    println!(
        "iops={iops:.1} mb_per_s={:.3} p50_us={} p99_us={} writes={} mode={:?} bs={} connections={} qd={}",
        iops * f64::from(args.block_bytes) / 1e6,
        percentile(0.5),
        percentile(0.99),
        latencies.len(),
        args.mode,
        args.block_bytes,
        args.connections,
        args.queue_depth
    );
    Ok(())
}
