//! What a map or reduce job wrote, as a small text file whose SHA-256 (its
//! first 128 bits) is the job's reported count.
//!
//! ```text
//! census-layers manifest 1
//! census layers boxes=2x5 shards=8 parts=8
//! job 2x5/reduce/2/3
//! input 2x5/map/2/0 9f2c...                  (every input job and its accepted digest)
//! parents 0                                  (map jobs: parents read; reduce: 0)
//! emissions 0                                (map jobs: children emitted)
//! file 3 layer3-part00003.layer 2031 28711 5e0a...   (part, name, states, bytes, SHA-256)
//! ```
//!
//! The manifest names its census, its job and its inputs' digests, so a
//! digest stands for the whole chain of files that led to it; the files are
//! named by SHA-256, so the manifest stands for their bytes.

use sha2::{Digest, Sha256};

use crate::file::{FileEntry, hex, parse_hex};

const FIRST_LINE: &str = "census-layers manifest 1";

/// A job's output, as its manifest says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub census: String,
    pub job: String,
    /// The input jobs' keys and accepted digests.
    pub inputs: Vec<(String, u128)>,
    pub parents: u64,
    pub emissions: u64,
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// The text, one item a line.
    pub fn render(&self) -> String {
        let mut text = format!("{FIRST_LINE}\ncensus {}\njob {}\n", self.census, self.job);
        for (key, digest) in &self.inputs {
            text += &format!("input {key} {}\n", digest_hex(*digest));
        }
        text += &format!("parents {}\nemissions {}\n", self.parents, self.emissions);
        for file in &self.files {
            text += &format!("file {} {} {} {} {}\n", file.part, file.name, file.states, file.bytes, hex(&file.sha256));
        }
        text
    }

    /// Reads a manifest back; the reason says which line is wrong.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut lines = text.lines();
        if lines.next() != Some(FIRST_LINE) {
            return Err(format!("the first line is not {FIRST_LINE:?}"));
        }
        let mut field = |name: &str| -> Result<String, String> {
            let line = lines.next().ok_or_else(|| format!("no {name} line"))?;
            line.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| format!("{line:?} is not a {name} line"))
        };
        let census = field("census")?;
        let job = field("job")?;
        let mut manifest = Manifest { census, job, inputs: Vec::new(), parents: 0, emissions: 0, files: Vec::new() };
        let number =
            |text: &str, line: &str| text.parse::<u64>().map_err(|_| format!("{line:?}: {text:?} is not a number"));
        for line in text.lines().skip(3) {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["input", key, digest] => {
                    let digest = parse_digest(digest).ok_or_else(|| format!("{line:?}: not a digest"))?;
                    manifest.inputs.push((key.to_string(), digest));
                }
                ["parents", n] => manifest.parents = number(n, line)?,
                ["emissions", n] => manifest.emissions = number(n, line)?,
                ["file", part, name, states, bytes, sha] => {
                    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
                        return Err(format!("{line:?}: {name:?} is not a plain file name"));
                    }
                    manifest.files.push(FileEntry {
                        part: number(part, line)?.try_into().map_err(|_| format!("{line:?}: part too large"))?,
                        name: name.to_string(),
                        states: number(states, line)?,
                        bytes: number(bytes, line)?,
                        sha256: parse_hex::<32>(sha).ok_or_else(|| format!("{line:?}: not a SHA-256"))?,
                    });
                }
                _ => return Err(format!("{line:?} is not a manifest line")),
            }
        }
        Ok(manifest)
    }
}

/// A job's count: the first 128 bits of the SHA-256 of its manifest's
/// text, big-endian.
pub fn digest_of(manifest_text: &[u8]) -> u128 {
    let sha: [u8; 32] = Sha256::digest(manifest_text).into();
    u128::from_be_bytes(sha[..16].try_into().expect("16 bytes"))
}

/// A digest as 32 hex digits, as directories are named.
pub fn digest_hex(digest: u128) -> String {
    format!("{digest:032x}")
}

/// 32 hex digits back into a digest.
pub fn parse_digest(text: &str) -> Option<u128> {
    parse_hex::<16>(text).map(u128::from_be_bytes)
}
