//! The simulated input: a base rate shaped by a load profile, a message-size
//! distribution, the topic's partitions, and a little input noise.
//!
//! Profiles multiply the base rate (`--qps` or `--bytes-per-second`) over time:
//!
//! ```text
//! constant
//! steps:0=1,1h=2,3h=0.5               multiplier from each time on
//! ramp:from=0.5,to=1.5,start=1h,end=7h linear between start and end, held outside
//! sine:amplitude=0.3,period=24h,phase=6h   1 + amplitude·sin(2π(t+phase)/period)
//! spikes:every=1h,length=5m,height=3  height× for `length` at the start of every period
//! ```
//!
//! The same shapes can be given as YAML (`--profile-file`), e.g.
//! `{kind: steps, steps: [{at: 0s, multiplier: 1}, {at: 1h, multiplier: 2}]}`, and
//! recorded traffic as a CSV of timestamped rates ([`crate::traffic`]).

use serde::Deserialize;

/// A load profile: a multiplier of the base rate as a function of virtual time.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Profile {
    /// 1× throughout.
    Constant,
    /// Piecewise constant: each step's multiplier holds from its time until the next.
    Steps {
        /// The steps, in time order.
        steps: Vec<Step>,
    },
    /// Linear from `from`× at `start` to `to`× at `end`.
    Ramp {
        /// Multiplier before and at `start`.
        from: f64,
        /// Multiplier at and after `end`.
        to: f64,
        /// When the ramp starts.
        #[serde(default, deserialize_with = "de_duration")]
        start: f64,
        /// When it ends.
        #[serde(deserialize_with = "de_duration")]
        end: f64,
    },
    /// A daily (or any period) sine around 1×.
    Sine {
        /// Relative amplitude, 0 to 1.
        amplitude: f64,
        /// Period.
        #[serde(deserialize_with = "de_duration")]
        period: f64,
        /// Shift of the curve.
        #[serde(default, deserialize_with = "de_duration")]
        phase: f64,
    },
    /// Short bursts on a steady 1× base.
    Spikes {
        /// Time between spike starts.
        #[serde(deserialize_with = "de_duration")]
        every: f64,
        /// Length of each spike.
        #[serde(deserialize_with = "de_duration")]
        length: f64,
        /// Multiplier during a spike.
        height: f64,
    },
    /// Rates replayed from a CSV ([`crate::traffic`]), as multiples of their mean, the
    /// file repeating after its span.
    #[serde(skip)]
    Recorded(std::sync::Arc<crate::traffic::Recorded>),
}

/// One step of a [`Profile::Steps`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// From when.
    #[serde(deserialize_with = "de_duration")]
    pub at: f64,
    /// Multiplier of the base rate.
    pub multiplier: f64,
}

/// A profile or message size that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {what} {given:?}: {problem}; expected {expected}")]
pub struct WorkloadError {
    /// Which input.
    pub what: &'static str,
    /// What was given.
    pub given: String,
    /// What is wrong.
    pub problem: String,
    /// The accepted form.
    pub expected: &'static str,
}

const PROFILE_FORM: &str = "constant, steps:0=1,1h=2, ramp:from=0.5,to=1.5,start=1h,end=7h, sine:amplitude=0.3,period=24h or spikes:every=1h,length=5m,height=3";
const SIZE_FORM: &str = "a size (1KiB, 1024), uniform:MIN..MAX, normal:MEAN,SD or lognormal:MEDIAN,SIGMA";

/// A time of day in the run: seconds as a number, or a duration (90s, 5m, 2h); zero allowed.
fn time_s(text: &str) -> Result<f64, String> {
    let t = text.trim();
    if let Ok(v) = t.parse::<f64>() {
        return if v >= 0.0 && v.is_finite() { Ok(v) } else { Err(format!("time {t:?} must not be negative")) };
    }
    flexrun_estimator::parse_duration_or_zero(t).map(|d| d.as_secs_f64())
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Seconds(f64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Seconds(s) if s >= 0.0 && s.is_finite() => Ok(s),
        Raw::Seconds(s) => Err(serde::de::Error::custom(format!("duration {s} must not be negative"))),
        Raw::Text(t) => time_s(&t).map_err(serde::de::Error::custom),
    }
}

