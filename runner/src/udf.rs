//! JavaScript UDFs, as Google's `JavascriptTextTransformer` runs them on the JSON path.
//!
//! The contract (Google's `JavascriptTextTransformer.java` and "Create user-defined
//! functions for Dataflow templates"): the function named
//! `javascriptTextTransformFunctionName` is called with one argument, the message
//! value as a JSON string, and returns a JSON string.
//! - `null`, `undefined` or `""`: the message is dropped (neither a row nor a dead
//!   letter; "the incoming record will be filtered from the output");
//! - a throw: the message is dead-lettered with the exception's message;
//! - anything else that is not a string: dead-lettered with
//!   `UDF Function did not return a String. Instead got: <type>`.
//!
//! With `javascriptTextTransformReloadIntervalMinutes` N > 0, the file is read and
//! evaluated again N minutes after the engine was built (Google's cache expiry), losing
//! global JavaScript state. Each thread keeps its own engine (QuickJS runtimes are not
//! shared across threads), embedded through the `rquickjs` crate.
//!
//! Exactly-once replays map a batch again, so a UDF must be a pure function of its
//! input: one that reads the clock or `Math.random()` can make a replay differ from
//! what was logged, and the job then stops and says so.
//!
//! QuickJS sits behind the `udf` cargo feature, on by default; a build without it (as
//! `scripts/demo.sh` makes, to keep a fresh machine's build short) refuses a UDF at
//! launch with exit 2 and says how to build one that runs it.
//!
//! ```
//! # #[cfg(feature = "udf")] {
//! use flexrun::udf::{Udf, UdfOutcome};
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("f.js");
//! std::fs::write(&path, "function up(s) { var o = JSON.parse(s); o.n += 1; return JSON.stringify(o); }").unwrap();
//! let udf = Udf::new(path.to_str().unwrap(), "up", None).unwrap();
//! assert_eq!(udf.call(r#"{"n":1}"#), UdfOutcome::Output(r#"{"n":2}"#.into()));
//! # }
//! ```

#[cfg(feature = "udf")]
use rquickjs::{CatchResultExt, Context, Function, Runtime};
#[cfg(feature = "udf")]
use std::cell::RefCell;
#[cfg(feature = "udf")]
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a UDF call gave.
#[derive(Debug, Clone, PartialEq)]
pub enum UdfOutcome {
    /// The transformed JSON text.
    Output(String),
    /// null, undefined or "": drop the message.
    Dropped,
    /// It threw, or returned something that is not a string: dead-letter the message.
    Failed(String),
}

