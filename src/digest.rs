//! Digests as the runtime shows them: lowercase hex of sha256 (fingerprints, review
//! tokens, previews' value summaries, debug-view markers). Pure; used by every layer.

use sha2::{Digest, Sha256};

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = vec![0; bytes.len() * 2];
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    // Hex digits are ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// Lowercase hex of the sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of the sha256 of `value` as `serde_json` writes it (the same bytes as
/// `serde_json::to_vec`, never held whole), and how many bytes that is. A value that
/// does not serialize digests as nothing, as `to_vec(..).unwrap_or_default()` would.
pub(crate) fn sha256_json_hex<T: serde::Serialize + ?Sized>(value: &T) -> (String, usize) {
    let (digest, total) = sha256_json(value);
    (hex(&digest), total)
}

/// The sha256 of `value` as `serde_json` writes it, and how many bytes that is (see
/// [`sha256_json_hex`]).
pub(crate) fn sha256_json<T: serde::Serialize + ?Sized>(value: &T) -> ([u8; 32], usize) {
    let mut writer = HashingWriter {
        hasher: Sha256::new(),
        buffer: [0; 1024],
        filled: 0,
        total: 0,
    };
    if serde_json::to_writer(&mut writer, value).is_err() {
        return (Sha256::digest(b"").into(), 0);
    }
    writer.flush_buffer();
    (writer.hasher.finalize().into(), writer.total)
}

/// Feeds sha256 in blocks: `serde_json` writes a token at a time.
struct HashingWriter {
    hasher: Sha256,
    buffer: [u8; 1024],
    filled: usize,
    total: usize,
}

impl HashingWriter {
    fn flush_buffer(&mut self) {
        self.hasher.update(&self.buffer[..self.filled]);
        self.filled = 0;
    }
}

impl std::io::Write for HashingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.total += bytes.len();
        if self.filled + bytes.len() > self.buffer.len() {
            self.flush_buffer();
        }
        if bytes.len() >= self.buffer.len() {
            self.hasher.update(bytes);
        } else {
            self.buffer[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
            self.filled += bytes.len();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_lowercase_and_padded() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(
            &super::sha256_hex(b"abc")[..12],
            "ba7816bf8f01",
            "sha256(\"abc\")"
        );
    }

    #[test]
    fn a_streamed_json_digest_is_the_digest_of_the_written_bytes() {
        let long = "é\"x".repeat(900);
        for value in [
            serde_json::json!(null),
            serde_json::json!({"b": [1, 2.5, "x"], "a": {"z": true}}),
            serde_json::json!({"long": long, "more": [long, {"k": long}]}),
        ] {
            let bytes = serde_json::to_vec(&value).unwrap();
            assert_eq!(
                super::sha256_json_hex(&value),
                (super::sha256_hex(&bytes), bytes.len())
            );
        }
    }
}
