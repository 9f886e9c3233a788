//! A message's envelope read without parsing it: its top-level `id` and whether it has a
//! `method`, scanned from bytes as they stream by, in bounded state.

use serde_json::Value;

use crate::transport::guard::MAX_REQUEST_ID_BYTES;

use super::{Envelope, UTF8_BOM};

/// Where an [`IdScanner`] is in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum At {
    /// Before the opening `{`.
    Start,
    /// Where a member's key (or the closing `}`) comes.
    Key,
    /// Inside a key; `len` bytes of it kept (`over` once it cannot be `id`/`method`).
    InKey {
        len: usize,
        over: bool,
        escaped: bool,
    },
    /// After a key, before its `:`.
    Colon,
    /// Where a member's value starts.
    Value,
    /// Inside the string value of `"id"`.
    IdString { escaped: bool },
    /// Inside the number value of `"id"`.
    IdNumber,
    /// Inside any other value: nesting depth below the top level, and string state.
    Skip {
        depth: u32,
        in_string: bool,
        escaped: bool,
    },
    /// After a value, before `,` or `}`.
    AfterValue,
    /// The top level ended (or is not an object); nothing more is read.
    Done,
}

/// Reads a JSON-RPC message's bytes as they stream by and keeps only what the top
/// level says: its `"id"` and whether it has a `"method"`. State: a few bytes of the
/// current key and at most [`MAX_REQUEST_ID_BYTES`] of the id; any depth of nesting is a
/// counter. Keys written with escapes are not recognized (the message is then treated
/// as having no id: the request waits for its timeout, as with any unreadable answer).
#[derive(Debug)]
pub(super) struct IdScanner {
    at: At,
    /// The key being read (kept while it can still be `id` or `method`).
    key: [u8; 8],
    /// The key of the member whose value comes next.
    member: Member,
    /// The id's text as it streams.
    id: Vec<u8>,
    found: Envelope,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Member {
    Id,
    Method,
    Other,
}

impl IdScanner {
    pub(super) fn new() -> Self {
        IdScanner {
            at: At::Start,
            key: [0; 8],
            member: Member::Other,
            id: Vec::new(),
            found: Envelope::default(),
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.at == At::Done {
                return;
            }
            self.byte(b);
        }
    }

    pub(super) fn finish(self) -> Envelope {
        self.found
    }

    fn byte(&mut self, b: u8) {
        let blank = b.is_ascii_whitespace();
        self.at = match self.at {
            At::Start if b == b'{' => At::Key,
            // Whitespace, and a byte order mark, before the object.
            At::Start if blank || UTF8_BOM.contains(&b) => At::Start,
            At::Key if b == b'"' => At::InKey {
                len: 0,
                over: false,
                escaped: false,
            },
            At::Key if blank || b == b',' => At::Key,
            At::InKey { len, over, escaped } => self.key_byte(b, len, over, escaped),
            At::Colon if b == b':' => At::Value,
            At::Colon if blank => At::Colon,
            At::Value if blank => At::Value,
            At::Value => self.value_start(b),
            At::IdString { escaped } => self.id_string_byte(b, escaped),
            At::IdNumber if b.is_ascii_digit() => self.keep_id(b, At::IdNumber, false),
            // A fraction or an exponent: not an id JSON-RPC allows.
            At::IdNumber if matches!(b, b'.' | b'e' | b'E') => {
                self.member = Member::Other;
                skip_byte(b, 0, false, false)
            }
            At::IdNumber => {
                self.found.id = std::str::from_utf8(&self.id)
                    .ok()
                    .and_then(|n| n.parse::<i64>().ok())
                    .map(Value::from);
                self.after_value(b)
            }
            At::Skip {
                depth,
                in_string,
                escaped,
            } => skip_byte(b, depth, in_string, escaped),
            At::AfterValue => self.after_value(b),
            // Anything else is not the top level of a JSON-RPC object.
            _ => At::Done,
        };
    }