/// A UDF that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum UdfError {
    /// The file cannot be read.
    #[error("javascriptTextTransformGcsPath={path}: cannot read the file: {source}")]
    Read {
        /// The path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The script does not evaluate, or lacks the function.
    #[error("javascriptTextTransformGcsPath={path}: {message}")]
    Script {
        /// The path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// This flexrun was built without the `udf` feature (QuickJS).
    #[error("javascriptTextTransformGcsPath={path}: this flexrun was built without JavaScript UDFs (scripts/demo.sh leaves them out); build it with `cargo build --release`, whose default features include `udf`")]
    NotBuilt {
        /// The path.
        path: String,
    },
}

/// A UDF: the script's path, the function's name and the reload interval.
#[derive(Debug)]
#[cfg_attr(not(feature = "udf"), allow(dead_code))]
pub struct Udf {
    path: String,
    function: String,
    reload: Option<Duration>,
    id: u64,
    born: Instant,
}

#[cfg(feature = "udf")]
struct Engine {
    generation: u64,
    // The context must be dropped before the runtime.
    context: Context,
    _runtime: Runtime,
}

#[cfg(feature = "udf")]
thread_local! {
    static ENGINES: RefCell<HashMap<u64, Engine>> = RefCell::new(HashMap::new());
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Udf {
    /// Load and check the UDF once (so a bad script fails the launch, not each message).
    pub fn new(path: &str, function: &str, reload: Option<Duration>) -> Result<Udf, UdfError> {
        let udf = Udf {
            path: path.to_string(),
            function: function.to_string(),
            reload: reload.filter(|d| !d.is_zero()),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            born: Instant::now(),
        };
        udf.build()?;
        Ok(udf)
    }

    #[cfg(not(feature = "udf"))]
    fn build(&self) -> Result<(), UdfError> {
        Err(UdfError::NotBuilt { path: self.path.clone() })
    }

    #[cfg(feature = "udf")]
    fn build(&self) -> Result<Engine, UdfError> {
        let source =
            std::fs::read_to_string(&self.path).map_err(|source| UdfError::Read { path: self.path.clone(), source })?;
        let script = |message: String| UdfError::Script { path: self.path.clone(), message };
        let runtime = Runtime::new().map_err(|e| script(e.to_string()))?;
        let context = Context::full(&runtime).map_err(|e| script(e.to_string()))?;
        context.with(|ctx| -> Result<(), UdfError> {
            ctx.eval::<(), _>(source).catch(&ctx).map_err(|e| script(format!("the script does not evaluate: {e}")))?;
            let f: Result<Function, _> = ctx.globals().get(self.function.as_str());
            f.map_err(|_| script(format!("it defines no function {}", self.function)))?;
            Ok(())
        })?;
        Ok(Engine { generation: self.generation(), context, _runtime: runtime })
    }

    /// Which reload period we are in (0 forever without a reload interval).
    #[cfg(feature = "udf")]
    fn generation(&self) -> u64 {
        match self.reload {
            Some(d) => (self.born.elapsed().as_secs_f64() / d.as_secs_f64()) as u64,
            None => 0,
        }
    }

    /// Call the UDF with one message's JSON text. (Without the `udf` feature no `Udf` is
    /// ever made: [`Udf::new`] refuses.)
    #[cfg(not(feature = "udf"))]
    pub fn call(&self, _input: &str) -> UdfOutcome {
        UdfOutcome::Failed(UdfError::NotBuilt { path: self.path.clone() }.to_string())
    }

    /// Call the UDF with one message's JSON text.
    #[cfg(feature = "udf")]
    pub fn call(&self, input: &str) -> UdfOutcome {
        ENGINES.with(|cell| {
            let mut engines = cell.borrow_mut();
            let stale = engines.get(&self.id).is_none_or(|e| e.generation != self.generation());
            if stale {
                match self.build() {
                    Ok(e) => {
                        engines.insert(self.id, e);
                    }
                    Err(e) => return UdfOutcome::Failed(e.to_string()),
                }
            }
            let engine = engines.get(&self.id).expect("engine built above");
            engine.context.with(|ctx| {
                let f: Function = match ctx.globals().get(self.function.as_str()) {
                    Ok(f) => f,
                    Err(_) => return UdfOutcome::Failed(format!("No such function: {}", self.function)),
                };
                let v: rquickjs::Value = match f.call((input,)).catch(&ctx) {
                    Ok(v) => v,
                    Err(e) => return UdfOutcome::Failed(e.to_string()),
                };
                if v.is_null() || v.is_undefined() {
                    return UdfOutcome::Dropped;
                }
                match v.as_string().map(|s| s.to_string()) {
                    Some(Ok(s)) if s.is_empty() => UdfOutcome::Dropped,
                    Some(Ok(s)) => UdfOutcome::Output(s),
                    Some(Err(e)) => UdfOutcome::Failed(e.to_string()),
                    None => UdfOutcome::Failed(format!(
                        "UDF Function did not return a String. Instead got: {}",
                        v.type_name()
                    )),
                }
            })
        })
    }
}

#[cfg(all(test, feature = "udf"))]
mod tests {
    use super::*;

    fn udf(src: &str, name: &str) -> Result<Udf, UdfError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.js");
        std::fs::write(&path, src).unwrap();
        // Keep the file: Udf reloads read it again.
        let p = path.to_str().unwrap().to_string();
        std::mem::forget(dir);
        Udf::new(&p, name, None)
    }

    #[test]
    fn each_outcome_of_googles_contract() {
        let u = udf(
            r#"function f(s) {
                var o = JSON.parse(s);
                if (o.drop === 1) return null;
                if (o.drop === 2) return undefined;
                if (o.drop === 3) return "";
                if (o.num) return 42;
                if (o.bad) throw new Error("bad record " + o.bad);
                o.seen = true;
                return JSON.stringify(o);
            }"#,
            "f",
        )
        .unwrap();
        assert_eq!(u.call(r#"{"a":1}"#), UdfOutcome::Output(r#"{"a":1,"seen":true}"#.into()));
        for d in 1..=3 {
            assert_eq!(u.call(&format!(r#"{{"drop":{d}}}"#)), UdfOutcome::Dropped);
        }
        assert_eq!(
            u.call(r#"{"num":1}"#),
            UdfOutcome::Failed("UDF Function did not return a String. Instead got: int".into())
        );
        let UdfOutcome::Failed(e) = u.call(r#"{"bad":7}"#) else { panic!() };
        assert!(e.contains("bad record 7"), "{e}");
        let UdfOutcome::Failed(e) = u.call("not json") else { panic!() };
        assert!(e.contains("unexpected token"), "{e}");
    }

    #[test]
    fn a_script_that_does_not_load_fails_the_launch_with_the_reason() {
        let e = udf("function f(s) { return s; }", "g").unwrap_err().to_string();
        assert!(e.contains("defines no function g"), "{e}");
        let e = udf("function f(s) {", "f").unwrap_err().to_string();
        assert!(e.contains("does not evaluate"), "{e}");
        let e = Udf::new("/nonexistent/u.js", "f", None).unwrap_err().to_string();
        assert!(e.contains("cannot read the file"), "{e}");
    }

    #[test]
    fn a_reload_reads_the_file_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.js");
        std::fs::write(&path, "function f(s) { return 'v1'; }").unwrap();
        let u = Udf::new(path.to_str().unwrap(), "f", Some(Duration::from_millis(200))).unwrap();
        assert_eq!(u.call("{}"), UdfOutcome::Output("v1".into()));
        std::fs::write(&path, "function f(s) { return 'v2'; }").unwrap();
        assert_eq!(u.call("{}"), UdfOutcome::Output("v1".into()), "no reload before the interval");
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(u.call("{}"), UdfOutcome::Output("v2".into()));
    }
}

#[cfg(all(test, not(feature = "udf")))]
mod without_quickjs {
    #[test]
    fn a_udf_is_refused_at_launch_with_how_to_build_one_in() {
        let e = super::Udf::new("/nonexistent/u.js", "f", None).unwrap_err().to_string();
        assert!(e.contains("built without JavaScript UDFs") && e.contains("`cargo build --release`"), "{e}");
    }
}
