//! The JSON Data Generator functions (library v1.16 semantics, reference §2.2).
//!
//! [`lookup`] maps a name to a [`Func`]; [`Func::arity`] and [`check`] validate a call
//! when the template is compiled (literal numbers, formats and regexes are checked
//! then); [`eval`] writes a call's result into the output buffer.

use crate::javatime;
use crate::language::{Arg, Call};
use crate::words;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

macro_rules! funcs {
    ($($v:ident = $name:literal [$lo:expr, $hi:expr] $(| $alias:literal)*),* $(,)?) => {
        /// A template function.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Func { $(
            #[doc = $name]
            $v
        ),* }
        impl Func {
            /// The function's name.
            pub fn name(self) -> &'static str { match self { $(Func::$v => $name),* } }
            /// Fewest and most arguments.
            pub fn arity(self) -> (usize, usize) { match self { $(Func::$v => ($lo, $hi)),* } }
        }
        /// The function called `name`, if there is one.
        pub fn lookup(name: &str) -> Option<Func> {
            match name { $($name $(| $alias)* => Some(Func::$v),)* _ => None }
        }
        /// Every function name (for docs and tests).
        pub const NAMES: &[&str] = &[$($name),*];
    };
}

const MANY: usize = usize::MAX;

funcs! {
    Integer = "integer" [2, 2],
    Long = "long" [2, 2],
    Double = "double" [2, 3] | "float" | "floating",
    Bool = "bool" [0, 1] | "boolean",
    Uuid = "uuid" [0, 1] | "guid",
    Hex = "hex" [0, 1],
    ObjectId = "objectId" [0, 0],
    Random = "random" [1, MANY],
    Alpha = "alpha" [0, 2],
    AlphaNumeric = "alphaNumeric" [0, 2],
    Regexify = "regexify" [1, 2],
    Concat = "concat" [1, MANY],
    Substring = "substring" [2, 3],
    ToUpperCase = "toUpperCase" [1, 1],
    ToLowerCase = "toLowerCase" [1, 1],
    Index = "index" [0, 2],
    ResetIndex = "resetIndex" [0, 1],
    Repeat = "repeat" [1, 2],
    Put = "put" [2, 2],
    Get = "get" [1, 1],
    SystemProperty = "systemProperty" [1, 1],
    Timestamp = "timestamp" [0, 2],
    TimestampSeconds = "timestampSeconds" [0, 2],
    Date = "date" [0, 4],
    DateFormat = "dateFormat" [3, 3],
    Time = "time" [0, 3],
    AddDays = "addDays" [2, 3],
    AddHours = "addHours" [2, 3],
    AddMinutes = "addMinutes" [2, 3],
    AddMonths = "addMonths" [2, 3],
    AddSeconds = "addSeconds" [2, 3],
    AddWeeks = "addWeeks" [2, 3],
    AddYears = "addYears" [2, 3],
    ToTimestamp = "toTimestamp" [1, 2],
    ToTimestampSeconds = "toTimestampSeconds" [1, 2],
    FirstName = "firstName" [0, 0],
    LastName = "lastName" [0, 0] | "surname",
    Username = "username" [0, 0],
    Email = "email" [0, 1],
    Company = "company" [0, 0],
    City = "city" [0, 0],
    State = "state" [0, 0],
    Street = "street" [0, 0],
    Country = "country" [0, 0],
    CountriesList = "countriesList" [0, MANY],
    Phone = "phone" [0, 0],
    Ssn = "ssn" [0, 0],
    Gender = "gender" [0, 1],
    Ipv4 = "ipv4" [0, 0],
    Ipv6 = "ipv6" [0, 1],
    Lorem = "lorem" [2, 2],
}

/// Per-generator state: the random source, named counters and the per-document cache.
pub struct Ctx {
    /// Random numbers (seeded for reproducible output).
    pub rng: SmallRng,
    /// `index(name)` counters: next value and start.
    pub indexes: HashMap<String, (i64, i64)>,
    /// `put`/`get` values of the current document.
    pub cache: HashMap<String, String>,
    /// Compiled `regexify` generators.
    pub regexes: HashMap<String, rand_regex::Regex>,
    /// "Now", epoch milliseconds, fixed per document.
    pub now_ms: i64,
}

