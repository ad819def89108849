//! The `flexrun` binary: parses the command line, validates before connecting
//! (status 2 on bad input), runs, and prints the summary. Status 1 is a runtime failure.

use anyhow::{anyhow, Context, Result};
use clap::Parser;
use flexrun::bigquery::{rest, Endpoints, TableRef};
use flexrun::cli::{Cli, Command, DataflowGroup, FlexTemplateAction, Format, JobFlags, LocalAction, TemplatesAction};
use flexrun::config::{KafkaToBqConfig, RunFlags};
use flexrun::schema::Schema;
use flexrun::{generator, kafka, local, pipeline};
use flexrun_templates::{find, find_by_gcs_path, parse_parameter_list, validate, Template};
use std::process::ExitCode;
use tokio::sync::watch;

use flexrun::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

fn main() -> ExitCode {
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLEXRUN_LOG").unwrap_or_else(|_| "info,rdkafka=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match rt.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<UsageError>().is_some() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        None => {
            let t = cli.run.template.as_deref().ok_or_else(|| usage("nothing to do: give --template NAME --parameters k=v,... (see `flexrun templates list`) or a subcommand (see --help)"))?;
            let template = find(t).ok_or_else(|| unknown_template(t))?;
            let job = cli.run.job_name.clone().unwrap_or_else(|| template.name.clone());
            run_template(template, &job, &cli.run.parameters, &cli.run.flags).await
        }
        Some(Command::Run(args)) => {
            let t = args
                .template
                .as_deref()
                .ok_or_else(|| usage("flexrun run needs --template NAME (see `flexrun templates list`)"))?;
            let template = find(t).ok_or_else(|| unknown_template(t))?;
            let job = args.job_name.clone().unwrap_or_else(|| template.name.clone());
            run_template(template, &job, &args.parameters, &args.flags).await
        }
        Some(Command::Dataflow { group: DataflowGroup::FlexTemplate { action: FlexTemplateAction::Run(a) } }) => {
            let template = find_by_gcs_path(&a.template_file_gcs_location).ok_or_else(|| {
                usage(format!(
                    "--template-file-gcs-location={}: not a template flexrun has built in; expected gs://dataflow-templates-REGION/VERSION/flex/ID with ID one of: {}",
                    a.template_file_gcs_location,
                    flexrun_templates::builtin().iter().filter_map(|t| t.google_template_id.clone()).collect::<Vec<_>>().join(", ")
                ))
            })?;
            run_template(template, &a.job_name, &a.parameters, &a.flags).await
        }
        Some(Command::Templates { action }) => templates(action),
        Some(Command::Local { action }) => local_cmd(action).await,
        Some(Command::Estimate(a)) => estimate_cmd(a),
        Some(Command::Simulate(a)) => flexrun::simulate::command::run(&a),
        Some(Command::Calibrate(a)) => flexrun::sizing::command::calibrate_cmd(&a),
        Some(Command::Capacity(a)) => flexrun::sizing::command::capacity_cmd(&a).await,
        Some(Command::Web { addr }) => {
            let (bound, h) = flexrun_web::serve(&addr, flexrun_web::JobRegistry::default())
                .await
                .map_err(|e| usage(format!("--addr {addr}: cannot listen: {e}")))?;
            println!(
                "flexrun web: http://{bound}/estimate (jobs: http://{bound}/jobs, metrics: http://{bound}/metrics)"
            );
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = h => {}
            }
            Ok(())
        }
    }
}

