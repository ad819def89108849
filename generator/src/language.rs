//! The JSON Data Generator template language: parsing into a compiled form.
//!
//! A template is text with `{{fn(args)}}` calls. Arguments are quoted strings
//! (`"a"` or `'a'`), bare tokens (`12`, `words`) or nested calls without braces
//! (`{{concat("$", float(1,5,"%.2f"))}}`); a backslash escapes the next character
//! inside arguments. `'{{repeat(n)}}',` as an array element repeats the element that
//! follows it. A template is compiled once ([`compile`]) into [`Node`]s; generating a
//! document only walks them.

use crate::functions::{self, Func};
use std::fmt;

/// A position in the template text, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Line.
    pub line: usize,
    /// Column (in characters).
    pub col: usize,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.col)
    }
}

/// A template that does not compile, with where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("schema {pos}: {message}")]
pub struct CompileError {
    /// Where.
    pub pos: Pos,
    /// Why.
    pub message: String,
}

/// One argument of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A literal (quoted or bare), unescaped.
    Lit(String),
    /// A nested call.
    Call(Call),
}

/// A compiled function call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The function.
    pub func: Func,
    /// Its arguments.
    pub args: Vec<Arg>,
    /// Where it starts (for run-time errors).
    pub pos: Pos,
}

/// A piece of a compiled template.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Text copied as is.
    Text(String),
    /// A call whose result is inserted.
    Call(Call),
    /// `repeat(min, max)`: the body, a random number of times in [min, max], comma-separated.
    Repeat {
        /// Fewest copies.
        min: u64,
        /// Most copies.
        max: u64,
        /// The repeated element.
        body: Vec<Node>,
    },
}

struct Parser<'a> {
    chars: Vec<char>,
    i: usize,
    _src: &'a str,
}

impl<'a> Parser<'a> {
    fn pos_at(&self, idx: usize) -> Pos {
        let mut line = 1;
        let mut col = 1;
        for c in &self.chars[..idx.min(self.chars.len())] {
            if *c == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        Pos { line, col }
    }

    fn err(&self, idx: usize, message: impl Into<String>) -> CompileError {
        CompileError { pos: self.pos_at(idx), message: message.into() }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(k, c)| self.chars.get(self.i + k) == Some(&c))
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }

