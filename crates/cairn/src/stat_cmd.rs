//! `cairn stat zil [POOL...]`: intent-log counters and latencies of every open volume, and the
//! use of each separate log device. Run against a server (the usual case) it shows what the
//! server has done since it opened the pools; without one, the counters start at zero.

use crate::ListFormat;
use crate::context::{Context, say, say_raw};
use crate::human;
use crate::table::{Column, Table};
use anyhow::Result;

pub fn zil(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let names = if pools.is_empty() {
        ctx.pool_names()?
    } else {
        pools.to_vec()
    };
    let mut logs = Table::new(vec![
        Column::left("DATASET"),
        Column::right("LANES"),
        Column::right("RECORDS"),
        Column::right("COMMITS"),
        Column::right("WAITED"),
        Column::right("BATCHES"),
        Column::right("BLOCKS"),
        Column::right("LOGGED"),
        Column::right("INPLACE"),
        Column::right("FILL%"),
        Column::right("FUA"),
        Column::right("FALLBACK"),
        Column::right("TXGSYNC"),
        Column::right("P50"),
        Column::right("P99"),
        Column::right("MAX"),
    ]);
    let mut devices = Table::new(vec![
        Column::left("LOG DEVICE"),
        Column::left("HEALTH"),
        Column::right("SIZE"),
        Column::right("ALLOC"),
        Column::right("WRITES"),
        Column::right("WRITTEN"),
        Column::right("FLUSHES"),
        Column::right("W-P50"),
        Column::right("W-P99"),
        Column::right("F-P50"),
    ]);
    let mut device_count = 0;
    for name in &names {
        let (stats, log_devices) = ctx.with_pool(name, false, |pool| {
            Ok((pool.intent_log_stats(), pool.log_devices()))
        })?;
        for (dataset, s) in stats {
            logs.push(vec![
                dataset,
                s.lanes.to_string(),
                s.records.to_string(),
                s.commits.to_string(),
                s.commit_waits.to_string(),
                s.batches.to_string(),
                s.blocks_written.to_string(),
                human::size(s.bytes_written, format.exact),
                human::size(s.in_place_bytes, format.exact),
                format!("{:.0}", s.block_fill_mean_percent),
                s.fua_writes.to_string(),
                s.fallbacks.to_string(),
                s.bulk_syncs.to_string(),
                human::micros(s.commit_latency_p50_us, format.exact),
                human::micros(s.commit_latency_p99_us, format.exact),
                human::micros(s.commit_latency_max_us, format.exact),
            ]);
        }
        for device in log_devices {
            device_count += 1;
            devices.push(vec![
                format!("{name}/{}", device.name),
                device.health.as_str().to_string(),
                human::size(device.size_bytes, format.exact),
                human::size(device.allocated_bytes, format.exact),
                device.writes.to_string(),
                human::size(device.write_bytes, format.exact),
                device.flushes.to_string(),
                human::micros(device.write_latency_p50_us, format.exact),
                human::micros(device.write_latency_p99_us, format.exact),
                human::micros(device.flush_latency_p50_us, format.exact),
            ]);
        }
    }
    if !format.scripted && ctx.served.is_none() {
        say!(
            ctx,
            "no server is running: counters cover only this command (start `cairn serve`)"
        );
    }
    say_raw!(ctx, "{}", logs.render(format.scripted));
    if device_count > 0 {
        say_raw!(ctx, "{}", devices.render(format.scripted));
    } else if !format.scripted {
        say!(
            ctx,
            "no separate log devices: log blocks go to the pool's disks"
        );
    }
    Ok(())
}