fn estimate_cmd(a: flexrun::cli::EstimateArgs) -> Result<()> {
    use flexrun_estimator as est;
    let (name, baseline) = match &a.baseline {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| usage(format!("--baseline {}: {e}", p.display())))?;
            let name = p.display().to_string();
            let b = est::BaselineFile::parse(&name, &text).map_err(|e| usage(e.to_string()))?;
            (name, b)
        }
        None => ("google-kafka-to-bq-e2-standard-2.yaml".to_string(), est::google_kafka_to_bq()),
    };
    let msg = a.message_size.or(baseline.message_bytes).unwrap_or(1024.0);
    if matches!(a.throughput, est::Rate::BytesPerSecond(_)) && a.message_size.is_some() {
        return Err(usage("--message-size only applies to a throughput in msg/s"));
    }
    let req = est::Request {
        throughput_bytes_s: a.throughput.bytes_per_second(msg),
        mode: a.mode,
        machine_type: a.machine_type.clone(),
        commitment: a.commitment,
    };
    let e = est::estimate(&req, &name, &baseline, &est::Pricing::us_central1()).map_err(|e| usage(e.to_string()))?;
    match a.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&e)?),
        Format::Yaml => print!("{}", serde_yaml::to_string(&e)?),
        Format::Table => {
            println!(
                "{:.1} MiB/s {} on {} ({}): scaling factor {:.4}",
                e.throughput_mib_s,
                req.mode.as_str(),
                req.machine_type,
                format!("commitment {}", req.commitment.as_str()),
                e.scaling_factor
            );
            println!(
                "workers {:.2} → {} billed ({} vCPU, {} GB memory, {} GB disk), SECU {:.2}/h, at {:.0}% CPU",
                e.workers_exact,
                e.workers,
                e.vcpus,
                e.memory_gb,
                e.disk_gb,
                e.secu_per_hour,
                e.mean_cpu * 100.0
            );
            println!(
                "{:<32} {:>12} {:>8} {:>12} {:>10} {:>12}",
                "item", "quantity", "unit", "$/unit-h", "$/hour", "$/month"
            );
            for i in &e.items {
                println!(
                    "{:<32} {:>12.2} {:>8} {:>12.6} {:>10.2} {:>12.2}",
                    i.item, i.quantity, i.unit, i.unit_price, i.per_hour, i.per_month
                );
            }
            println!("{:<32} {:>12} {:>8} {:>12} {:>10.2} {:>12.2}", "total", "", "", "", e.per_hour, e.per_month);
            for n in &e.notes {
                println!("note: {n}");
            }
        }
    }
    Ok(())
}

fn unknown_template(name: &str) -> anyhow::Error {
    let names: Vec<_> = flexrun_templates::builtin().iter().map(|t| t.name.as_str()).collect();
    usage(format!("unknown template {name:?}; built-in templates: {}", names.join(", ")))
}

fn templates(action: TemplatesAction) -> Result<()> {
    match action {
        TemplatesAction::List => {
            for t in flexrun_templates::builtin() {
                let first = t.description.split(". ").next().unwrap_or_default();
                println!("{:<28} {:<10} {}", t.name, t.category, first);
            }
        }
        TemplatesAction::Describe { name, format } => {
            let t = find(&name).ok_or_else(|| unknown_template(&name))?;
            match format {
                Format::Json => println!("{}", serde_json::to_string_pretty(t)?),
                Format::Yaml => print!("{}", serde_yaml::to_string(t)?),
                Format::Table => describe(t),
            }
        }
    }
    Ok(())
}

fn describe(t: &Template) {
    println!("{} ({})", t.name, t.google_template_id.as_deref().unwrap_or("flexrun only"));
    if let Some(p) = &t.gcs_path {
        println!("gcloud path: {p}");
    }
    println!("{}\n", t.description);
    println!("{:<40} {:<9} {:<28} help", "parameter", "required", "default");
    for p in &t.parameters {
        let mut help = p.help_text.clone();
        if !p.enum_options.is_empty() {
            help.push_str(&format!(" [{}]", p.enum_options.join("|")));
        }
        println!(
            "{:<40} {:<9} {:<28} {}",
            p.name,
            if p.is_optional { "no" } else { "yes" },
            p.default_value.as_deref().unwrap_or("-"),
            help
        );
    }
}

