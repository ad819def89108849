//! Every JSON Data Generator function, checked over many samples for its range,
//! length and format; malformed schemas give positioned errors; nothing panics.

use flexrun_generator::functions::NAMES;
use flexrun_generator::language::compile;
use flexrun_generator::Generator;
use std::collections::HashSet;

const N: usize = 2000;

fn samples(expr: &str) -> Vec<String> {
    let mut g = Generator::new(&format!("{{{{{expr}}}}}"), 11).unwrap_or_else(|e| panic!("{expr}: {e}"));
    (0..N).map(|_| g.next_string().unwrap_or_else(|e| panic!("{expr}: {e}"))).collect()
}

fn ints(expr: &str) -> Vec<i64> {
    samples(expr).iter().map(|s| s.parse().unwrap_or_else(|_| panic!("{expr} gave {s:?}"))).collect()
}

fn all_match(expr: &str, re: &str) {
    let r = regex::Regex::new(re).unwrap();
    for s in samples(expr) {
        assert!(r.is_match(&s), "{expr} gave {s:?}, not matching {re}");
    }
}

#[test]
fn integer_excludes_max_and_long_includes_it() {
    let v: HashSet<i64> = ints("integer(0,3)").into_iter().collect();
    assert_eq!(v, HashSet::from([0, 1, 2]), "integer(min,max) excludes max");
    let v: HashSet<i64> = ints("long(0,2)").into_iter().collect();
    assert_eq!(v, HashSet::from([0, 1, 2]), "long(min,max) includes max");
    assert!(ints("integer(1000001,2000000)").iter().all(|x| (1_000_001..2_000_000).contains(x)));
    assert!(ints("long(-5L,5L)").iter().all(|x| (-5..=5).contains(x)));
}