fn lit(a: &Arg) -> Option<&str> {
    match a {
        Arg::Lit(s) => Some(s),
        Arg::Call(_) => None,
    }
}

fn parse_i64(s: &str) -> Result<i64, String> {
    s.trim().trim_end_matches(['L', 'l']).parse().map_err(|_| format!("expected a whole number, got {s:?}"))
}

fn parse_f64(s: &str) -> Result<f64, String> {
    s.trim().parse().map_err(|_| format!("expected a number, got {s:?}"))
}

/// Compile-time checks of literal arguments.
pub fn check(c: &Call) -> Result<(), String> {
    let l = |i: usize| c.args.get(i).and_then(lit);
    match c.func {
        Func::Integer | Func::Long => {
            if let (Some(a), Some(b)) = (l(0), l(1)) {
                let (a, b) = (parse_i64(a)?, parse_i64(b)?);
                if c.func == Func::Integer && b <= a {
                    return Err(format!("max ({b}) must be greater than min ({a}); max is exclusive"));
                }
                if b < a {
                    return Err(format!("max ({b}) must not be less than min ({a})"));
                }
            }
        }
        Func::Double => {
            if let (Some(a), Some(b)) = (l(0), l(1)) {
                let (a, b) = (parse_f64(a)?, parse_f64(b)?);
                if b < a {
                    return Err(format!("max ({b}) must not be less than min ({a})"));
                }
            }
            if let Some(f) = l(2) {
                format_double(1.0, f)?;
            }
        }
        Func::Bool => {
            if let Some(p) = l(0) {
                let p = parse_f64(p)?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("probability {p} is not between 0 and 1"));
                }
            }
        }
        Func::Hex | Func::Alpha | Func::AlphaNumeric => {
            let nums: Result<Vec<i64>, _> = c.args.iter().filter_map(lit).map(parse_i64).collect();
            let nums = nums?;
            if nums.iter().any(|n| *n < 0 || *n > 10_000_000) {
                return Err("lengths must be between 0 and 10000000".into());
            }
            if nums.len() == 2 && nums[1] <= nums[0] {
                return Err(format!("max ({}) must be greater than min ({}); max is exclusive", nums[1], nums[0]));
            }
        }
        Func::Regexify => {
            if let Some(r) = l(c.args.len() - 1) {
                rand_regex::Regex::compile(r, 64).map_err(|e| format!("invalid regex {r:?}: {e}"))?;
            }
        }
        Func::Repeat => {
            repeat_bounds(c)?;
        }
        Func::Substring => {
            for i in 1..c.args.len() {
                if let Some(n) = l(i) {
                    parse_i64(n)?;
                }
            }
        }
        Func::Date if c.args.len() == 2 => return Err("takes 0, 1 (output format), 3 (begin, end, output format) or 4 (begin, end, input format, output format) arguments".into()),
        Func::Lorem => {
            if let Some(n) = l(0) {
                parse_i64(n)?;
            }
            if let Some(k) = l(1) {
                if k != "words" && k != "paragraphs" {
                    return Err(format!("the second argument must be \"words\" or \"paragraphs\", got {k:?}"));
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// The bounds of `repeat(n)` or `repeat(min, max)` (both inclusive).
pub fn repeat_bounds(c: &Call) -> Result<(u64, u64), String> {
    let n: Result<Vec<u64>, String> = c
        .args
        .iter()
        .map(|a| {
            lit(a)
                .ok_or("arguments must be numbers".to_string())
                .and_then(|s| s.trim().parse::<u64>().map_err(|_| format!("expected a whole number, got {s:?}")))
        })
        .collect();
    let n = n?;
    match n.as_slice() {
        [k] => Ok((*k, *k)),
        [a, b] if b >= a => Ok((*a, *b)),
        [a, b] => Err(format!("max ({b}) must not be less than min ({a})")),
        _ => Err("takes 1 or 2 arguments".into()),
    }
}

/// Java `String.format` for one double: `%f`, `%.Nf`, `%Nf`, `%e`, `%.Ne`, `%d`.
pub fn format_double(v: f64, fmt: &str) -> Result<String, String> {
    let bad = || format!("unsupported format {fmt:?} (use %.2f-style formats)");
    let start = fmt.find('%').ok_or_else(bad)?;
    let rest = &fmt[start + 1..];
    let end = rest.find(|c: char| c.is_ascii_alphabetic()).ok_or_else(bad)?;
    let (spec, conv) = (&rest[..end], &rest[end..end + 1]);
    let prec = match spec.split_once('.') {
        Some((_, p)) => Some(p.parse::<usize>().map_err(|_| bad())?),
        None if spec.is_empty() => None,
        None => {
            spec.parse::<usize>().map_err(|_| bad())?;
            None
        }
    };
    let body = match conv {
        "f" => format!("{:.*}", prec.unwrap_or(6), v),
        "e" => format!("{:.*e}", prec.unwrap_or(6), v),
        "d" => format!("{}", v.round() as i64),
        _ => return Err(bad()),
    };
    Ok(format!("{}{}{}", &fmt[..start], body, &rest[end + 1..]))
}

const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Append `n` characters drawn uniformly from `set` (ASCII, at most 64 symbols).
///
/// Branchless: each random word gives ten 6-bit draws, every draw is written, and the
/// write position only advances for draws inside the set (rejection sampling without
/// a branch per character). This is the seed schema's hot path.
pub fn random_chars(rng: &mut SmallRng, set: &[u8], n: usize, out: &mut String) {
    assert!(!set.is_empty() && set.len() <= 64 && set.is_ascii());
    let mut table = [0u8; 64];
    for (i, t) in table.iter_mut().enumerate() {
        *t = set[i % set.len()];
    }
    let limit = set.len();
    let mut buf = std::mem::take(out).into_bytes();
    let base = buf.len();
    // Room for the ten unconditional writes past the last kept character.
    buf.resize(base + n + 10, 0);
    let dst = &mut buf[base..];
    let mut len = 0;
    while len < n {
        let mut w = rng.next_u64();
        for _ in 0..10 {
            let k = (w & 63) as usize;
            w >>= 6;
            dst[len] = table[k];
            len += (k < limit) as usize;
        }
    }
    buf.truncate(base + n);
    // Only ASCII bytes from `set` were added to a valid string.
    *out = String::from_utf8(buf).unwrap_or_else(|e| unreachable!("ASCII only: {e}"));
}

fn hex_bytes(rng: &mut SmallRng, n: usize, out: &mut String) {
    for _ in 0..n {
        let b: u8 = rng.random();
        let _ = write!(out, "{b:02x}");
    }
}

fn pick<'a>(rng: &mut SmallRng, list: &'a [&'a str]) -> &'a str {
    list[rng.random_range(0..list.len())]
}

impl Ctx {
    fn arg<'a>(&mut self, c: &'a Call, i: usize) -> Result<Cow<'a, str>, String> {
        match &c.args[i] {
            Arg::Lit(s) => Ok(Cow::Borrowed(s)),
            Arg::Call(inner) => {
                let mut s = String::new();
                eval(inner, self, &mut s)?;
                Ok(Cow::Owned(s))
            }
        }
    }

    fn int(&mut self, c: &Call, i: usize) -> Result<i64, String> {
        parse_i64(&self.arg(c, i)?)
    }

    fn float(&mut self, c: &Call, i: usize) -> Result<f64, String> {
        parse_f64(&self.arg(c, i)?)
    }
}

fn len_arg(ctx: &mut Ctx, c: &Call, default: (usize, usize)) -> Result<usize, String> {
    let (lo, hi) = match c.args.len() {
        0 => default,
        1 => {
            let n = ctx.int(c, 0)?.max(0) as usize;
            (n, n + 1)
        }
        _ => (ctx.int(c, 0)?.max(0) as usize, ctx.int(c, 1)?.max(0) as usize),
    };
    if hi <= lo {
        return Err(format!("{}(): max ({hi}) must be greater than min ({lo})", c.func.name()));
    }
    Ok(ctx.rng.random_range(lo..hi))
}

/// Write the result of `c` into `out`.
pub fn eval(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    use Func::*;
    match c.func {
        Integer | Long | Double | Bool => numbers(c, ctx, out),
        Uuid | Hex | ObjectId | Random | Alpha | AlphaNumeric | Regexify => random_text(c, ctx, out),
        Concat | Substring | ToUpperCase | ToLowerCase => strings(c, ctx, out),
        Index | ResetIndex | Repeat | Put | Get | SystemProperty => state(c, ctx, out),
        Timestamp | TimestampSeconds | ToTimestamp | ToTimestampSeconds => timestamps(c, ctx, out),
        Date | DateFormat | Time | AddDays | AddHours | AddMinutes | AddMonths | AddSeconds | AddWeeks | AddYears => {
            dates(c, ctx, out)
        }
        FirstName | LastName | Username | Email | Company | Gender => people(c, ctx, out),
        City | State | Street | Country | CountriesList | Phone | Ssn => places(c, ctx, out),
        Ipv4 | Ipv6 => network(c, ctx, out),
        Lorem => lorem(c, ctx, out),
    }
}

/// Numbers and booleans: `integer`, `long`, `double`, `bool`.
fn numbers(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Integer => {
            let (a, b) = (ctx.int(c, 0)?, ctx.int(c, 1)?);
            if b <= a {
                return Err(format!("integer({a},{b}): max must be greater than min"));
            }
            let v = ctx.rng.random_range(a..b);
            let _ = write!(out, "{v}");
        }
        Func::Long => {
            let (a, b) = (ctx.int(c, 0)?, ctx.int(c, 1)?);
            if b < a {
                return Err(format!("long({a},{b}): max must not be less than min"));
            }
            let v = ctx.rng.random_range(a..=b);
            let _ = write!(out, "{v}");
        }
        Func::Double => {
            let (a, b) = (ctx.float(c, 0)?, ctx.float(c, 1)?);
            let v = if b > a { ctx.rng.random_range(a..b) } else { a };
            match n {
                3 => out.push_str(&format_double(v, &ctx.arg(c, 2)?)?),
                _ => {
                    let _ = write!(out, "{v}");
                }
            }
        }
        Func::Bool => {
            let p = if n == 1 { ctx.float(c, 0)? } else { 0.5 };
            out.push_str(if ctx.rng.random_bool(p.clamp(0.0, 1.0)) { "true" } else { "false" });
        }
        other => unreachable!("{other:?} is not one of numbers's functions"),
    }
    Ok(())
}

/// Random identifiers and text: `uuid`, `hex`, `objectId`, `random`, `alpha`, `alphaNumeric`, `regexify`.
fn random_text(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Uuid => {
            let dashes = n == 0 || ctx.arg(c, 0)? != "false";
            let mut b: [u8; 16] = ctx.rng.random();
            b[6] = (b[6] & 0x0f) | 0x40;
            b[8] = (b[8] & 0x3f) | 0x80;
            for (i, x) in b.iter().enumerate() {
                if dashes && matches!(i, 4 | 6 | 8 | 10) {
                    out.push('-');
                }
                let _ = write!(out, "{x:02x}");
            }
        }
        Func::Hex => {
            let k = if n == 1 { ctx.int(c, 0)?.max(0) as usize } else { 16 };
            hex_bytes(&mut ctx.rng, k, out);
        }
        Func::ObjectId => hex_bytes(&mut ctx.rng, 12, out),
        Func::Random => {
            let i = ctx.rng.random_range(0..n);
            let v = ctx.arg(c, i)?;
            out.push_str(&v);
        }
        Func::Alpha | Func::AlphaNumeric => {
            let k = len_arg(ctx, c, (10, 20))?;
            random_chars(&mut ctx.rng, if c.func == Func::Alpha { ALPHA } else { ALNUM }, k, out);
        }
        Func::Regexify => {
            let re = ctx.arg(c, n - 1)?.into_owned();
            if !ctx.regexes.contains_key(&re) {
                let g =
                    rand_regex::Regex::compile(&re, 64).map_err(|e| format!("regexify: invalid regex {re:?}: {e}"))?;
                ctx.regexes.insert(re.clone(), g);
            }
            let g = &ctx.regexes[&re];
            let s: String = ctx.rng.sample(g);
            out.push_str(&s);
        }
        other => unreachable!("{other:?} is not one of random_text's functions"),
    }
    Ok(())
}

