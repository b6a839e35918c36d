//! Text helpers for operators and error messages: decimal integers without
//! allocation, and Go-style quoting of bytes (the form the Go and C SDKs use
//! in their messages, so that failures read alike in every language).

use std::fmt::Write as _;

/// The most bytes the decimal form of an i64 takes ("-9223372036854775808").
pub const I64_DIGITS: usize = 20;

/// Appends the decimal form of v to out: a leading '-' when negative, no
/// '+', no leading zeros.
pub fn append_i64(out: &mut Vec<u8>, v: i64) {
    let mut buf = [0u8; I64_DIGITS];
    out.extend_from_slice(format_i64(&mut buf, v));
}

/// Writes the decimal form of v at the end of buf and returns it.
pub fn format_i64(buf: &mut [u8; I64_DIGITS], v: i64) -> &[u8] {
    let mut n = v.unsigned_abs();
    let mut i = I64_DIGITS;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Why parse_i64 refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseIntError {
    /// Empty, a sign alone, or a byte other than a digit.
    Invalid,
    /// A decimal integer outside the int64 range.
    Overflow,
}

/// Parses a whole decimal integer exactly like Go's strconv.ParseInt(s, 10,
/// 64): an optional '+' or '-', then one or more digits (leading zeros are
/// fine), in the int64 range.
pub fn parse_i64(s: &[u8]) -> Result<i64, ParseIntError> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return Err(ParseIntError::Invalid);
    }
    let mut n: u64 = 0;
    let mut overflow = false;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(ParseIntError::Invalid);
        }
        // Keep scanning after an overflow: a later non-digit makes the
        // input invalid rather than out of range, as in Go.
        match n.checked_mul(10).and_then(|m| m.checked_add(u64::from(c - b'0'))) {
            Some(m) if m <= 1 << 63 => n = m,
            _ => overflow = true,
        }
    }
    if overflow {
        return Err(ParseIntError::Overflow);
    }
    if neg {
        Ok((n as i64).wrapping_neg())
    } else if n > i64::MAX as u64 {
        Err(ParseIntError::Overflow)
    } else {
        Ok(n as i64)
    }
}

/// Quotes b like Go's %q: in double quotes, with `"` and `\` escaped,
/// control characters as \n, \t, \x01…, bytes that are not valid UTF-8 as
/// \xNN, and non-printing characters (C1 controls, spaces other than ' ',
/// format characters) as \uNNNN.
pub fn quote(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() + 2);
    quote_into(&mut s, b);
    s
}

/// Quotes at most max bytes of b and appends "..." when it was cut, as the
/// SDKs show keys in messages.
pub fn abbreviate(b: &[u8], max: usize) -> String {
    if b.len() > max {
        let mut s = quote(&b[..max]);
        s.push_str("...");
        s
    } else {
        quote(b)
    }
}

fn quote_into(s: &mut String, mut b: &[u8]) {
    s.push('"');
    while !b.is_empty() {
        let (valid, rest) = match std::str::from_utf8(b) {
            Ok(v) => (v, &b[b.len()..]),
            Err(e) => {
                let (v, r) = b.split_at(e.valid_up_to());
                // SAFETY: from_utf8 said the first valid_up_to bytes are UTF-8.
                (unsafe { std::str::from_utf8_unchecked(v) }, r)
            }
        };
        for c in valid.chars() {
            quote_char(s, c);
        }
        b = rest;
        if let Some((&bad, r)) = b.split_first() {
            let _ = write!(s, "\\x{:02x}", bad);
            b = r;
        }
    }
    s.push('"');
}

fn quote_char(s: &mut String, c: char) {
    match c {
        '"' => s.push_str("\\\""),
        '\\' => s.push_str("\\\\"),
        '\x07' => s.push_str("\\a"),
        '\x08' => s.push_str("\\b"),
        '\x0c' => s.push_str("\\f"),
        '\n' => s.push_str("\\n"),
        '\r' => s.push_str("\\r"),
        '\t' => s.push_str("\\t"),
        '\x0b' => s.push_str("\\v"),
        c if (c as u32) < 0x20 || c == '\x7f' => {
            let _ = write!(s, "\\x{:02x}", c as u32);
        }
        c if !printable(c) => {
            if (c as u32) < 0x10000 {
                let _ = write!(s, "\\u{:04x}", c as u32);
            } else {
                let _ = write!(s, "\\U{:08x}", c as u32);
            }
        }
        c => s.push(c),
    }
}

// printable approximates Go's unicode.IsPrint for the characters that show
// up in keys: it refuses C1 controls, spaces other than U+0020, and the
// common format and separator characters.
fn printable(c: char) -> bool {
    !matches!(c as u32,
        0x80..=0xa0 | 0xad | 0x1680 | 0x180e | 0x2000..=0x200f | 0x2028..=0x202f
        | 0x205f..=0x206f | 0x3000 | 0xd800..=0xdfff | 0xfeff | 0xfff9..=0xfffb
        | 0xe000..=0xf8ff | 0xf0000..=0x10ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        let mut v = Vec::new();
        for n in [0, 7, -1, 42, i64::MAX, i64::MIN] {
            v.clear();
            append_i64(&mut v, n);
            assert_eq!(v, n.to_string().as_bytes());
            assert_eq!(parse_i64(&v), Ok(n));
        }
        assert_eq!(parse_i64(b"+007"), Ok(7));
        assert_eq!(parse_i64(b"9223372036854775808"), Err(ParseIntError::Overflow));
        assert_eq!(parse_i64(b"-9223372036854775809"), Err(ParseIntError::Overflow));
        assert_eq!(parse_i64(b"99999999999999999999x"), Err(ParseIntError::Invalid));
        for bad in [&b""[..], b"-", b"+", b"1a", b" 1", b"1.5", b"--1"] {
            assert_eq!(parse_i64(bad), Err(ParseIntError::Invalid), "{:?}", bad);
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(quote(b"key\n\"x\""), r#""key\n\"x\"""#);
        assert_eq!(quote("naïve\u{a0}日本".as_bytes()), "\"naïve\\u00a0日本\"");
        assert_eq!(quote(b"a\xffb\x01"), r#""a\xffb\x01""#);
        assert_eq!(abbreviate(b"abcdef", 3), r#""abc"..."#);
    }
}