impl Profile {
    /// Parse the inline form (see the module docs).
    pub fn parse(text: &str) -> Result<Profile, WorkloadError> {
        let err = |problem: String| WorkloadError {
            what: "load profile",
            given: text.into(),
            problem,
            expected: PROFILE_FORM,
        };
        let (kind, args) = text.split_once(':').unwrap_or((text, ""));
        let pairs: Vec<(&str, &str)> = if args.trim().is_empty() {
            Vec::new()
        } else {
            args.split(',')
                .map(|kv| {
                    kv.split_once('=')
                        .map(|(k, v)| (k.trim(), v.trim()))
                        .ok_or_else(|| err(format!("{kv:?} is not key=value")))
                })
                .collect::<Result<_, _>>()?
        };
        let secs = |v: &str| time_s(v).map_err(|_| err(format!("{v:?} is not a duration (90s, 5m, 2h)")));
        let num = |v: &str| v.parse::<f64>().map_err(|_| err(format!("{v:?} is not a number")));
        let get = |key: &str| {
            pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).ok_or_else(|| err(format!("missing {key}=")))
        };
        let known = |keys: &[&str]| match pairs.iter().find(|(k, _)| !keys.contains(k)) {
            Some((k, _)) => Err(err(format!("unknown key {k:?} for {kind} (keys: {})", keys.join(", ")))),
            None => Ok(()),
        };
        let p = match kind.trim() {
            "constant" => {
                known(&[])?;
                Profile::Constant
            }
            "steps" => Profile::Steps {
                steps: pairs
                    .iter()
                    .map(|(k, v)| Ok(Step { at: secs(k)?, multiplier: num(v)? }))
                    .collect::<Result<_, WorkloadError>>()?,
            },
            "ramp" => {
                known(&["from", "to", "start", "end"])?;
                Profile::Ramp {
                    from: num(get("from")?)?,
                    to: num(get("to")?)?,
                    start: get("start").map_or(Ok(0.0), secs)?,
                    end: secs(get("end")?)?,
                }
            }
            "sine" => {
                known(&["amplitude", "period", "phase"])?;
                Profile::Sine {
                    amplitude: num(get("amplitude")?)?,
                    period: secs(get("period")?)?,
                    phase: get("phase").map_or(Ok(0.0), secs)?,
                }
            }
            "spikes" => {
                known(&["every", "length", "height"])?;
                Profile::Spikes {
                    every: secs(get("every")?)?,
                    length: secs(get("length")?)?,
                    height: num(get("height")?)?,
                }
            }
            other => return Err(err(format!("unknown kind {other:?}"))),
        };
        p.check().map_err(err)?;
        Ok(p)
    }

    /// Parse the YAML form (a `--profile-file`).
    pub fn from_yaml(name: &str, yaml: &str) -> Result<Profile, WorkloadError> {
        let err = |problem: String| WorkloadError {
            what: "load profile file",
            given: name.into(),
            problem,
            expected: PROFILE_FORM,
        };
        let p: Profile = serde_yaml::from_str(yaml).map_err(|e| err(e.to_string()))?;
        p.check().map_err(err)?;
        Ok(p)
    }

    fn check(&self) -> Result<(), String> {
        let mult =
            |m: f64| if m >= 0.0 && m.is_finite() { Ok(()) } else { Err(format!("multiplier {m} must be 0 or more")) };
        match self {
            Profile::Constant => Ok(()),
            Profile::Steps { steps } => {
                if steps.is_empty() {
                    return Err("no steps".into());
                }
                if steps.windows(2).any(|w| w[1].at <= w[0].at) {
                    return Err("step times must increase".into());
                }
                steps.iter().try_for_each(|s| mult(s.multiplier))
            }
            Profile::Ramp { from, to, start, end } => {
                mult(*from)?;
                mult(*to)?;
                if end <= start {
                    return Err(format!("end ({end} s) must be after start ({start} s)"));
                }
                Ok(())
            }
            Profile::Sine { amplitude, period, .. } => {
                if !(0.0..=1.0).contains(amplitude) {
                    return Err(format!("amplitude {amplitude} must be between 0 and 1"));
                }
                if *period <= 0.0 {
                    return Err("period must be above 0".into());
                }
                Ok(())
            }
            Profile::Recorded(_) => Ok(()),
            Profile::Spikes { every, length, height } => {
                mult(*height)?;
                if *every <= 0.0 || *length <= 0.0 || length > every {
                    return Err(format!("need 0 < length ({length} s) ≤ every ({every} s)"));
                }
                Ok(())
            }
        }
    }

    /// The multiplier at virtual time `t` seconds.
    pub fn multiplier(&self, t: f64) -> f64 {
        match self {
            Profile::Constant => 1.0,
            Profile::Steps { steps } => {
                steps.iter().take_while(|s| s.at <= t).last().map_or(steps[0].multiplier, |s| s.multiplier)
            }
            Profile::Ramp { from, to, start, end } => {
                from + (to - from) * ((t - start) / (end - start)).clamp(0.0, 1.0)
            }
            Profile::Sine { amplitude, period, phase } => {
                1.0 + amplitude * (std::f64::consts::TAU * (t + phase) / period).sin()
            }
            Profile::Recorded(r) => r.rate_at(t) / r.mean_rate(),
            Profile::Spikes { every, length, height } => {
                if t.rem_euclid(*every) < *length {
                    *height
                } else {
                    1.0
                }
            }
        }
    }
}