/// String operations on arguments: `concat`, `substring`, `toUpperCase`, `toLowerCase`.
fn strings(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Concat => {
            for i in 0..n {
                let v = ctx.arg(c, i)?;
                out.push_str(&v);
            }
        }
        Func::Substring => {
            let s: Vec<char> = ctx.arg(c, 0)?.chars().collect();
            let b = ctx.int(c, 1)?.clamp(0, s.len() as i64) as usize;
            let e = if n == 3 { ctx.int(c, 2)?.clamp(b as i64, s.len() as i64) as usize } else { s.len() };
            out.extend(&s[b..e]);
        }
        Func::ToUpperCase => out.push_str(&ctx.arg(c, 0)?.to_uppercase()),
        Func::ToLowerCase => out.push_str(&ctx.arg(c, 0)?.to_lowercase()),
        other => unreachable!("{other:?} is not one of strings's functions"),
    }
    Ok(())
}

/// Functions with state across messages: `index`, `resetIndex`, `put`, `get`, and `systemProperty`.
fn state(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Index => {
            let (name, start) = match n {
                0 => ("".to_string(), 0),
                1 => {
                    let a = ctx.arg(c, 0)?.into_owned();
                    match parse_i64(&a) {
                        Ok(s) => ("".to_string(), s),
                        Err(_) => (a, 0),
                    }
                }
                _ => (ctx.arg(c, 0)?.into_owned(), ctx.int(c, 1)?),
            };
            let e = ctx.indexes.entry(name).or_insert((start, start));
            let _ = write!(out, "{}", e.0);
            e.0 += 1;
        }
        Func::ResetIndex => {
            let name = if n == 1 { ctx.arg(c, 0)?.into_owned() } else { String::new() };
            if let Some(e) = ctx.indexes.get_mut(&name) {
                e.0 = e.1;
            }
        }
        Func::Repeat => return Err("repeat() must be a quoted array element of its own".into()),
        Func::Put => {
            let (k, v) = (ctx.arg(c, 0)?.into_owned(), ctx.arg(c, 1)?.into_owned());
            out.push_str(&v);
            ctx.cache.insert(k, v);
        }
        Func::Get => {
            let k = ctx.arg(c, 0)?;
            if let Some(v) = ctx.cache.get(k.as_ref()) {
                out.push_str(v);
            }
        }
        Func::SystemProperty => {
            let name = ctx.arg(c, 0)?;
            out.push_str(&system_property(&name));
        }
        other => unreachable!("{other:?} is not one of state's functions"),
    }
    Ok(())
}