    /// Parse `name(args)` starting at self.i.
    fn call(&mut self) -> Result<Call, CompileError> {
        self.skip_ws();
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            self.i += 1;
        }
        let name: String = self.chars[start..self.i].iter().collect();
        if name.is_empty() {
            return Err(self.err(start, "expected a function name"));
        }
        self.skip_ws();
        let mut args = Vec::new();
        if self.peek() == Some('(') {
            self.i += 1;
            self.skip_ws();
            if self.peek() == Some(')') {
                self.i += 1;
            } else {
                loop {
                    args.push(self.arg()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(',') => self.i += 1,
                        Some(')') => {
                            self.i += 1;
                            break;
                        }
                        Some(c) => {
                            return Err(self
                                .err(self.i, format!("expected ',' or ')' in the arguments of {name}, found {c:?}")))
                        }
                        None => return Err(self.err(start, format!("unclosed '(' in the call to {name}"))),
                    }
                }
            }
        }
        let func = functions::lookup(&name).ok_or_else(|| {
            self.err(start, format!("unknown function {name}(); see the JSON Data Generator function list"))
        })?;
        let (lo, hi) = func.arity();
        if args.len() < lo || args.len() > hi {
            let want = if lo == hi {
                format!("{lo}")
            } else if hi == usize::MAX {
                format!("at least {lo}")
            } else {
                format!("{lo} to {hi}")
            };
            return Err(self.err(start, format!("{name}() takes {want} argument(s), got {}", args.len())));
        }
        let call = Call { func, args, pos: self.pos_at(start) };
        functions::check(&call).map_err(|m| self.err(start, format!("{name}(): {m}")))?;
        Ok(call)
    }

    fn arg(&mut self) -> Result<Arg, CompileError> {
        self.skip_ws();
        let start = self.i;
        match self.peek() {
            Some(q @ ('"' | '\'')) => {
                self.i += 1;
                let mut s = String::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err(start, "unterminated string argument")),
                        Some('\\') => {
                            self.i += 1;
                            match self.peek() {
                                Some(c) => {
                                    s.push(c);
                                    self.i += 1;
                                }
                                None => return Err(self.err(start, "unterminated string argument")),
                            }
                        }
                        Some(c) if c == q => {
                            self.i += 1;
                            return Ok(Arg::Lit(s));
                        }
                        Some(c) => {
                            s.push(c);
                            self.i += 1;
                        }
                    }
                }
            }
            Some(c) if c.is_ascii_alphabetic() => {
                // A nested call, or a bare word such as `words`.
                let save = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    self.i += 1;
                }
                let word: String = self.chars[save..self.i].iter().collect();
                self.skip_ws();
                if self.peek() == Some('(') {
                    self.i = save;
                    return Ok(Arg::Call(self.call()?));
                }
                Ok(Arg::Lit(word))
            }
            _ => {
                let mut s = String::new();
                while let Some(c) = self.peek() {
                    if c == ',' || c == ')' {
                        break;
                    }
                    if c == '\\' {
                        self.i += 1;
                        if let Some(e) = self.peek() {
                            s.push(e);
                            self.i += 1;
                        }
                        continue;
                    }
                    if self.starts_with("}}") {
                        break;
                    }
                    s.push(c);
                    self.i += 1;
                }
                let s = s.trim().to_string();
                if s.is_empty() {
                    return Err(self.err(start, "empty argument"));
                }
                Ok(Arg::Lit(s))
            }
        }
    }

    /// Parse `{{ call }}` at self.i (which points at `{{`).
    fn braces(&mut self) -> Result<Call, CompileError> {
        let open = self.i;
        self.i += 2;
        let call =
            self.call()
                .map_err(|e| if e.message.starts_with("unclosed") { self.err(open, "unclosed '{{'") } else { e })?;
        self.skip_ws();
        if !self.starts_with("}}") {
            let rest: String = self.chars[self.i..].iter().collect();
            if !rest.contains("}}") {
                return Err(self.err(open, "unclosed '{{'"));
            }
            return Err(self.err(
                self.i,
                format!(
                    "expected '}}}}' to close the call to {}, found {:?}",
                    call.func.name(),
                    self.peek().unwrap_or(' ')
                ),
            ));
        }
        self.i += 2;
        Ok(call)
    }

    /// Nodes until `end` (exclusive).
    fn nodes(&mut self, end: usize) -> Result<Vec<Node>, CompileError> {
        let mut out = Vec::new();
        let mut text = String::new();
        while self.i < end {
            // An array element `'{{repeat(..)}}',` or `"{{repeat(..)}}",` repeats the next element.
            if let Some(q @ ('"' | '\'')) = self.peek() {
                let save = self.i;
                self.i += 1;
                if self.starts_with("{{") && self.repeat_ahead() {
                    let call = self.braces()?;
                    if self.peek() != Some(q) {
                        return Err(
                            self.err(save, "repeat() must be a quoted array element of its own, like '{{repeat(3)}}',")
                        );
                    }
                    self.i += 1;
                    self.skip_ws();
                    if self.peek() != Some(',') {
                        return Err(self.err(save, "repeat() must be followed by ',' and the element to repeat"));
                    }
                    self.i += 1;
                    self.skip_ws();
                    let body_start = self.i;
                    let body_end = self.element_end(body_start)?;
                    let body = self.nodes(body_end)?;
                    let (min, max) =
                        functions::repeat_bounds(&call).map_err(|m| self.err(save, format!("repeat(): {m}")))?;
                    if !text.is_empty() {
                        out.push(Node::Text(std::mem::take(&mut text)));
                    }
                    out.push(Node::Repeat { min, max, body });
                    continue;
                }
                self.i = save;
            }
            if self.starts_with("{{") {
                if !text.is_empty() {
                    out.push(Node::Text(std::mem::take(&mut text)));
                }
                let call = self.braces()?;
                if call.func == Func::Repeat {
                    return Err(CompileError {
                        pos: call.pos,
                        message: "repeat() must be a quoted array element of its own, like '{{repeat(3)}}',".into(),
                    });
                }
                out.push(Node::Call(call));
                continue;
            }
            text.push(self.chars[self.i]);
            self.i += 1;
        }
        if !text.is_empty() {
            out.push(Node::Text(text));
        }
        Ok(out)
    }

    fn repeat_ahead(&self) -> bool {
        let mut j = self.i + 2;
        while self.chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        "repeat".chars().enumerate().all(|(k, c)| self.chars.get(j + k) == Some(&c))
    }

    /// Index just past the JSON element starting at `start` (balanced brackets, strings,
    /// `{{...}}` calls), stopping before a top-level `,` or closing bracket.
    fn element_end(&self, start: usize) -> Result<usize, CompileError> {
        let mut depth = 0i32;
        let mut j = start;
        let mut in_str: Option<char> = None;
        while j < self.chars.len() {
            let c = self.chars[j];
            if let Some(q) = in_str {
                if c == '\\' {
                    j += 2;
                    continue;
                }
                if c == '{' && self.chars.get(j + 1) == Some(&'{') {
                    j = self.close_braces(j)?;
                    continue;
                }
                if c == q {
                    in_str = None;
                }
                j += 1;
                if depth == 0 && in_str.is_none() {
                    return Ok(j);
                }
                continue;
            }
            match c {
                '"' | '\'' => in_str = Some(c),
                '{' if self.chars.get(j + 1) == Some(&'{') => {
                    j = self.close_braces(j)?;
                    if depth == 0 {
                        return Ok(j);
                    }
                    continue;
                }
                '{' | '[' => depth += 1,
                '}' | ']' if depth == 0 => return Ok(j),
                '}' | ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(j + 1);
                    }
                }
                ',' if depth == 0 => return Ok(j),
                _ => {}
            }
            j += 1;
        }
        if depth > 0 || in_str.is_some() {
            return Err(self.err(start, "the element after repeat() is not closed"));
        }
        Ok(j)
    }

    fn close_braces(&self, open: usize) -> Result<usize, CompileError> {
        let mut j = open + 2;
        while j + 1 < self.chars.len() {
            if self.chars[j] == '\\' {
                j += 2;
                continue;
            }
            if self.chars[j] == '}' && self.chars[j + 1] == '}' {
                return Ok(j + 2);
            }
            j += 1;
        }
        Err(self.err(open, "unclosed '{{'"))
    }
}

