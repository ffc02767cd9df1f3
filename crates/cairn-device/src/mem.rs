//! `MemDevice`: a sparse device in RAM.
//!
//! The backing of choice for tests and what-if runs that must not touch the host's disks: a
//! 128 GiB device costs nothing until written, and its `flush` is free, so device models on a
//! virtual clock measure only the model. Storage is a map of 4 KiB pages; a page never written
//! (or discarded whole) reads as zeros.
//!
//! Invariant: every stored page is exactly `PAGE_BYTES` long and lies inside the device.
//! Everything in it is lost when the value is dropped, so it models nothing durable by itself;
//! wrap it in `cairn-emulate`'s `EmulatedDevice` to get a device model's durability rules.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::device::{Device, DeviceError, check_range};

const PAGE_BYTES: u64 = 4096;

/// A sparse in-memory device.
pub struct MemDevice {
    name: String,
    size_bytes: u64,
    pages: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl MemDevice {
    pub fn new(size_bytes: u64) -> MemDevice {
        MemDevice::named("mem", size_bytes)
    }

    /// A device whose `describe()` is `name` (handy when a test has several).
    pub fn named(name: &str, size_bytes: u64) -> MemDevice {
        MemDevice {
            name: name.to_string(),
            size_bytes,
            pages: Mutex::new(BTreeMap::new()),
        }
    }

    /// Bytes of RAM held by written pages.
    pub fn resident_bytes(&self) -> u64 {
        self.pages.lock().len() as u64 * PAGE_BYTES
    }
}

/// Calls `f(page_index, offset_in_page, chunk_len)` for each page piece of `[offset, offset+len)`.
fn for_each_page_piece(offset: u64, len: u64, mut f: impl FnMut(u64, usize, usize)) {
    let end = offset + len;
    let mut pos = offset;
    while pos < end {
        let page = pos / PAGE_BYTES;
        let in_page = (pos % PAGE_BYTES) as usize;
        let chunk = (PAGE_BYTES - pos % PAGE_BYTES).min(end - pos) as usize;
        f(page, in_page, chunk);
        pos += chunk as u64;
    }
}

impl Device for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(self, "read", offset, total)?;
        let pages = self.pages.lock();
        let mut pos = offset;
        for buf in bufs.iter_mut() {
            let mut done = 0usize;
            for_each_page_piece(pos, buf.len() as u64, |page, in_page, chunk| {
                let dst = &mut buf[done..done + chunk];
                match pages.get(&page) {
                    Some(p) => dst.copy_from_slice(&p[in_page..in_page + chunk]),
                    None => dst.fill(0),
                }
                done += chunk;
            });
            pos += buf.len() as u64;
        }
        Ok(())
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(self, "write", offset, total)?;
        let mut pages = self.pages.lock();
        let mut pos = offset;
        for buf in bufs {
            let mut done = 0usize;
            for_each_page_piece(pos, buf.len() as u64, |page, in_page, chunk| {
                let p = pages
                    .entry(page)
                    .or_insert_with(|| vec![0u8; PAGE_BYTES as usize].into_boxed_slice());
                p[in_page..in_page + chunk].copy_from_slice(&buf[done..done + chunk]);
                done += chunk;
            });
            pos += buf.len() as u64;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range(self, "discard", offset, len)?;
        let mut pages = self.pages.lock();
        for_each_page_piece(offset, len, |page, in_page, chunk| {
            if chunk as u64 == PAGE_BYTES {
                pages.remove(&page);
            } else if let Some(p) = pages.get_mut(&page) {
                p[in_page..in_page + chunk].fill(0);
            }
        });
        Ok(())
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_round_trip_across_pages() {
        let dev = MemDevice::new(1 << 40);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        dev.write_vectored_at(4090, &[&data[..6], &data[6..]])
            .unwrap();
        let mut back = vec![0u8; 10_000];
        dev.read_at(4090, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(dev.resident_bytes(), 4 * PAGE_BYTES);
        let mut far = [7u8; 16];
        dev.read_at((1 << 40) - 16, &mut far).unwrap();
        assert_eq!(far, [0u8; 16], "unwritten space reads as zeros");
    }

    #[test]
    fn discard_zeroes_and_frees() {
        let dev = MemDevice::new(1 << 20);
        dev.write_at(0, &[0xAB; 3 * 4096]).unwrap();
        dev.discard(100, 8192).unwrap();
        let mut back = vec![0u8; 3 * 4096];
        dev.read_at(0, &mut back).unwrap();
        assert!(back[..100].iter().all(|&b| b == 0xAB));
        assert!(back[100..8292].iter().all(|&b| b == 0));
        assert!(back[8292..].iter().all(|&b| b == 0xAB));
        assert_eq!(
            dev.resident_bytes(),
            2 * PAGE_BYTES,
            "the whole middle page is freed"
        );
        assert!(matches!(
            dev.write_at((1 << 20) - 1, &[1, 2]),
            Err(DeviceError::OutOfRange { .. })
        ));
    }
}
