//! A strict JSON reader for operator configurations (RFC 8259: no trailing
//! commas, no comments, no leading zeros). Numbers keep their text, so that
//! integers of any size are checked exactly when they are read.

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// A number as written in the document.
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Members in document order; a name may repeat (the last one wins in
    /// `get`, as in Go's encoding/json).
    Object(Vec<(String, Json)>),
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 100;

impl Json {
    /// Parses a whole document; surrounding white space is allowed.
    pub fn parse(b: &[u8]) -> Result<Json, String> {
        let mut p = Parser { b, i: 0 };
        let v = p.value(0)?;
        p.ws();
        if p.i != b.len() {
            return Err(format!("unexpected {} after the value", p.what()));
        }
        Ok(v)
    }

    /// The member name of an object (the last one of that name), or None.
    pub fn get(&self, name: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// What kind of value this is, for messages: "a string", "an object"...
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// The value as an int64: an integer without fraction or exponent.
    pub fn as_i64(&self) -> Result<i64, String> {
        match self {
            Json::Number(n) => {
                if n.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
                    return Err(format!("{} is not an integer", n));
                }
                crate::text::parse_i64(n.as_bytes())
                    .map_err(|_| format!("{} is not an integer that fits in 64 bits", n))
            }
            v => Err(format!("{} is not an integer", v.kind())),
        }
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn what(&self) -> String {
        match self.b.get(self.i) {
            None => "end of input".to_string(),
            Some(&c) => format!("{} at offset {}", crate::text::quote(&[c]), self.i),
        }
    }

    fn err<T>(&self, want: &str) -> Result<T, String> {
        Err(format!("want {}, found {}", want, self.what()))
    }

    fn lit(&mut self, word: &str, v: Json) -> Result<Json, String> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            self.err("a value")
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {} levels", MAX_DEPTH));
        }
        self.ws();
        match self.b.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    self.ws();
                    if self.b.get(self.i) != Some(&b'"') {
                        return self.err("a member name");
                    }
                    let name = self.string()?;
                    self.ws();
                    if self.b.get(self.i) != Some(&b':') {
                        return self.err("':'");
                    }
                    self.i += 1;
                    let v = self.value(depth + 1)?;
                    members.push((name, v));
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Object(members));
                        }
                        _ => return self.err("',' or '}'"),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.b.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return self.err("',' or ']'"),
                    }
                }
            }
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.lit("true", Json::Bool(true)),
            Some(b'f') => self.lit("false", Json::Bool(false)),
            Some(b'n') => self.lit("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => self.err("a value"),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.b.get(self.i) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.i;
        if self.b[self.i] == b'-' {
            self.i += 1;
        }
        let first = self.i;
        match self.digits() {
            0 => return self.err("a digit"),
            n if n > 1 && self.b[first] == b'0' => {
                return Err(format!("number at offset {} has a leading zero", start))
            }
            _ => {}
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return self.err("a digit");
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return self.err("a digit");
            }
        }
        // The bytes are ASCII digits and signs: valid UTF-8.
        Ok(Json::Number(String::from_utf8_lossy(&self.b[start..self.i]).into_owned()))
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self.b.get(self.i..self.i + 4).ok_or_else(|| "truncated \\u escape".to_string())?;
        let s = std::str::from_utf8(h).map_err(|_| "bad \\u escape".to_string())?;
        let v = u32::from_str_radix(s, 16).map_err(|_| format!("bad \\u escape {}", crate::text::quote(h)))?;
        self.i += 4;
        Ok(v)
    }

    // string reads a string starting at its opening quote. Unpaired
    // surrogates become U+FFFD, as in Go.
    fn string(&mut self) -> Result<String, String> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = match self.b.get(self.i) {
                None => return Err("unterminated string".to_string()),
                Some(&c) => c,
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = *self.b.get(self.i).ok_or_else(|| "unterminated string".to_string())?;
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\x08',
                        b'f' => '\x0c',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let u = self.hex4()?;
                            if (0xd800..0xdc00).contains(&u) && self.b[self.i..].starts_with(b"\\u") {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xdc00..0xe000).contains(&lo) {
                                    char::from_u32(0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00)).unwrap_or('\u{fffd}')
                                } else {
                                    self.i = save;
                                    '\u{fffd}'
                                }
                            } else {
                                char::from_u32(u).unwrap_or('\u{fffd}')
                            }
                        }
                        _ => return Err(format!("bad escape \\{} in a string", e as char)),
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c if c < 0x20 => return Err(format!("control character {} in a string", crate::text::quote(&[c]))),
                c => out.push(c),
            }
        }
        // Invalid UTF-8 in the document becomes U+FFFD, as in Go.
        Ok(match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let v =
            Json::parse(br#" {"n":1,"n":-2,"s":"a\tb\u00e9\ud83d\ude00","b":true,"x":{"y":[1,2.5e3,null]}} "#).unwrap();
        assert_eq!(v.get("n").unwrap().as_i64(), Ok(-2));
        assert_eq!(v.get("s"), Some(&Json::String("a\tbé😀".into())));
        assert_eq!(v.get("b"), Some(&Json::Bool(true)));
        assert!(v.get("zz").is_none());
        for bad in [&br#"{"n":01}"#[..], br#"{"n":1,}"#, b"{", br#"{"a":"x"} x"#, br#"{"s":"\q"}"#, b"[1,]", b""] {
            assert!(Json::parse(bad).is_err(), "{:?}", std::str::from_utf8(bad));
        }
        assert!(Json::parse("[".repeat(200).as_bytes()).is_err());
        assert!(Json::Number("1.5".into()).as_i64().is_err());
        assert!(Json::Number("9223372036854775808".into()).as_i64().is_err());
    }
}