/// Message sizes. A flow model needs only their mean (bytes per message and CPU per
/// message are linear in it); the distribution is kept for the report.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageSize {
    /// Every message this size.
    Fixed(f64),
    /// Uniform between two sizes.
    Uniform(f64, f64),
    /// Normal with a mean and standard deviation, cut at 1 byte.
    Normal(f64, f64),
    /// Log-normal with a median and σ of the log.
    LogNormal(f64, f64),
}

impl MessageSize {
    /// Parse `1KiB`, `uniform:512..1536`, `normal:1024,200` or `lognormal:800,0.5`.
    pub fn parse(text: &str) -> Result<MessageSize, WorkloadError> {
        let err =
            |problem: String| WorkloadError { what: "message size", given: text.into(), problem, expected: SIZE_FORM };
        let size = |v: &str| flexrun_estimator::parse_size(v.trim()).map_err(|e| err(e.to_string()));
        let m = match text.split_once(':') {
            None => MessageSize::Fixed(size(text)?),
            Some(("uniform", r)) => {
                let (a, b) = r.split_once("..").ok_or_else(|| err("uniform needs MIN..MAX".into()))?;
                let (a, b) = (size(a)?, size(b)?);
                if b < a {
                    return Err(err(format!("MAX {b} is below MIN {a}")));
                }
                MessageSize::Uniform(a, b)
            }
            Some(("normal", r)) => {
                let (m, sd) = r.split_once(',').ok_or_else(|| err("normal needs MEAN,SD".into()))?;
                let sd: f64 = sd
                    .trim()
                    .parse()
                    .ok()
                    .filter(|v: &f64| *v >= 0.0)
                    .ok_or_else(|| err(format!("SD {sd:?} is not a number ≥ 0")))?;
                MessageSize::Normal(size(m)?, sd)
            }
            Some(("lognormal", r)) => {
                let (m, s) = r.split_once(',').ok_or_else(|| err("lognormal needs MEDIAN,SIGMA".into()))?;
                let s: f64 = s
                    .trim()
                    .parse()
                    .ok()
                    .filter(|v: &f64| (0.0..=3.0).contains(v))
                    .ok_or_else(|| err(format!("SIGMA {s:?} is not a number in 0..3")))?;
                MessageSize::LogNormal(size(m)?, s)
            }
            Some((kind, _)) => return Err(err(format!("unknown distribution {kind:?}"))),
        };
        Ok(m)
    }

    /// Mean bytes per message.
    pub fn mean(&self) -> f64 {
        match *self {
            MessageSize::Fixed(b) => b,
            MessageSize::Uniform(a, b) => (a + b) / 2.0,
            // A normal cut at 1 byte: close enough to its mean when sd ≪ mean.
            MessageSize::Normal(m, _) => m.max(1.0),
            MessageSize::LogNormal(median, s) => median * (s * s / 2.0).exp(),
        }
    }

