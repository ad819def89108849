//! Seed 002's benchmark: commit N files of one window, serially and in parallel, to an
//! object store and to the local disk, through kafka-to-gcs's own committer.
//!
//! For each parallelism the window is published twice: first into an empty directory
//! (renames only), then again over the first run's files under other names (the trash
//! step removes N old files, then N renames), as Spark's commitJob / trashFiles /
//! moveFiles do when a partition is overwritten. Prints a table, and writes a CSV and
//! an SVG chart of speed-up against parallelism when asked.
//!
//! ```text
//! cargo run --release --example commit_bench -- --output gs://flexrun/bench/ \
//!     --files 5000 --size 65536 --parallelism 1,4,16,64 --csv out.csv --svg out.svg
//! ```

use flexrun::kafka_to_gcs::committer::{staging_prefix, Committer};
use flexrun::kafka_to_gcs::log::FilePlan;
use flexrun::store::{Location, Store};
use std::time::Instant;

struct Args {
    output: String,
    files: usize,
    size: usize,
    parallelism: Vec<usize>,
    csv: Option<String>,
    svg: Option<String>,
    label: String,
}

fn args() -> Args {
    let mut a = Args {
        output: String::new(),
        files: 5000,
        size: 65536,
        parallelism: vec![1, 4, 16, 64],
        csv: None,
        svg: None,
        label: String::new(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for p in v.chunks(2) {
        let val = p.get(1).cloned().unwrap_or_default();
        match p[0].as_str() {
            "--output" => a.output = val,
            "--files" => a.files = val.parse().expect("--files N"),
            "--size" => a.size = val.parse().expect("--size BYTES"),
            "--parallelism" => {
                a.parallelism = val.split(',').map(|x| x.parse().expect("--parallelism 1,4,16")).collect()
            }
            "--csv" => a.csv = Some(val),
            "--svg" => a.svg = Some(val),
            "--label" => a.label = val,
            other => {
                eprintln!("commit_bench: unknown argument {other}");
                std::process::exit(2)
            }
        }
    }
    if a.output.is_empty() {
        eprintln!("commit_bench: --output gs://bucket/dir/ or /dir/ is required");
        std::process::exit(2)
    }
    a
}

/// Stage `n` files for one window (not timed), named as run `tag` names them.
async fn stage(c: &Committer, n: usize, size: usize, tag: &str, shards_of: usize) -> Vec<FilePlan> {
    let plans: Vec<FilePlan> = (0..n)
        .map(|i| {
            let final_name = format!("w/output-W-pane-0-last-{i:05}-of-{shards_of:05}.json");
            FilePlan { staged: format!("{}W/{tag}/{final_name}", c.staging), final_name, records: 1 }
        })
        .collect();
    let loader = Committer { store: c.store.clone(), parallelism: 64, staging: c.staging.clone() };
    let data = plans.iter().map(|p| (p.staged.clone(), vec![b'x'; size])).collect();
    loader.stage(data).await.expect("staging");
    plans
}

#[tokio::main]
async fn main() {
    let a = args();
    let mut rows = Vec::new();
    println!(
        "{:<12} {:>11} {:>7} {:>16} {:>18} {:>9}",
        "store", "parallelism", "files", "publish s (new)", "publish s (over)", "speed-up"
    );
    let mut serial = None;
    for &par in &a.parallelism {
        let dir = format!("{}p{par}/", a.output);
        let store = Store::open(&Location::parse(&dir).expect("--output"), None).await.expect("open the store");
        let c = Committer { store, parallelism: par, staging: staging_prefix("bench") };
        let first = stage(&c, a.files, a.size, "a1", a.files).await;
        let t = Instant::now();
        c.publish(&["w/output-W-pane-".to_string()], &first).await.expect("publish");
        let fresh = t.elapsed().as_secs_f64();
        // The same window again with another shard count: every old file is trashed.
        let second = stage(&c, a.files, a.size, "a2", a.files + 1).await;
        let t = Instant::now();
        let r = c.publish(&["w/output-W-pane-".to_string()], &second).await.expect("publish over");
        let over = t.elapsed().as_secs_f64();
        assert_eq!(r.trashed, a.files, "every earlier file was trashed");
        let base = *serial.get_or_insert(over);
        println!("{:<12} {:>11} {:>7} {:>16.2} {:>18.2} {:>8.1}x", a.label, par, a.files, fresh, over, base / over);
        rows.push((par, fresh, over, base / over));
        for p in &second {
            c.store.delete(&p.final_name).await.expect("clean up");
        }
    }
    if let Some(path) = &a.csv {
        let mut s = String::from("store,parallelism,files,size_bytes,publish_new_s,publish_overwrite_s,speedup\n");
        for (p, f, o, x) in &rows {
            s.push_str(&format!("{},{p},{},{},{f:.3},{o:.3},{x:.2}\n", a.label, a.files, a.size));
        }
        std::fs::write(path, s).expect("--csv");
    }
    if let Some(path) = &a.svg {
        chart(path, &a.label, &rows);
    }
}

fn chart(path: &str, label: &str, rows: &[(usize, f64, f64, f64)]) {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let xmax = rows.iter().map(|r| r.0).max().unwrap_or(1) as f64 * 1.5;
    let ymax = rows.iter().map(|r| r.3).fold(1.0, f64::max) * 1.2;
    let mut c = ChartBuilder::on(&root)
        .caption(format!("Window commit speed-up against parallelism ({label})"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1.0..xmax).log_scale(), 0.0..ymax)
        .unwrap();
    c.configure_mesh().x_desc("requests in flight (log scale)").y_desc("speed-up over serial").draw().unwrap();
    let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.0 as f64, r.3)).collect();
    c.draw_series(LineSeries::new(pts.clone(), RED.stroke_width(2))).unwrap();
    c.draw_series(pts.iter().map(|&p| Circle::new(p, 5, RED.filled()))).unwrap();
    root.present().unwrap();
}
