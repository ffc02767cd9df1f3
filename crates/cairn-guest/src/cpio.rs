//! The initramfs format: cpio archives in the "newc" layout (ASCII hex headers, 4-byte
//! alignment), the only one the kernel unpacks. Archives may be concatenated and the kernel
//! unpacks them in order, which is how a boot adds its own `/init` and script to the cached
//! archive of busybox and modules without rewriting it.

/// An archive being written in memory (the largest is a few MB).
pub(crate) struct Archive {
    bytes: Vec<u8>,
    next_inode: u32,
}

/// `S_IFDIR`, `S_IFREG`, `S_IFCHR` of a mode.
const DIRECTORY: u32 = 0o040_000;
const REGULAR: u32 = 0o100_000;
const CHAR_DEVICE: u32 = 0o020_000;

impl Archive {
    pub(crate) fn new() -> Archive {
        Archive {
            bytes: Vec::new(),
            next_inode: 1,
        }
    }

    /// A directory (the parents of later entries must come first).
    pub(crate) fn directory(&mut self, path: &str) {
        self.entry(path, DIRECTORY | 0o755, (0, 0), &[]);
    }

    /// A regular file with permission bits `permissions` (e.g. 0o755).
    pub(crate) fn file(&mut self, path: &str, permissions: u32, contents: &[u8]) {
        self.entry(path, REGULAR | permissions, (0, 0), contents);
    }

    /// A character device node (`/dev/console` is 5:1).
    pub(crate) fn char_device(&mut self, path: &str, major: u32, minor: u32) {
        self.entry(path, CHAR_DEVICE | 0o600, (major, minor), &[]);
    }

    /// Ends the archive with its trailer; the result is 4-byte aligned.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.bytes
    }

    fn entry(&mut self, path: &str, mode: u32, rdev: (u32, u32), contents: &[u8]) {
        let name = path.trim_start_matches('/');
        let inode = self.next_inode;
        self.next_inode += 1;
        let links = if mode & DIRECTORY == DIRECTORY { 2 } else { 1 };
        // Sizes here are far below 4 GiB (the format's limit): the header fields are 32-bit.
        let fields: [u32; 13] = [
            inode,
            mode,
            0, // uid
            0, // gid
            links,
            0, // mtime
            contents.len() as u32,
            0, // device major
            0, // device minor
            rdev.0,
            rdev.1,
            name.len() as u32 + 1, // with its NUL
            0,                     // checksum (unused by "070701")
        ];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(contents);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_alignment() {
        let mut archive = Archive::new();
        archive.directory("/bin");
        archive.file("/bin/x", 0o755, b"hello");
        let bytes = archive.finish();
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(&bytes[..6], b"070701");
        // Header of the first entry: 6 + 13 * 8 bytes, then "bin\0", padded to 4.
        assert_eq!(&bytes[110..114], b"bin\0");
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("bin/x\0"), "{text:?}");
        assert!(text.contains("hello"), "{text:?}");
        assert!(text.contains("TRAILER!!!\0"), "{text:?}");
        // The file's mode (0o100755 = 0x81ed) in its header.
        assert!(text.contains("000081ed"), "{text:?}");
    }
}
