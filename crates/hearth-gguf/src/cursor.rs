//! A bounds-checked little-endian reader over a byte slice.
//!
//! Every read checks the bytes remaining first, so no claimed length or count from the file
//! can cause an out-of-bounds read or an allocation larger than the file itself.

use crate::GgufError;

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

/// Describes what is being read, built only when an error is reported (so the hot path of
/// reading 262k vocabulary strings does not format anything).
pub(crate) type What<'w> = &'w dyn Fn() -> String;

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Byte offset of the next read from the start of the file.
    pub(crate) fn offset(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// The next `n` bytes, or `Truncated` naming `what` if fewer remain.
    pub(crate) fn take(&mut self, n: u64, what: What) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.truncated(what, n));
        }
        // NOTE: n <= remaining <= usize::MAX, so the cast is lossless.
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    /// A `Truncated` error at the current offset for a read of `needed` bytes.
    pub(crate) fn truncated(&self, what: What, needed: u64) -> GgufError {
        GgufError::Truncated {
            what: format!(
                "{} (needs {needed} bytes, {} remain)",
                what(),
                self.remaining()
            ),
            offset: self.offset(),
        }
    }

    fn array<const N: usize>(&mut self, what: What) -> Result<[u8; N], GgufError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, what: What) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub(crate) fn u16(&mut self, what: What) -> Result<u16, GgufError> {
        self.array(what).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self, what: What) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: What) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// The raw bytes of a GGUF string (u64 length, then that many bytes).
    pub(crate) fn string_bytes(&mut self, what: What) -> Result<&'a [u8], GgufError> {
        let len = self.u64(&|| format!("{} length", what()))?;
        self.take(len, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_reports_truncation() {
        let bytes = [1u8, 2, 0, 3, 0, 0, 0, 9];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u8(&|| "a".into()).unwrap(), 1);
        assert_eq!(c.u16(&|| "b".into()).unwrap(), 2);
        assert_eq!(c.u32(&|| "c".into()).unwrap(), 3);
        assert_eq!(c.offset(), 7);
        let err = c.u32(&|| "d".into()).unwrap_err();
        match err {
            GgufError::Truncated { what, offset } => {
                assert_eq!(what, "d (needs 4 bytes, 1 remain)");
                assert_eq!(offset, 7);
            }
            other => panic!("unexpected {other:?}"),
        }
        // A failed read consumes nothing.
        assert_eq!(c.u8(&|| "e".into()).unwrap(), 9);
    }

    #[test]
    fn huge_string_length_fails_without_allocating() {
        let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let mut c = Cursor::new(&bytes);
        let err = c.string_bytes(&|| "key".into()).unwrap_err();
        assert!(
            err.to_string()
                .contains("needs 1099511627776 bytes, 3 remain"),
            "{err}"
        );
    }
}
