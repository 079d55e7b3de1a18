//! A part of a layer as a file: states sorted by key, each its packed masks
//! and its orbit total T.
//!
//! ```text
//! header   16 bytes  "CLAYERS1", c, rows, 6 zero bytes
//! records  each      2c bytes of key (mask ranks, first digit first),
//!                    T as LEB128 (7 bits a byte, low first)
//! trailer  16 bytes  the number of states (u64, little-endian), "CLAYEND1"
//! ```
//!
//! A state costs 2c + ceil(bits of T / 7) bytes: 12 + 4 to 12 + 7 for 2 x 6
//! (BENCHMARKS.md has the measured sizes). Files are written once, under a
//! temporary name, and read back in full: every byte read is hashed, and a
//! reader that finds the file's SHA-256, size or state count other than its
//! manifest says fails at the end, before its caller publishes anything (one
//! that finds keys out of order fails at once), naming the file.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use census_math::shapes::layer_jobs::StateKey;
use sha2::{Digest, Sha256};

use crate::PlaneError;

const MAGIC: &[u8; 8] = b"CLAYERS1";
const END: &[u8; 8] = b"CLAYEND1";
const HEADER: u64 = 16;
const TRAILER: u64 = 16;
/// The longest record: 12 bytes of key and 19 of LEB128 (u128).
const LONGEST_RECORD: usize = 12 + 19;

/// One file as a manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// The part of the layer it holds.
    pub part: u32,
    /// Its name in the job's directory.
    pub name: String,
    pub states: u64,
    pub bytes: u64,
    pub sha256: [u8; 32],
}

/// Writes one sorted part file, hashing as it goes.
pub struct LayerWriter {
    out: BufWriter<File>,
    path: PathBuf,
    sha: Sha256,
    bytes: u64,
    states: u64,
    key_bytes: usize,
    last: Option<StateKey>,
}

impl LayerWriter {
    /// Creates `path` (which must not exist) for states of layer `rows` of
    /// 2 x c.
    pub fn create(path: &Path, c: usize, rows: usize) -> Result<LayerWriter, PlaneError> {
        let file = File::options().write(true).create_new(true).open(path).map_err(|e| PlaneError::io(path, e))?;
        let mut writer = LayerWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            sha: Sha256::new(),
            bytes: 0,
            states: 0,
            key_bytes: 2 * c,
            last: None,
        };
        let mut header = [0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        (header[8], header[9]) = (c as u8, rows as u8);
        writer.write(&header)?;
        Ok(writer)
    }

    /// Adds a state; keys must come strictly ascending.
    pub fn push(&mut self, key: StateKey, total: u128) -> Result<(), PlaneError> {
        if self.last.is_some_and(|last| last >= key) {
            return Err(PlaneError::corrupt(&self.path, format!("key {key:#x} written out of order")));
        }
        self.last = Some(key);
        let mut record = [0u8; LONGEST_RECORD];
        record[..self.key_bytes].copy_from_slice(&key.to_be_bytes()[16 - self.key_bytes..]);
        let mut length = self.key_bytes;
        let mut rest = total;
        loop {
            let byte = (rest & 0x7f) as u8;
            rest >>= 7;
            record[length] = byte | if rest == 0 { 0 } else { 0x80 };
            length += 1;
            if rest == 0 {
                break;
            }
        }
        self.write(&record[..length])?;
        self.states += 1;
        Ok(())
    }

    /// Writes the trailer, flushes and syncs: the file's entry for a
    /// manifest.
    pub fn finish(mut self, part: u32) -> Result<FileEntry, PlaneError> {
        let mut trailer = [0u8; TRAILER as usize];
        trailer[..8].copy_from_slice(&self.states.to_le_bytes());
        trailer[8..].copy_from_slice(END);
        self.write(&trailer)?;
        let file = self.out.into_inner().map_err(|e| PlaneError::io(&self.path, e.into_error()))?;
        file.sync_all().map_err(|e| PlaneError::io(&self.path, e))?;
        let name = self.path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(FileEntry { part, name, states: self.states, bytes: self.bytes, sha256: self.sha.finalize().into() })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), PlaneError> {
        self.sha.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes).map_err(|e| PlaneError::io(&self.path, e))
    }
}

/// Reads one part file, state by state, checking it against its entry as
/// it goes and at the end.
pub struct LayerReader {
    input: File,
    path: PathBuf,
    expected: Option<FileEntry>,
    sha: Sha256,
    buffer: Vec<u8>,
    at: usize,
    /// Bytes of the file not yet in the buffer.
    unread: u64,
    /// Bytes of records not yet parsed.
    records_left: u64,
    key_bytes: usize,
    states: u64,
    /// The last key read: keys must ascend strictly, so that a merge of
    /// several readers never meets a disorder it cannot blame on a file.
    last: Option<StateKey>,
    done: bool,
}