/// Epoch timestamps: `timestamp`, `timestampSeconds`, `toTimestamp`, `toTimestampSeconds`.
fn timestamps(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Timestamp | Func::TimestampSeconds => {
            let ms = if n == 2 {
                let a = javatime::parse_ms(&ctx.arg(c, 0)?, javatime::DEFAULT_INPUT)?;
                let b = javatime::parse_ms(&ctx.arg(c, 1)?, javatime::DEFAULT_INPUT)?;
                if b > a {
                    ctx.rng.random_range(a..b)
                } else {
                    a
                }
            } else if n == 0 {
                ctx.now_ms
            } else {
                return Err(format!("{}() takes 0 or 2 arguments", c.func.name()));
            };
            let v = if c.func == Func::TimestampSeconds { ms.div_euclid(1000) } else { ms };
            let _ = write!(out, "{v}");
        }
        Func::ToTimestamp | Func::ToTimestampSeconds => {
            let fmt = if n == 2 { ctx.arg(c, 1)?.into_owned() } else { javatime::DEFAULT_INPUT.to_string() };
            let ms = javatime::parse_ms(&ctx.arg(c, 0)?, &fmt)?;
            let v = if c.func == Func::ToTimestampSeconds { ms.div_euclid(1000) } else { ms };
            let _ = write!(out, "{v}");
        }
        other => unreachable!("{other:?} is not one of timestamps's functions"),
    }
    Ok(())
}