    fn key_byte(&mut self, b: u8, len: usize, over: bool, escaped: bool) -> At {
        if escaped {
            return At::InKey {
                len,
                over: true,
                escaped: false,
            };
        }
        match b {
            b'\\' => At::InKey {
                len,
                over: true,
                escaped: true,
            },
            b'"' => {
                self.member = match &self.key[..len] {
                    _ if over => Member::Other,
                    b"id" => Member::Id,
                    b"method" => Member::Method,
                    _ => Member::Other,
                };
                At::Colon
            }
            _ if len < self.key.len() && !over => {
                self.key[len] = b;
                At::InKey {
                    len: len + 1,
                    over,
                    escaped: false,
                }
            }
            _ => At::InKey {
                len,
                over: true,
                escaped: false,
            },
        }
    }

    fn value_start(&mut self, b: u8) -> At {
        match self.member {
            Member::Id if self.found.id.is_none() && b == b'"' => {
                self.id.clear();
                self.id.push(b);
                At::IdString { escaped: false }
            }
            Member::Id if self.found.id.is_none() && (b == b'-' || b.is_ascii_digit()) => {
                self.id.clear();
                self.id.push(b);
                At::IdNumber
            }
            member => {
                self.found.method |= member == Member::Method;
                match b {
                    b'"' => At::Skip {
                        depth: 0,
                        in_string: true,
                        escaped: false,
                    },
                    b'{' | b'[' => At::Skip {
                        depth: 1,
                        in_string: false,
                        escaped: false,
                    },
                    _ => At::Skip {
                        depth: 0,
                        in_string: false,
                        escaped: false,
                    },
                }
            }
        }
    }

    fn id_string_byte(&mut self, b: u8, escaped: bool) -> At {
        let after_escape = escaped;
        let next = match b {
            _ if escaped => At::IdString { escaped: false },
            b'\\' => At::IdString { escaped: true },
            b'"' => {
                self.id.push(b);
                self.found.id = serde_json::from_slice::<String>(&self.id)
                    .ok()
                    .map(Value::String);
                return At::AfterValue;
            }
            _ => At::IdString { escaped: false },
        };
        self.keep_id(b, next, after_escape)
    }

    /// Keeps one more byte of the id; an id longer than any the runtime accepts is no
    /// id at all, and the rest of it is skipped (`escaped`: `b` follows a backslash).
    fn keep_id(&mut self, b: u8, next: At, escaped: bool) -> At {
        if self.id.len() >= MAX_REQUEST_ID_BYTES + 2 {
            self.member = Member::Other;
            return skip_byte(b, 0, matches!(next, At::IdString { .. }), escaped);
        }
        self.id.push(b);
        next
    }

    fn after_value(&mut self, b: u8) -> At {
        match b {
            b',' => At::Key,
            _ if b.is_ascii_whitespace() => At::AfterValue,
            _ => At::Done,
        }
    }
}

/// One byte of a value the scanner does not keep.
pub(super) fn skip_byte(b: u8, depth: u32, in_string: bool, escaped: bool) -> At {
    let skip = |depth, in_string, escaped| At::Skip {
        depth,
        in_string,
        escaped,
    };
    if in_string {
        return match b {
            _ if escaped => skip(depth, true, false),
            b'\\' => skip(depth, true, true),
            b'"' if depth == 0 => At::AfterValue,
            b'"' => skip(depth, false, false),
            _ => skip(depth, true, false),
        };
    }
    match b {
        b'"' => skip(depth, true, false),
        b'{' | b'[' => skip(depth.saturating_add(1), false, false),
        b'}' | b']' if depth > 1 => skip(depth - 1, false, false),
        b'}' | b']' if depth == 1 => At::AfterValue,
        // The end of a scalar at the top level.
        b',' if depth == 0 => At::Key,
        b'}' if depth == 0 => At::Done,
        _ => skip(depth, false, false),
    }
}

/// The envelope of a message held whole (one that is not valid JSON-RPC).
pub(super) fn envelope(text: &[u8]) -> Envelope {
    let mut scanner = IdScanner::new();
    scanner.feed(text);
    scanner.finish()
}