async fn run_template(template: &Template, job_name: &str, parameters: &[String], flags: &JobFlags) -> Result<()> {
    if job_name.is_empty() || job_name.contains(['/', '\\']) || job_name.starts_with('.') {
        return Err(usage(format!("invalid job name {job_name:?}: expected letters, digits, '-' or '_'")));
    }
    let mut pairs = Vec::new();
    for p in parameters {
        pairs.extend(parse_parameter_list(p).map_err(|e| usage(e.to_string()))?);
    }
    let resolved = validate(template, &pairs).map_err(|e| usage(e.to_string()))?;
    for (k, v) in &resolved.pipeline_options {
        eprintln!("note: pipeline option {k}={v} passed in --parameters: recorded; not applied by a local run");
    }
    if template.name == "streaming-data-generator" {
        return run_generator(&resolved, flags).await;
    }
    if template.name == "rate-to-stats" || template.name == "kafka-to-kafka" {
        return run_microbatch(&template.name, &resolved, job_name, flags).await;
    }
    let sink = flags.sink().map_err(usage)?;
    let pool = flags.pool().map_err(usage)?;
    let run_flags = RunFlags {
        pool,
        progress: flags.progress(),
        job_name: job_name.to_string(),
        at_least_once_experiment: flags.at_least_once_experiment(),
        max_row_bytes: flags.max_row_bytes,
        batch_bytes: flags.batch_bytes,
        append_request_bytes: flags.append_request_bytes,
        batch_rows: flags.batch_rows,
        idle_timeout: flags.idle_timeout,
        max_messages: None,
        sink: sink.clone(),
    };
    let cfg = KafkaToBqConfig::from_params(&resolved, &run_flags).map_err(|errs| usage(errs.join("\n")))?;
    let endpoints = match sink {
        flexrun::config::SinkKind::BigQuery => Some(
            Endpoints::resolve(flags.bigquery_endpoint.as_deref(), flags.bigquery_grpc_endpoint.as_deref())
                .map_err(usage)?,
        ),
        flexrun::config::SinkKind::Stats { .. } => None,
    };
    for n in flags.notes() {
        eprintln!("note: {n}");
    }
    if !resolved.was_given("useStorageWriteApiAtLeastOnce") && flags.at_least_once_experiment() {
        eprintln!("note: --additional-experiments=streaming_mode_at_least_once: at-least-once delivery (the _default stream), as Google's template does");
    }
    let web = match &flags.web {
        Some(addr) => {
            let jobs = flexrun_web::JobRegistry::default();
            let (bound, _) = flexrun_web::serve(addr, jobs.clone())
                .await
                .map_err(|e| usage(format!("--web {addr}: cannot listen: {e}")))?;
            eprintln!("dashboard: http://{bound}/jobs/{job_name}  (cost estimate: http://{bound}/estimate, metrics: http://{bound}/metrics)");
            Some(jobs)
        }
        None => None,
    };
    let (cancel_tx, _) = watch::channel(false);
    spawn_signal_handler(cancel_tx.clone());
    let report = pipeline::run(cfg.clone(), &flags.checkpoint_root(), endpoints, cancel_tx, web).await?;
    println!(
        "kafka-to-bq job {} ({}, {} shards, {} worker(s) at the end) finished",
        job_name,
        cfg.delivery.as_str(),
        report.shards,
        report.workers
    );
    print!("{}", report.summary.render(report.elapsed.as_secs_f64()));
    if report.decisions.iter().any(|d| d.is_change()) {
        println!("autoscaling ({} policy):", flags.scaling.autoscaling_policy);
        println!("{:>9}  {:>7}  {:<40} detail", "time s", "workers", "rationale");
        for d in &report.decisions {
            println!("{:>9.1}  {:>3} → {:<3}  {:<40} {}", d.time_s, d.from, d.to, d.rationale.as_str(), d.detail);
        }
    }
    if let Some(path) = &flags.summary_json {
        let j = serde_json::json!({
            "job_name": job_name,
            "delivery": cfg.delivery.as_str(),
            "shards": report.shards,
            "elapsed_s": report.elapsed.as_secs_f64(),
            "workers": report.workers,
            "decisions": report.decisions,
            "summary": report.summary,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&j)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn run_generator(resolved: &flexrun_templates::ResolvedParams, flags: &JobFlags) -> Result<()> {
    let cfg = generator::GeneratorConfig::from_params(resolved, flags.seed).map_err(|errs| usage(errs.join("\n")))?;
    // Compile the schema before anything connects, so schema errors exit with status 2.
    generator::Generator::new(&cfg.schema, 0).map_err(|e| usage(format!("{}: {e}", cfg.schema_path)))?;
    let (cancel_tx, cancel_rx) = watch::channel(false);
    spawn_signal_handler(cancel_tx);
    let to_stdout = cfg.sink == generator::SinkSpec::Stdout;
    let r = generator::run(cfg, cancel_rx, !to_stdout).await?;
    let line = format!(
        "streaming-data-generator: {} messages in {:.2} s: {:.0} msg/s achieved, {:.0} msg/s target{}{} (seed {})",
        r.sent,
        r.elapsed_s,
        r.achieved_qps,
        r.target_qps,
        r.delivered
            .map(|d| format!(
                ", {d} acknowledged by Kafka ({:.0} msg/s including the final flush)",
                r.delivered_qps.unwrap_or(0.0)
            ))
            .unwrap_or_default(),
        if r.fell_behind {
            "; FELL BEHIND: this machine or the broker could not keep up with the target rate"
        } else {
            ""
        },
        r.seed
    );
    if to_stdout {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    if let Some(path) = &flags.summary_json {
        std::fs::write(path, serde_json::to_vec_pretty(&r)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// rate-to-stats and kafka-to-kafka: the micro-batch engine with its source and sink.
async fn run_microbatch(
    name: &str,
    p: &flexrun_templates::ResolvedParams,
    job_name: &str,
    flags: &JobFlags,
) -> Result<()> {
    use flexrun::microbatch::{
        self, kafka::KafkaSink, kafka::KafkaSource, rate::RateSource, rate::StatsSink, MicroBatchConfig, Sink, Source,
    };
    let cfg = MicroBatchConfig {
        checkpoint_dir: flags.checkpoint_root().join(job_name),
        progress: flags.progress(),
        max_batch: flags.batch_rows,
        idle_timeout: flags.idle_timeout,
        latency_warm_up: flags.latency_warm_up,
    };
    let (mut source, mut sink): (Box<dyn Source + Send>, Box<dyn Sink + Send>) = if name == "rate-to-stats" {
        let num = |k: &str| p.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let rate = num("rowsPerSecond");
        if rate <= 0.0 {
            return Err(usage("rowsPerSecond must be above 0"));
        }
        let bytes = num("messageBytes") as usize;
        if bytes < 16 {
            return Err(usage(format!("messageBytes={bytes}: expected at least 16")));
        }
        let limit = num("messagesLimit") as u64;
        (Box::new(RateSource::new(rate, bytes, (limit > 0).then_some(limit))), Box::new(StatsSink::default()))
    } else {
        let split = |k: &str| {
            kafka::parse_server_and_topic(p.get(k).unwrap_or_default()).map_err(|e| usage(format!("{k}: {e}")))
        };
        let (rb, rt) = split("readBootstrapServerAndTopic")?;
        let (wb, wt) = split("writeBootstrapServerAndTopic")?;
        let earliest = p.get("kafkaReadOffset") == Some("earliest");
        let json = p.get("messageFormat") != Some("RAW");
        let (source, sink) = tokio::task::spawn_blocking(move || -> Result<(KafkaSource, KafkaSink)> {
            Ok((KafkaSource::new(&rb, &rt, earliest)?, KafkaSink::new(&wb, &wt, json)?))
        })
        .await??;
        (Box::new(source), Box::new(sink))
    };
    let (cancel_tx, mut cancel_rx) = watch::channel(false);
    spawn_signal_handler(cancel_tx);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    tokio::spawn(async move {
        if cancel_rx.changed().await.is_ok() {
            s2.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let report =
        tokio::task::spawn_blocking(move || microbatch::run(source.as_mut(), sink.as_mut(), &cfg, &stop)).await??;
    println!("{name} job {job_name} finished");
    print!("{}", report.render());
    if let Some(path) = &flags.summary_json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

fn spawn_signal_handler(tx: watch::Sender<bool>) {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        for n in 0.. {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            if n == 0 {
                eprintln!("draining: finishing the open batches (signal again to exit at once; the checkpoint stays consistent)");
                // send_replace stores the value even before anything subscribed (a
                // plain send is dropped when no receiver exists yet, and the drain was lost).
                tx.send_replace(true);
            } else {
                eprintln!("exiting without draining");
                std::process::exit(130);
            }
        }
    });
}

fn endpoints(rest: Option<&str>, grpc: Option<&str>) -> Result<Endpoints> {
    Endpoints::resolve(rest, grpc).map_err(usage)
}

async fn local_cmd(action: LocalAction) -> Result<()> {
    match action {
        LocalAction::CreateTopic { bootstrap, topic, partitions } => {
            kafka::create_topic(&bootstrap, &topic, partitions).await?;
            println!("topic {topic} ready ({partitions} partitions) on {bootstrap}");
        }
        LocalAction::CreateTable { table, schema_file, recreate, bigquery_endpoint, bigquery_grpc_endpoint } => {
            let t = TableRef::parse(&table).map_err(|e| usage(e.to_string()))?;
            let ep = endpoints(bigquery_endpoint.as_deref(), bigquery_grpc_endpoint.as_deref())?;
            let schema = match schema_file {
                Some(f) => {
                    let text = std::fs::read_to_string(&f).with_context(|| format!("reading {f}"))?;
                    let json: serde_json::Value =
                        serde_json::from_str(&text).map_err(|e| usage(format!("{f}: not JSON: {e}")))?;
                    Schema::from_json(&json).map_err(|e| usage(format!("{f}: {e}")))?
                }
                None => local::demo_schema(),
            };
            let c = rest::client(&ep).await?;
            if recreate {
                rest::drop_table(&c, &t).await;
            }
            let s = rest::ensure_table(&c, &ep, &t, &schema).await?;
            println!("table {t} ready ({} columns)", s.columns.len());
        }
        LocalAction::Produce { bootstrap, topic, count, start_id, bad_every, message_chars, seed_shape } => {
            let settings = kafka::SourceSettings {
                bootstrap: bootstrap.clone(),
                topic: topic.clone(),
                auth: kafka::Auth::None,
                group_id: "flexrun-produce".into(),
                start_earliest: true,
            };
            let parts = settings.partitions().await?;
            let t = std::time::Instant::now();
            let p = local::produce_shaped(
                &bootstrap,
                &topic,
                parts.len() as i32,
                start_id,
                count,
                bad_every,
                message_chars,
                seed_shape,
            )
            .await?;
            println!(
                "produced {} good and {} bad messages to {topic} in {:.1} s",
                p.good,
                p.bad,
                t.elapsed().as_secs_f64()
            );
        }
        LocalAction::Count { table, distinct, bigquery_endpoint, bigquery_grpc_endpoint } => {
            let t = TableRef::parse(&table).map_err(|e| usage(e.to_string()))?;
            let ep = endpoints(bigquery_endpoint.as_deref(), bigquery_grpc_endpoint.as_deref())?;
            let (n, d) = local::count_rows(&ep, &t, distinct.as_deref()).await.map_err(|e| anyhow!("{e:#}"))?;
            match d {
                Some(d) => println!("{t}: {n} rows, {d} distinct {}", distinct.unwrap_or_default()),
                None => println!("{t}: {n} rows"),
            }
        }
    }
    Ok(())
}
