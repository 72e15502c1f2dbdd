//! Zip archives as far as Inspect's `.eval` logs need. Reading one held in memory: the central
//! directory (ZIP64 too), and entries stored, deflated or compressed with zstd (method 93),
//! each inflated up to a cap and checked against its CRC-32. Building one entry by entry
//! ([`ZipBuilder`]: deflated, no ZIP64). No file, clock or randomness: the caller reads and
//! writes the bytes.

/// One entry of the central directory.
pub(crate) struct Entry<'a> {
    /// The entry's name (a path inside the archive).
    pub(crate) name: String,
    method: u16,
    crc: u32,
    /// The inflated size the archive declares.
    pub(crate) size: u64,
    data: &'a [u8],
}

/// Why an entry could not be read.
#[derive(Debug)]
pub(crate) enum ZipError {
    /// The archive is damaged or uses what this reader does not (encryption, a compression
    /// method other than stored, deflate and zstd).
    Bad(String),
    /// The entry inflates to more than the bytes left.
    TooLarge,
}

const EOCD: u32 = 0x0605_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_EOCD: u32 = 0x0606_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

fn bad(what: &str) -> ZipError {
    ZipError::Bad(what.to_string())
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, ZipError> {
    at.checked_add(2)
        .and_then(|end| b.get(at..end))
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| bad("truncated"))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, ZipError> {
    at.checked_add(4)
        .and_then(|end| b.get(at..end))
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| bad("truncated"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, ZipError> {
    let lo = u32_at(b, at)?;
    let hi = u32_at(b, at + 4)?;
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

fn offset(v: u64) -> Result<usize, ZipError> {
    usize::try_from(v).map_err(|_| bad("an offset past the end"))
}

/// The entries of the archive `b`, in central-directory order.
pub(crate) fn entries(b: &[u8]) -> Result<Vec<Entry<'_>>, ZipError> {
    // The end-of-central-directory record: the last 22 bytes, or before a comment of at most
    // 64 KiB.
    let earliest = b.len().saturating_sub(22 + 0xffff);
    let eocd = (earliest..=b.len().saturating_sub(22))
        .rev()
        .find(|&i| u32_at(b, i).ok() == Some(EOCD))
        .ok_or_else(|| bad("no end of central directory (not a zip, or cut short)"))?;
    let mut count = u64::from(u16_at(b, eocd + 10)?);
    let mut start = u64::from(u32_at(b, eocd + 16)?);
    if count == 0xffff || start == 0xffff_ffff {
        let locator = eocd
            .checked_sub(20)
            .filter(|&l| u32_at(b, l).ok() == Some(ZIP64_LOCATOR))
            .ok_or_else(|| bad("a ZIP64 archive without its locator"))?;
        let record = offset(u64_at(b, locator + 8)?)?;
        if u32_at(b, record)? != ZIP64_EOCD {
            return Err(bad("a ZIP64 locator pointing at no ZIP64 record"));
        }
        count = u64_at(b, record + 32)?;
        start = u64_at(b, record + 48)?;
    }
    let mut at = offset(start)?;
    // Each central entry takes at least 46 bytes: a count the bytes cannot hold is a lie.
    if count > (b.len() / 46) as u64 {
        return Err(bad("more entries declared than the archive can hold"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if u32_at(b, at)? != CENTRAL {
            return Err(bad("a damaged central directory"));
        }
        let flags = u16_at(b, at + 8)?;
        let method = u16_at(b, at + 10)?;
        let crc = u32_at(b, at + 16)?;
        let mut compressed = u64::from(u32_at(b, at + 20)?);
        let mut size = u64::from(u32_at(b, at + 24)?);
        let name_len = usize::from(u16_at(b, at + 28)?);
        let extra_len = usize::from(u16_at(b, at + 30)?);
        let comment_len = usize::from(u16_at(b, at + 32)?);
        let mut local = u64::from(u32_at(b, at + 42)?);
        let name_bytes = b
            .get(at + 46..at + 46 + name_len)
            .ok_or_else(|| bad("truncated"))?;
        let name = String::from_utf8_lossy(name_bytes).into_owned();
        let extra = b
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or_else(|| bad("truncated"))?;
        // The ZIP64 extra field holds the 64-bit values of the fields set to all ones.
        let mut e = 0;
        while e + 4 <= extra.len() {
            let id = u16_at(extra, e)?;
            let len = usize::from(u16_at(extra, e + 2)?);
            if id == 0x0001 {
                let mut f = e + 4;
                for field in [&mut size, &mut compressed, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64_at(extra, f)?;
                        f += 8;
                    }
                }
            }
            e += 4 + len;
        }
        if flags & 1 != 0 {
            return Err(ZipError::Bad(format!("{name}: encrypted")));
        }
        let local = offset(local)?;
        if u32_at(b, local)? != LOCAL {
            return Err(ZipError::Bad(format!("{name}: a damaged local header")));
        }
        let data_start = local + 30 + usize::from(u16_at(b, local + 26)?);
        let data_start = data_start + usize::from(u16_at(b, local + 28)?);
        let data = data_start
            .checked_add(offset(compressed)?)
            .and_then(|end| b.get(data_start..end))
            .ok_or_else(|| ZipError::Bad(format!("{name}: its data runs past the end")))?;
        out.push(Entry {
            name,
            method,
            crc,
            size,
            data,
        });
        at += 46 + name_len + extra_len + comment_len;
    }
    Ok(out)
}

/// The inflated bytes of `entry`, at most `left` of them (else [`ZipError::TooLarge`], found
/// before more than `left` bytes are produced, whatever the archive declares).
pub(crate) fn inflate(entry: &Entry<'_>, left: u64) -> Result<Vec<u8>, ZipError> {
    if entry.size > left {
        return Err(ZipError::TooLarge);
    }
    let failed = |e: String| ZipError::Bad(format!("{}: {e}", entry.name));
    let left_usize = usize::try_from(left).unwrap_or(usize::MAX);
    let out = match entry.method {
        0 if entry.data.len() as u64 > left => return Err(ZipError::TooLarge),
        0 => entry.data.to_vec(),
        8 => {
            use miniz_oxide::inflate::TINFLStatus;
            match miniz_oxide::inflate::decompress_to_vec_with_limit(entry.data, left_usize) {
                Ok(v) => v,
                Err(e) if e.status == TINFLStatus::HasMoreOutput => return Err(ZipError::TooLarge),
                Err(e) => return Err(failed(format!("deflate: {e}"))),
            }
        }
        93 => {
            let mut decoder = ruzstd::decoding::FrameDecoder::new();
            // The window (history) a frame asks for is allocated: no more than the cap, but
            // zstd's usual windows (2 MiB at Inspect's level, 8 MiB at high levels) always.
            decoder.set_max_window_size(
                left.clamp(8 << 20, ruzstd::decoding::DEFAULT_MAX_WINDOW_SIZE),
            );
            // A buffer of the declared size (within the cap): more output is an error.
            let mut out = Vec::with_capacity(offset(entry.size)?);
            match decoder.decode_all_to_vec(entry.data, &mut out) {
                Ok(()) => out,
                Err(ruzstd::decoding::errors::FrameDecoderError::TargetTooSmall) => {
                    return Err(failed(format!(
                        "it inflates to more than the {} bytes the zip declares",
                        entry.size
                    )))
                }
                Err(e) => return Err(failed(format!("zstd: {e}"))),
            }
        }
        m => return Err(failed(format!("compression method {m} is not supported"))),
    };
    if crc32(&out) != entry.crc {
        return Err(failed("its CRC-32 does not match (damaged)".into()));
    }
    Ok(out)
}

/// The CRC-32 (IEEE) table, built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |c, &b| {
        CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_archive_reads_back() {
        let mut b = ZipBuilder::default();
        let mut bytes = b.entry("a.json", b"{\"x\": 1}").expect("a");
        let big = "y".repeat(100_000);
        bytes.extend(b.entry("dir/b.txt", big.as_bytes()).expect("b"));
        bytes.extend(b.finish().expect("finish"));
        let e = entries(&bytes).expect("entries");
        let names: Vec<&str> = e.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a.json", "dir/b.txt"]);
        assert_eq!(inflate(&e[0], 1 << 20).expect("a"), b"{\"x\": 1}");
        assert_eq!(inflate(&e[1], 1 << 20).expect("b"), big.as_bytes());
        assert!(bytes.len() < 2_000, "deflated: {}", bytes.len());
        assert!(matches!(inflate(&e[1], 1_000), Err(ZipError::TooLarge)));
    }

    #[test]
    fn crc32_is_the_ieee_one() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }
}

/// A zip archive built entry by entry, each deflated, for the caller to write as it goes:
/// [`ZipBuilder::entry`] returns an entry's bytes (its local header and data),
/// [`ZipBuilder::finish`] the central directory that ends the archive. No ZIP64: an archive
/// whose offsets or sizes pass 4 GiB, or with more than 65,535 entries, is refused.
#[derive(Default)]
pub(crate) struct ZipBuilder {
    central: Vec<u8>,
    entries: u16,
    offset: u64,
}

/// The archive would need ZIP64 (4 GiB, or 65,535 entries).
#[derive(Debug)]
pub(crate) struct NeedsZip64;

impl ZipBuilder {
    /// The bytes of entry `name` holding `data`, deflated.
    pub(crate) fn entry(&mut self, name: &str, data: &[u8]) -> Result<Vec<u8>, NeedsZip64> {
        let compressed = miniz_oxide::deflate::compress_to_vec(data, 6);
        let small = |n: u64| u32::try_from(n).map_err(|_| NeedsZip64);
        let size = small(data.len() as u64)?;
        let csize = small(compressed.len() as u64)?;
        let offset = small(self.offset)?;
        let name_len = u16::try_from(name.len()).map_err(|_| NeedsZip64)?;
        self.entries = self.entries.checked_add(1).ok_or(NeedsZip64)?;
        let crc = crc32(data);
        // Version 2.0, flag bit 11 (UTF-8 names), deflate, a fixed time (1980-01-01).
        let common = |out: &mut Vec<u8>| {
            out.extend_from_slice(&0x0800u16.to_le_bytes());
            out.extend_from_slice(&8u16.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&0x0021u16.to_le_bytes());
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&csize.to_le_bytes());
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&name_len.to_le_bytes());
            out.extend_from_slice(&0u16.to_le_bytes());
        };
        let mut local = Vec::with_capacity(30 + name.len() + compressed.len());
        local.extend_from_slice(&LOCAL.to_le_bytes());
        local.extend_from_slice(&20u16.to_le_bytes());
        common(&mut local);
        local.extend_from_slice(name.as_bytes());
        local.extend_from_slice(&compressed);
        let c = &mut self.central;
        c.extend_from_slice(&CENTRAL.to_le_bytes());
        c.extend_from_slice(&20u16.to_le_bytes());
        c.extend_from_slice(&20u16.to_le_bytes());
        common(c);
        // Comment length, disk, internal and external attributes, the local header's offset.
        c.extend_from_slice(&0u16.to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes());
        c.extend_from_slice(&0u32.to_le_bytes());
        c.extend_from_slice(&offset.to_le_bytes());
        c.extend_from_slice(name.as_bytes());
        self.offset += local.len() as u64;
        small(self.offset)?;
        Ok(local)
    }

    /// The central directory and its end record: the archive's last bytes.
    pub(crate) fn finish(self) -> Result<Vec<u8>, NeedsZip64> {
        let small = |n: u64| u32::try_from(n).map_err(|_| NeedsZip64);
        let mut out = self.central;
        let size = small(out.len() as u64)?;
        let start = small(self.offset)?;
        small(self.offset + out.len() as u64)?;
        out.extend_from_slice(&EOCD.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&self.entries.to_le_bytes());
        out.extend_from_slice(&self.entries.to_le_bytes());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        Ok(out)
    }
}
