//! The file parameters Google's templates read from Cloud Storage (issue 65): schemas,
//! UDFs, truststores and keystores given as `gs://BUCKET/OBJECT`. As Google's workers
//! copy each to a local file before use (`FileAwareFactoryFn`), flexrun fetches each
//! once at start into `<checkpoint-root>/.files/<job>/<parameter>/<name>` and runs with
//! that path; a later start fetches it again. Objects come through the same Cloud
//! Storage client kafka-to-gcs writes with (`STORAGE_EMULATOR_HOST` or `--storage-endpoint`
//! for the emulator, application default credentials for Google).
//!
//! An object that cannot be read stops the start with exit 2, naming the parameter.

use crate::store::{Location, Store};
use crate::usage;
use anyhow::Result;
use std::path::Path;

/// The parameters whose value may be a `gs://` file (the templates' metadata says
/// "Cloud Storage path" for each).
pub const FILE_PARAMS: &[&str] = &[
    "javascriptTextTransformGcsPath",
    "confluentAvroSchemaPath",
    "binaryAvroSchemaPath",
    "protoSchemaPath",
    "cdcKeySchemaPath",
    "schemaLocation",
    "avroSchemaLocation",
    "kafkaReadTruststoreLocation",
    "kafkaReadKeystoreLocation",
    "kafkaReadSaslScramTruststoreLocation",
    "schemaRegistryTruststoreLocation",
    "schemaRegistryKeystoreLocation",
];

/// Split `gs://BUCKET/DIR/NAME` into the directory's location and the object's name.
///
/// ```
/// use flexrun::cli::gcs_files::split;
/// let (dir, name) = split("gs://b/udf/fix.js").unwrap();
/// assert_eq!((dir.url(), name.as_str()), ("gs://b/udf/".to_string(), "fix.js"));
/// assert!(split("gs://b/").is_err());
/// ```
pub fn split(v: &str) -> Result<(Location, String), String> {
    let rest = v.strip_prefix("gs://").ok_or_else(|| format!("{v:?} is not a gs:// path"))?;
    let (bucket, object) = rest.split_once('/').unwrap_or((rest, ""));
    let (dir, name) = object.rsplit_once('/').map_or(("", object), |(d, n)| (d, n));
    if bucket.is_empty() || name.is_empty() {
        return Err(format!("{v:?}: expected gs://BUCKET/OBJECT, a file"));
    }
    let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
    Ok((Location::Gcs { bucket: bucket.into(), prefix }, name.to_string()))
}

/// `pairs` with every `gs://` file parameter fetched to a local file under `root` and
/// replaced by its path.
pub async fn fetch(
    pairs: Vec<(String, String)>,
    root: &Path,
    job: &str,
    endpoint: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        if !(FILE_PARAMS.contains(&k.as_str()) && v.starts_with("gs://")) {
            out.push((k, v));
            continue;
        }
        let local = fetch_one(&v, &root.join(".files").join(job).join(&k), endpoint)
            .await
            .map_err(|e| usage(format!("{k}={v}: cannot read it from Cloud Storage: {e}")))?;
        tracing::info!(parameter = %k, from = %v, to = %local, "fetched from Cloud Storage");
        out.push((k, local));
    }
    Ok(out)
}

async fn fetch_one(v: &str, dir: &Path, endpoint: Option<&str>) -> Result<String, String> {
    let (loc, name) = split(v)?;
    let store = Store::open(&loc, endpoint).await.map_err(|e| e.to_string())?;
    let data = store.get(&name).await.map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(&name);
    std::fs::write(&path, data).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path.display().to_string())
}