/// Formatted dates and times, and date arithmetic: `date`, `dateFormat`, `time`, `addDays` … `addYears`.
fn dates(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Date => {
            let (ms, fmt) = match n {
                0 => (ctx.now_ms, javatime::DEFAULT_DATE_OUTPUT.to_string()),
                1 => (ctx.now_ms, ctx.arg(c, 0)?.into_owned()),
                3 | 4 => {
                    let in_fmt = if n == 4 { ctx.arg(c, 2)?.into_owned() } else { javatime::DEFAULT_INPUT.to_string() };
                    let a = javatime::parse_ms(&ctx.arg(c, 0)?, &in_fmt)?;
                    let b = javatime::parse_ms(&ctx.arg(c, 1)?, &in_fmt)?;
                    (if b > a { ctx.rng.random_range(a..b) } else { a }, ctx.arg(c, n - 1)?.into_owned())
                }
                _ => return Err("date() takes 0, 1, 3 or 4 arguments".into()),
            };
            out.push_str(&javatime::format_ms(ms, &fmt)?);
        }
        Func::DateFormat => {
            let ms = javatime::parse_ms(&ctx.arg(c, 0)?, &ctx.arg(c, 1)?)?;
            out.push_str(&javatime::format_ms(ms, &ctx.arg(c, 2)?)?);
        }
        Func::Time => {
            let fmt = match n {
                0 => javatime::DEFAULT_TIME.to_string(),
                _ => ctx.arg(c, n - 1)?.into_owned(),
            };
            let ms = match n {
                3 => {
                    let a = javatime::parse_time_ms(&ctx.arg(c, 0)?, &fmt)?;
                    let b = javatime::parse_time_ms(&ctx.arg(c, 1)?, &fmt)?;
                    if b > a {
                        ctx.rng.random_range(a..b)
                    } else {
                        a
                    }
                }
                2 => return Err("time() takes 0, 1 (format) or 3 (from, to, format) arguments".into()),
                _ => ctx.now_ms,
            };
            out.push_str(&javatime::format_ms(ms, &fmt)?);
        }
        Func::AddDays
        | Func::AddHours
        | Func::AddMinutes
        | Func::AddMonths
        | Func::AddSeconds
        | Func::AddWeeks
        | Func::AddYears => {
            let (fmt, d, k) =
                if n == 3 { (ctx.arg(c, 0)?.into_owned(), 1, 2) } else { (javatime::DEFAULT_INPUT.to_string(), 0, 1) };
            let ms = javatime::parse_ms(&ctx.arg(c, d)?, &fmt)?;
            let amount = ctx.int(c, k)?;
            let r = javatime::add(ms, c.func, amount)?;
            out.push_str(&javatime::format_ms(r, &fmt)?);
        }
        other => unreachable!("{other:?} is not one of dates's functions"),
    }
    Ok(())
}

