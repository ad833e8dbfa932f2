//! The log format: entries `[u32 length][u64 checksum][payload]`, little-endian, where the
//! checksum is FNV-1a 64 of the payload and the payload is
//! `thread, change count, changes…`, each change `[u8 tag] key [value]` (tag 0 put, 1
//! delete), each string or value `[u32 length][bytes]`.

/// One change of an [`Entry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    Put(String, Vec<u8>),
    Delete(String),
}

/// One atomic group of changes to one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub thread: String,
    pub changes: Vec<Change>,
}

const HEADER: usize = 4 + 8;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The bytes of one entry, header included.
pub(crate) fn encode(entry: &Entry) -> Vec<u8> {
    let mut payload = Vec::new();
    put_bytes(&mut payload, entry.thread.as_bytes());
    payload.extend_from_slice(&(entry.changes.len() as u32).to_le_bytes());
    for change in &entry.changes {
        match change {
            Change::Put(k, v) => {
                payload.push(0);
                put_bytes(&mut payload, k.as_bytes());
                put_bytes(&mut payload, v);
            }
            Change::Delete(k) => {
                payload.push(1);
                put_bytes(&mut payload, k.as_bytes());
            }
        }
    }
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&fnv1a(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// A cursor over a payload; every read checks the bounds.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<usize> {
        let b: [u8; 4] = self.take(4)?.try_into().ok()?;
        Some(u32::from_le_bytes(b) as usize)
    }

    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()?;
        self.take(n).map(<[u8]>::to_vec)
    }

    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?).ok()
    }
}

fn decode(payload: &[u8]) -> Option<Entry> {
    let mut r = Reader(payload);
    let thread = r.string()?;
    let n = r.u32()?;
    let mut changes = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let tag = r.take(1)?[0];
        let key = r.string()?;
        changes.push(match tag {
            0 => Change::Put(key, r.bytes()?),
            1 => Change::Delete(key),
            _ => return None,
        });
    }
    r.0.is_empty().then_some(Entry { thread, changes })
}

/// Decode a whole log. Returns the entries and the length of the intact prefix: a torn last
/// entry (short, or failing its checksum) ends the log there. `Err` for a damaged entry that
/// is followed by more bytes, or an entry whose checksum holds but which does not decode.
pub(crate) fn read_log(bytes: &[u8]) -> Result<(Vec<Entry>, usize), String> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let torn = |why: &str| -> Result<(Vec<Entry>, usize), String> {
            Err(format!("entry at byte {at}: {why}"))
        };
        let Some(header) = rest.get(..HEADER) else {
            break; // torn header: the last append did not finish
        };
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let sum = u64::from_le_bytes([
            header[4], header[5], header[6], header[7], header[8], header[9], header[10],
            header[11],
        ]);
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            break; // torn payload
        };
        if fnv1a(payload) != sum {
            if HEADER + len == rest.len() {
                break; // torn last entry
            }
            return torn("checksum mismatch before the end of the log");
        }
        let Some(entry) = decode(payload) else {
            return torn("checksum holds but the payload does not decode");
        };
        entries.push(entry);
        at += HEADER + len;
    }
    Ok((entries, at))
}