    /// How it was given, for reports.
    pub fn describe(&self) -> String {
        match *self {
            MessageSize::Fixed(b) => format!("{b:.0} B"),
            MessageSize::Uniform(a, b) => format!("uniform {a:.0}..{b:.0} B"),
            MessageSize::Normal(m, sd) => format!("normal mean {m:.0} B, sd {sd:.0} B"),
            MessageSize::LogNormal(m, s) => format!("log-normal median {m:.0} B, σ {s}"),
        }
    }
}

/// Everything about the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Base rate, messages per second.
    pub base_records_per_s: f64,
    /// Message sizes.
    pub message: MessageSize,
    /// Partitions of the topic.
    pub partitions: u32,
    /// Virtual time to simulate, seconds.
    pub duration_s: f64,
    /// Shape over time.
    pub profile: Profile,
    /// Relative standard deviation of the input rate around the profile (an AR(1)
    /// process with a 30 s correlation time): real producers are not perfectly flat.
    pub noise: f64,
}

impl Workload {
    /// Messages per second at `t` before noise.
    pub fn records_per_s(&self, t: f64) -> f64 {
        self.base_records_per_s * self.profile.multiplier(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_profiles_parse_and_evaluate() {
        assert_eq!(Profile::parse("constant").unwrap().multiplier(5.0), 1.0);
        let s = Profile::parse("steps:0=1,1h=2,2h=0.5").unwrap();
        assert_eq!((s.multiplier(10.0), s.multiplier(3600.0), s.multiplier(9000.0)), (1.0, 2.0, 0.5));
        let r = Profile::parse("ramp:from=1,to=3,start=10s,end=20s").unwrap();
        assert_eq!((r.multiplier(0.0), r.multiplier(15.0), r.multiplier(99.0)), (1.0, 2.0, 3.0));
        let sine = Profile::parse("sine:amplitude=0.5,period=100s").unwrap();
        assert!((sine.multiplier(25.0) - 1.5).abs() < 1e-9 && (sine.multiplier(75.0) - 0.5).abs() < 1e-9);
        let sp = Profile::parse("spikes:every=1h,length=5m,height=3").unwrap();
        assert_eq!((sp.multiplier(60.0), sp.multiplier(600.0), sp.multiplier(3660.0)), (3.0, 1.0, 3.0));
    }

    #[test]
    fn bad_profiles_say_what_is_wrong() {
        for (text, needle) in [
            ("zigzag", "unknown kind"),
            ("steps:1h=2,0=1", "must increase"),
            ("ramp:from=1,to=2,end=0", "must be after start"),
            ("sine:amplitude=2,period=1h", "between 0 and 1"),
            ("spikes:every=1m,length=5m,height=2", "length"),
            ("sine:amplitude=0.2", "missing period="),
            ("ramp:from=1,to=2,end=1h,speed=3", "unknown key \"speed\""),
            ("steps:0=fast", "not a number"),
        ] {
            let e = Profile::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("expected"), "{text}: {e}");
        }
    }

    #[test]
    fn yaml_profiles_take_durations_as_text_or_seconds() {
        let p = Profile::from_yaml(
            "p.yaml",
            "kind: steps\nsteps:\n  - {at: 0s, multiplier: 1}\n  - {at: 90, multiplier: 4}\n",
        )
        .unwrap();
        assert_eq!(p.multiplier(100.0), 4.0);
        let e = Profile::from_yaml("p.yaml", "kind: sine\namplitude: 0.1\n").unwrap_err().to_string();
        assert!(e.contains("p.yaml") && e.contains("period"), "{e}");
    }

    #[test]
    fn message_sizes_parse_with_means() {
        assert_eq!(MessageSize::parse("1KiB").unwrap().mean(), 1024.0);
        assert_eq!(MessageSize::parse("uniform:512..1536").unwrap().mean(), 1024.0);
        assert_eq!(MessageSize::parse("normal:1000,100").unwrap().mean(), 1000.0);
        let ln = MessageSize::parse("lognormal:1000,0.5").unwrap().mean();
        assert!((ln - 1000.0 * (0.125f64).exp()).abs() < 1e-6);
        for bad in ["0", "uniform:10..5", "normal:1000", "lognormal:1000,9", "zipf:3", "-5"] {
            assert!(MessageSize::parse(bad).is_err(), "{bad}");
        }
    }
}