impl LayerReader {
    /// Opens `path`, a part of layer `rows` of 2 x c. With `expected`, the
    /// file must be exactly that (size at once; SHA-256 and states at the
    /// end); without, it is a file this process wrote itself.
    pub fn open(path: &Path, c: usize, rows: usize, expected: Option<&FileEntry>) -> Result<LayerReader, PlaneError> {
        let mut input = File::open(path).map_err(|e| PlaneError::missing_or_io(path, e))?;
        let size = input.metadata().map_err(|e| PlaneError::io(path, e))?.len();
        if let Some(entry) = expected
            && entry.bytes != size
        {
            return Err(PlaneError::corrupt(path, format!("{size} bytes, its manifest says {}", entry.bytes)));
        }
        if size < HEADER + TRAILER {
            return Err(PlaneError::corrupt(path, format!("{size} bytes is too short for a layer file")));
        }
        let mut header = [0u8; HEADER as usize];
        input.read_exact(&mut header).map_err(|e| PlaneError::io(path, e))?;
        if &header[..8] != MAGIC || usize::from(header[8]) != c || usize::from(header[9]) != rows {
            return Err(PlaneError::corrupt(
                path,
                format!("not a layer file of 2 x {c} layer {rows} (header {:?})", &header[..10]),
            ));
        }
        let mut sha = Sha256::new();
        sha.update(header);
        Ok(LayerReader {
            input,
            path: path.to_path_buf(),
            expected: expected.cloned(),
            sha,
            buffer: Vec::with_capacity(1 << 20),
            at: 0,
            unread: size - HEADER,
            records_left: size - HEADER - TRAILER,
            key_bytes: 2 * c,
            states: 0,
            last: None,
            done: false,
        })
    }

    /// Keeps at least `wanted` bytes (or all that is left) in the buffer.
    fn fill(&mut self, wanted: usize) -> Result<(), PlaneError> {
        if self.buffer.len() - self.at >= wanted || self.unread == 0 {
            return Ok(());
        }
        self.buffer.drain(..self.at);
        self.at = 0;
        let chunk = (1u64 << 20).min(self.unread) as usize;
        let start = self.buffer.len();
        self.buffer.resize(start + chunk, 0);
        self.input.read_exact(&mut self.buffer[start..]).map_err(|e| PlaneError::io(&self.path, e))?;
        self.sha.update(&self.buffer[start..]);
        self.unread -= chunk as u64;
        Ok(())
    }

    fn record(&mut self) -> Result<(StateKey, u128), PlaneError> {
        self.fill(LONGEST_RECORD)?;
        let available = (self.buffer.len() - self.at).min(self.records_left as usize);
        let bytes = &self.buffer[self.at..self.at + available];
        let truncated = || PlaneError::corrupt(&self.path, "a record runs past the records".to_string());
        if bytes.len() < self.key_bytes {
            return Err(truncated());
        }
        let key = bytes[..self.key_bytes].iter().fold(0u128, |key, &b| (key << 8) | u128::from(b));
        let (mut total, mut shift, mut length) = (0u128, 0u32, self.key_bytes);
        loop {
            let byte = *bytes.get(length).ok_or_else(truncated)?;
            length += 1;
            // The 19th byte holds bits 126 and 127 and ends the number.
            if shift == 126 && byte & !0x03 != 0 {
                return Err(PlaneError::corrupt(&self.path, "a total passes 128 bits".to_string()));
            }
            total |= u128::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if self.last.is_some_and(|last| last >= key) {
            return Err(PlaneError::corrupt(&self.path, format!("key {key:#x} is out of order")));
        }
        self.last = Some(key);
        self.at += length;
        self.records_left -= length as u64;
        self.states += 1;
        Ok((key, total))
    }

    /// Reads the trailer and checks the whole file.
    fn finish(&mut self) -> Result<(), PlaneError> {
        self.fill(TRAILER as usize)?;
        let trailer = &self.buffer[self.at..];
        if trailer.len() != TRAILER as usize || &trailer[8..] != END {
            return Err(PlaneError::corrupt(&self.path, "no trailer where the records end".to_string()));
        }
        let states = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
        if states != self.states {
            return Err(PlaneError::corrupt(&self.path, format!("{} states, its trailer says {states}", self.states)));
        }
        if let Some(entry) = &self.expected {
            let sha: [u8; 32] = std::mem::take(&mut self.sha).finalize().into();
            if sha != entry.sha256 {
                return Err(PlaneError::corrupt(
                    &self.path,
                    format!("SHA-256 {} is not {} of its manifest", hex(&sha), hex(&entry.sha256)),
                ));
            }
            if states != entry.states {
                return Err(PlaneError::corrupt(
                    &self.path,
                    format!("{states} states, its manifest says {}", entry.states),
                ));
            }
        }
        Ok(())
    }
}

impl Iterator for LayerReader {
    type Item = Result<(StateKey, u128), PlaneError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = if self.records_left > 0 {
            self.record()
        } else {
            self.done = true;
            return self.finish().err().map(Err);
        };
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}

/// Lower-case hex of some bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of lower-case or upper-case hex, of exactly `N` bytes.
pub fn parse_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