/// Compile a template.
pub fn compile(src: &str) -> Result<Vec<Node>, CompileError> {
    let mut p = Parser { chars: src.chars().collect(), i: 0, _src: src };
    let end = p.chars.len();
    p.nodes(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_calls() {
        let n = compile(r#"{"id": "{{integer(1, 5)}}", "s": "{{concat("a", toUpperCase('b'))}}"}"#).unwrap();
        assert_eq!(n.len(), 5);
        assert!(
            matches!(&n[1], Node::Call(c) if c.func == Func::Integer && c.args == vec![Arg::Lit("1".into()), Arg::Lit("5".into())])
        );
        assert!(
            matches!(&n[3], Node::Call(c) if matches!(&c.args[1], Arg::Call(inner) if inner.func == Func::ToUpperCase))
        );
    }

    #[test]
    fn repeat_applies_to_the_next_element() {
        let n = compile("{\"a\": ['{{repeat(2,3)}}', {\"x\": {{integer(0,9)}}}], \"b\": 1}").unwrap();
        let rep = n.iter().find_map(|x| match x {
            Node::Repeat { min, max, body } => Some((*min, *max, body.clone())),
            _ => None,
        });
        let (min, max, body) = rep.expect("a repeat node");
        assert_eq!((min, max), (2, 3));
        assert_eq!(body.len(), 3, "{body:?}");
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = compile("{\n  \"a\": \"{{nope()}}\"\n}").unwrap_err();
        assert_eq!(e.pos, Pos { line: 2, col: 11 }, "points at the function name");
        assert!(e.to_string().contains("unknown function nope()"), "{e}");
        let e = compile("{\"a\": \"{{integer(1)}}\"}").unwrap_err();
        assert!(e.to_string().contains("integer() takes 2 argument(s), got 1"), "{e}");
        let e = compile("x {{alpha(3)").unwrap_err();
        assert_eq!(e.pos, Pos { line: 1, col: 3 });
        assert!(e.message.contains("unclosed '{{'"), "{e}");
        let e = compile("{{concat(\"a}}").unwrap_err();
        assert!(e.message.contains("unterminated string"), "{e}");
        let e = compile("{{repeat(3)}}").unwrap_err();
        assert!(e.message.contains("quoted array element"), "{e}");
    }

    #[test]
    fn escaped_braces_in_arguments() {
        let n = compile(r#"{{concat("\{", "\}")}}"#).unwrap();
        assert!(matches!(&n[0], Node::Call(c) if c.args == vec![Arg::Lit("{".into()), Arg::Lit("}".into())]));
    }
}