#[test]
fn doubles_stay_in_range_and_follow_formats() {
    for s in samples("double(1.5,2.5)") {
        let x: f64 = s.parse().unwrap();
        assert!((1.5..2.5).contains(&x), "{x}");
    }
    // Formatting rounds as Java's String.format does: 4.996 prints as 5.00.
    all_match(r#"float(1,5,"%.2f")"#, r"^[1-5]\.\d\d$");
    for s in samples(r#"float(1,5,"%.2f")"#) {
        let x: f64 = s.parse().unwrap();
        assert!((1.0..=5.0).contains(&x), "{x}");
    }
    all_match(r#"concat("$",floating(1,5,"%.2f"))"#, r"^\$[1-5]\.\d\d$");
}

#[test]
fn booleans_and_probabilities() {
    let s = samples("bool()");
    assert!(s.iter().all(|x| x == "true" || x == "false"));
    let t = samples("bool(0.9)").iter().filter(|x| *x == "true").count() as f64 / N as f64;
    assert!((0.85..0.95).contains(&t), "bool(0.9) true {t}");
    assert!(samples("bool(0)").iter().all(|x| x == "false"));
    let g: HashSet<String> = samples("gender()").into_iter().collect();
    assert_eq!(g, HashSet::from(["male".to_string(), "female".to_string()]));
    assert!(samples("gender(0.5)").iter().all(|x| x == "true" || x == "false"), "gender(p) returns true/false in 1.16");
}

#[test]
fn ids_and_hex() {
    all_match("uuid()", r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
    all_match("guid()", r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
    all_match(r#"uuid("false")"#, r"^[0-9a-f]{32}$");
    all_match("hex()", r"^[0-9a-f]{32}$");
    all_match("hex(4)", r"^[0-9a-f]{8}$");
    all_match("objectId()", r"^[0-9a-f]{24}$");
    assert_eq!(samples("uuid()").into_iter().collect::<HashSet<_>>().len(), N, "uuids are unique");
}

#[test]
fn alpha_and_alphanumeric_lengths_and_alphabets() {
    for s in samples("alpha()") {
        assert!((10..20).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphabetic()), "{s}");
    }
    for s in samples("alphaNumeric(962)") {
        assert!(s.len() == 962 && s.chars().all(|c| c.is_ascii_alphanumeric()));
    }
    let lens: HashSet<usize> = samples("alphaNumeric(3,5)").iter().map(|s| s.len()).collect();
    assert_eq!(lens, HashSet::from([3, 4]), "alphaNumeric(min,max) excludes max");
    // Every symbol of the alphabet appears (the draw is uniform, not a subset).
    let chars: HashSet<char> =
        samples("alphaNumeric(100)").iter().flat_map(|s| s.chars().collect::<Vec<_>>()).collect();
    assert_eq!(chars.len(), 62);
}

#[test]
fn regexify_random_and_strings() {
    all_match(r#"regexify("[A-Z]{3}-[0-9]{4}")"#, r"^[A-Z]{3}-[0-9]{4}$");
    all_match(r#"regexify("en-US", "a{2}b")"#, r"^aab$");
    let v: HashSet<String> = samples(r#"random("a", "b", 'c')"#).into_iter().collect();
    assert_eq!(v, HashSet::from(["a".into(), "b".into(), "c".into()]));
    assert!(samples(r#"concat("x", toUpperCase("ab"), toLowerCase('CD'))"#).iter().all(|s| s == "xABcd"));
    assert!(samples(r#"substring("abcdef", 1, 3)"#).iter().all(|s| s == "bc"));
    assert!(samples(r#"substring("abcdef", 4)"#).iter().all(|s| s == "ef"));
}

#[test]
fn counters_cache_and_repeat() {
    // Counters are keyed by name; the first call creates a counter with its start.
    let mut g = Generator::new(r#"{{index()}} {{index("x", 10)}} {{index("x")}}"#, 1).unwrap();
    assert_eq!(g.next_string().unwrap(), "0 10 11");
    assert_eq!(g.next_string().unwrap(), "1 12 13");
    let mut g = Generator::new(r#"{{index(5)}}"#, 1).unwrap();
    assert_eq!(g.next_string().unwrap(), "5");
    assert_eq!(g.next_string().unwrap(), "6");
    let mut g = Generator::new(r#"{{index("y")}}{{resetIndex("y")}}"#, 1).unwrap();
    assert_eq!(g.next_string().unwrap(), "0");
    assert_eq!(g.next_string().unwrap(), "0");
    let mut g = Generator::new(r#"{{put("k", alpha(4))}}={{get("k")}}"#, 1).unwrap();
    let s = g.next_string().unwrap();
    let (a, b) = s.split_once('=').unwrap();
    assert_eq!(a, b);
    let mut g = Generator::new(r#"['{{repeat(2,9)}}', {"v": {{integer(0,9)}}}]"#, 3).unwrap();
    let mut lens = HashSet::new();
    for _ in 0..500 {
        let v: serde_json::Value = serde_json::from_str(&g.next_string().unwrap()).unwrap();
        lens.insert(v.as_array().unwrap().len());
    }
    assert_eq!(lens, (2..=9).collect::<HashSet<_>>(), "repeat(min,max) includes both ends");
    assert!(samples(r#"systemProperty("os.name")"#).iter().all(|s| s == "Linux"));
}

#[test]
fn time_functions() {
    let now = chrono::Utc::now().timestamp_millis();
    assert!(ints("timestamp()").iter().all(|t| (*t - now).abs() < 60_000), "timestamp() is epoch milliseconds");
    assert!(ints("timestampSeconds()").iter().all(|t| (*t - now / 1000).abs() < 60));
    let lo = 1_704_067_200_000i64; // 01-01-2024 00:00:00 UTC
    let hi = lo + 86_400_000;
    assert!(ints(r#"timestamp("01-01-2024 00:00:00", "02-01-2024 00:00:00")"#).iter().all(|t| (lo..hi).contains(t)));
    assert!(ints(r#"timestampSeconds("01-01-2024 00:00:00", "02-01-2024 00:00:00")"#)
        .iter()
        .all(|t| (lo / 1000..hi / 1000).contains(t)));
    all_match("date()", r"^[A-Z][a-z]{2}, \d{1,2} [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d UTC$");
    all_match(r#"date("yyyy-MM-dd")"#, r"^\d{4}-\d\d-\d\d$");
    all_match(r#"date("01-01-2024 00:00:00", "31-01-2024 00:00:00", "yyyy/MM/dd")"#, r"^2024/01/\d\d$");
    all_match(r#"date("2024-03-01", "2024-03-05", "yyyy-MM-dd", "dd.MM.yyyy")"#, r"^0[1-4]\.03\.2024$");
    assert!(samples(r#"dateFormat("2024-01-31", "yyyy-MM-dd", "dd/MM/yyyy")"#).iter().all(|s| s == "31/01/2024"));
    all_match("time()", r"^\d{1,2}:\d\d [AP]M$");
    all_match(r#"time("HH:mm")"#, r"^\d\d:\d\d$");
    all_match(r#"time("09:00", "10:00", "HH:mm")"#, r"^09:\d\d$");
    assert!(samples(r#"addDays("31-01-2024 00:00:00", 1)"#).iter().all(|s| s == "01-02-2024 00:00:00"));
    assert!(samples(r#"addHours("yyyy-MM-dd HH:mm", "2024-01-31 23:00", 2)"#).iter().all(|s| s == "2024-02-01 01:00"));
    assert!(samples(r#"addMinutes("31-01-2024 00:00:00", -1)"#).iter().all(|s| s == "30-01-2024 23:59:00"));
    assert!(samples(r#"addSeconds("31-01-2024 00:00:00", 61)"#).iter().all(|s| s == "31-01-2024 00:01:01"));
    assert!(samples(r#"addWeeks("31-01-2024 00:00:00", 1)"#).iter().all(|s| s == "07-02-2024 00:00:00"));
    assert!(samples(r#"addMonths("31-01-2024 00:00:00", 1)"#).iter().all(|s| s == "29-02-2024 00:00:00"));
    assert!(samples(r#"addYears("29-02-2024 00:00:00", 1)"#).iter().all(|s| s == "28-02-2025 00:00:00"));
    assert!(ints(r#"toTimestamp("01-01-2024 00:00:00")"#).iter().all(|t| *t == lo));
    assert!(ints(r#"toTimestampSeconds("2024-01-01", "yyyy-MM-dd")"#).iter().all(|t| *t == lo / 1000));
}

#[test]
fn names_places_and_numbers() {
    all_match("firstName()", r"^[A-Z][a-z]+$");
    all_match("lastName()", r"^[A-Z][a-z]+$");
    all_match("surname()", r"^[A-Z][a-z]+$");
    all_match("username()", r"^[a-z]{2,}$");
    all_match("email()", r"^[a-z]+\.[a-z]+@[a-z0-9]+\.com$");
    all_match(r#"email("example.org")"#, r"^[a-z]+\.[a-z]+@example\.org$");
    for f in ["company()", "city()", "state()", "street()", "country()"] {
        assert!(samples(f).iter().all(|s| !s.is_empty()), "{f}");
    }
    let all: serde_json::Value = serde_json::from_str(&samples("countriesList()")[0]).unwrap();
    assert!(all.as_object().unwrap().len() > 40);
    assert!(samples(r#"countriesList("US")"#).iter().all(|s| s == "United States"));
    let two: serde_json::Value = serde_json::from_str(&samples(r#"countriesList("us", "FR")"#)[0]).unwrap();
    assert_eq!(two.as_object().unwrap().len(), 2);
    all_match("phone()", r"^\d{3}-\d{3}-\d{4}$");
    all_match("ssn()", r"^\d{3}-\d{2}-\d{4}$");
    for s in samples("ipv4()") {
        s.parse::<std::net::Ipv4Addr>().unwrap_or_else(|_| panic!("{s}"));
    }
    for s in samples("ipv6()") {
        s.parse::<std::net::Ipv6Addr>().unwrap_or_else(|_| panic!("{s}"));
        assert!(!s.chars().any(|c| c.is_ascii_uppercase()));
    }
    assert!(samples(r#"ipv6("upper")"#).iter().all(|s| !s.chars().any(|c| c.is_ascii_lowercase())));
    assert!(samples(r#"lorem(7, "words")"#).iter().all(|s| s.split(' ').count() == 7));
    assert!(samples(r#"lorem(2, "paragraphs")"#).iter().all(|s| s.matches("\\n\\n").count() == 1 && s.ends_with('.')));
}

#[test]
fn every_function_is_covered_by_a_test_above() {
    let src = include_str!("functions.rs");
    for name in NAMES {
        assert!(src.contains(&format!("{name}(")), "no test calls {name}()");
    }
}

#[test]
fn malformed_schemas_give_positioned_errors() {
    for (schema, line, col, what) in [
        ("{\"a\": \"{{nosuch()}}\"}", 1, 10, "unknown function nosuch()"),
        ("{\n\n  \"a\": {{integer(1)}}\n}", 3, 10, "integer() takes 2 argument(s), got 1"),
        ("{\"a\": \"{{alpha(3)\"}", 1, 8, "unclosed '{{'"),
        ("{{integer(5, 1)}}", 1, 3, "max (1) must be greater than min (5)"),
        ("{{bool(2)}}", 1, 3, "probability 2 is not between 0 and 1"),
        ("{{double(1, 2, \"%q\")}}", 1, 3, "unsupported format"),
        ("{{regexify(\"[\")}}", 1, 3, "invalid regex"),
        ("{{lorem(3, \"pages\")}}", 1, 3, "\"words\" or \"paragraphs\""),
        ("{{date(\"a\", \"b\")}}", 1, 3, "takes 0, 1"),
    ] {
        let e = compile(schema).expect_err(schema);
        assert_eq!((e.pos.line, e.pos.col), (line, col), "{schema}: {e}");
        assert!(e.message.contains(what), "{schema}: {e}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    #[test]
    fn compiling_and_generating_never_panic(s in r#"[{}()'",\\a-zA-Z0-9 \[\]:.%-]{0,60}"#) {
        if let Ok(mut g) = Generator::new(&s, 1) {
            let _ = g.next_string();
        }
    }

    #[test]
    fn calls_with_random_arguments_never_panic(f in proptest::sample::select(NAMES.to_vec()), args in proptest::collection::vec(r#"(-?[0-9]{1,4}|"[a-z%.]{0,4}"|words)"#, 0..4)) {
        let schema = format!("{{{{{f}({})}}}}", args.join(","));
        if let Ok(mut g) = Generator::new(&schema, 1) {
            let _ = g.next_string();
        }
    }
}