/// People: `firstName`, `lastName`, `username`, `email`, `company`, `gender`.
fn people(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::FirstName => out.push_str(pick(&mut ctx.rng, words::FIRST_NAMES)),
        Func::LastName => out.push_str(pick(&mut ctx.rng, words::LAST_NAMES)),
        Func::Username => {
            let f = pick(&mut ctx.rng, words::FIRST_NAMES);
            let l = pick(&mut ctx.rng, words::LAST_NAMES);
            out.push_str(&f[..1].to_lowercase());
            out.push_str(&l.to_lowercase());
        }
        Func::Email => {
            let f = pick(&mut ctx.rng, words::FIRST_NAMES).to_lowercase();
            let l = pick(&mut ctx.rng, words::LAST_NAMES).to_lowercase();
            let domain = if n == 1 {
                ctx.arg(c, 0)?.into_owned()
            } else {
                let co: String =
                    pick(&mut ctx.rng, words::COMPANIES).chars().filter(|c| c.is_ascii_alphanumeric()).collect();
                format!("{}.com", co.to_lowercase())
            };
            let _ = write!(out, "{f}.{l}@{domain}");
        }
        Func::Company => out.push_str(pick(&mut ctx.rng, words::COMPANIES)),
        Func::Gender => {
            if n == 1 {
                // Library 1.16 returns "true"/"false" for gender(p).
                let p = ctx.float(c, 0)?;
                out.push_str(if ctx.rng.random_bool(p.clamp(0.0, 1.0)) { "true" } else { "false" });
            } else {
                out.push_str(if ctx.rng.random_bool(0.5) { "male" } else { "female" });
            }
        }
        other => unreachable!("{other:?} is not one of people's functions"),
    }
    Ok(())
}

/// Places and numbers people have: `city`, `state`, `street`, `country`, `countriesList`, `phone`, `ssn`.
fn places(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::City => out.push_str(pick(&mut ctx.rng, words::CITIES)),
        Func::State => out.push_str(pick(&mut ctx.rng, words::STATES)),
        Func::Street => out.push_str(pick(&mut ctx.rng, words::STREETS)),
        Func::Country => out.push_str(words::COUNTRIES[ctx.rng.random_range(0..words::COUNTRIES.len())].1),
        Func::CountriesList => {
            let codes: Vec<String> =
                (0..n).map(|i| ctx.arg(c, i).map(|s| s.to_uppercase())).collect::<Result<_, _>>()?;
            let chosen: Vec<&(&str, &str)> = if codes.is_empty() {
                words::COUNTRIES.iter().collect()
            } else {
                words::COUNTRIES.iter().filter(|(k, _)| codes.iter().any(|c| c == k)).collect()
            };
            if codes.len() == 1 {
                if let Some((_, name)) = chosen.first() {
                    out.push_str(name);
                }
            } else {
                let m: serde_json::Map<String, serde_json::Value> =
                    chosen.iter().map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string()))).collect();
                out.push_str(&serde_json::Value::Object(m).to_string());
            }
        }
        Func::Phone => {
            let (a, b, d) =
                (ctx.rng.random_range(200..1000), ctx.rng.random_range(200..1000), ctx.rng.random_range(0..10000));
            let _ = write!(out, "{a:03}-{b:03}-{d:04}");
        }
        Func::Ssn => {
            let (a, b, d) =
                (ctx.rng.random_range(1..900), ctx.rng.random_range(1..100), ctx.rng.random_range(1..10000));
            let _ = write!(out, "{a:03}-{b:02}-{d:04}");
        }
        other => unreachable!("{other:?} is not one of places's functions"),
    }
    Ok(())
}

/// Network addresses: `ipv4`, `ipv6`.
fn network(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    let n = c.args.len();
    match c.func {
        Func::Ipv4 => {
            let b: [u8; 4] = ctx.rng.random();
            let _ = write!(out, "{}.{}.{}.{}", b[0], b[1], b[2], b[3]);
        }
        Func::Ipv6 => {
            let upper = n == 1 && ctx.arg(c, 0)?.eq_ignore_ascii_case("upper");
            for i in 0..8 {
                if i > 0 {
                    out.push(':');
                }
                let g: u16 = ctx.rng.random();
                if upper {
                    let _ = write!(out, "{g:X}");
                } else {
                    let _ = write!(out, "{g:x}");
                }
            }
        }
        other => unreachable!("{other:?} is not one of network's functions"),
    }
    Ok(())
}

/// Lorem ipsum words or paragraphs: `lorem`.
fn lorem(c: &Call, ctx: &mut Ctx, out: &mut String) -> Result<(), String> {
    match c.func {
        Func::Lorem => {
            let k = ctx.int(c, 0)?.max(0) as usize;
            let kind = ctx.arg(c, 1)?.into_owned();
            if kind == "paragraphs" {
                for p in 0..k {
                    if p > 0 {
                        out.push_str("\\n\\n");
                    }
                    let sentences = ctx.rng.random_range(3..6);
                    for s in 0..sentences {
                        if s > 0 {
                            out.push(' ');
                        }
                        let nw = ctx.rng.random_range(6..12);
                        for w in 0..nw {
                            let word = pick(&mut ctx.rng, words::LOREM);
                            if w == 0 {
                                out.push_str(&word[..1].to_uppercase());
                                out.push_str(&word[1..]);
                            } else {
                                out.push(' ');
                                out.push_str(word);
                            }
                        }
                        out.push('.');
                    }
                }
            } else {
                for w in 0..k {
                    if w > 0 {
                        out.push(' ');
                    }
                    out.push_str(pick(&mut ctx.rng, words::LOREM));
                }
            }
        }
        other => unreachable!("{other:?} is not one of lorem's functions"),
    }
    Ok(())
}

/// A JVM system property, answered from this process's environment.
fn system_property(name: &str) -> String {
    match name {
        "user.name" => std::env::var("USER").unwrap_or_default(),
        "user.home" => std::env::var("HOME").unwrap_or_default(),
        "user.dir" => std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default(),
        "os.name" => "Linux".into(),
        "os.arch" => std::env::consts::ARCH.into(),
        "line.separator" => "\n".into(),
        "file.separator" => "/".into(),
        other => std::env::var(other).unwrap_or_default(),
    }
}
