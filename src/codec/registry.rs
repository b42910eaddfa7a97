//! The schema registry client: register a contract, fetch it by id, and encode/decode Avro in
//! the Confluent wire format. schema_registry_converter caches by id and subject, so the hot path
//! never asks the registry twice for the same schema.

use apache_avro::types::Value;
use schema_registry_converter::async_impl::easy_avro::{EasyAvroDecoder, EasyAvroEncoder};
use schema_registry_converter::async_impl::schema_registry::{
    get_schema_by_id, post_schema, SrSettings,
};
use schema_registry_converter::error::SRCError;

use crate::config::SchemaRegistryConfig;
use schema_registry_converter::schema_registry_common::{
    SchemaType, SubjectNameStrategy, SuppliedSchema,
};

/// Why a registry or codec call failed.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The registry refused, was unreachable, or the bytes were not what the schema says.
    #[error("schema registry at {url}: {error}")]
    Registry {
        /// The registry base URL.
        url: String,
        /// schema_registry_converter's error, with its cause.
        error: String,
        /// Whether trying again may help (a transient failure).
        retriable: bool,
    },
}

/// A connection to one Confluent-compatible registry.
#[derive(Clone)]
pub struct Registry {
    url: String,
    settings: SrSettings,
    encoder: EasyAvroEncoder,
    decoder: EasyAvroDecoder,
    /// For the endpoints schema_registry_converter does not wrap (config, compatibility).
    http: reqwest::Client,
    basic: Option<(String, String)>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("url", &self.url).finish()
    }
}

impl Registry {
    /// Connects (lazily) to the registry at `url` (Apicurio: `…/apis/ccompat/v7`), no TLS CA or
    /// credentials: the local stack's registry.
    pub fn new(url: &str) -> Self {
        let settings = SrSettings::new(url.trim_end_matches('/').to_string());
        Self::with_settings(url, settings, reqwest::Client::new(), None)
    }

    /// Connects as `[schema_registry]` says: a private CA (`ca_file`) for `https://`, basic
    /// auth (`username`/`password`). A CA file that is not PEM fails here, naming the key.
    pub fn from_config(cfg: &SchemaRegistryConfig) -> Result<Self, CodecError> {
        let bad = |error: String| CodecError::Registry {
            url: cfg.url.clone(),
            error,
            retriable: false,
        };
        let client_builder = || -> Result<reqwest::ClientBuilder, CodecError> {
            let mut b = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
            if !cfg.ca_file.as_os_str().is_empty() {
                let ca = cfg.ca_file.display().to_string();
                let pem = std::fs::read(&cfg.ca_file)
                    .map_err(|e| bad(format!("schema_registry.ca_file {ca:?}: {e}")))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                    bad(format!(
                        "schema_registry.ca_file {ca:?} is not a PEM CA bundle: {e}"
                    ))
                })?;
                for c in certs {
                    b = b.add_root_certificate(c);
                }
            }
            Ok(b)
        };
        let basic = (!cfg.username.is_empty())
            .then(|| (cfg.username.clone(), cfg.password.expose().to_string()));
        let mut sb = SrSettings::new_builder(cfg.url.trim_end_matches('/').to_string());
        if let Some((u, p)) = &basic {
            sb.set_basic_authorization(u, Some(p));
        }
        let settings = sb
            .build_with(client_builder()?)
            .map_err(|e| bad(format!("building the registry client: {}", e.error)))?;
        let http = client_builder()?
            .build()
            .map_err(|e| bad(format!("building the registry client: {e}")))?;
        Ok(Self::with_settings(&cfg.url, settings, http, basic))
    }

    fn with_settings(
        url: &str,
        settings: SrSettings,
        http: reqwest::Client,
        basic: Option<(String, String)>,
    ) -> Self {
        Self {
            url: url.to_string(),
            encoder: EasyAvroEncoder::new(settings.clone()),
            decoder: EasyAvroDecoder::new(settings.clone()),
            settings,
            http,
            basic,
        }
    }

    /// A request on the plain HTTP client, with the credentials.
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, url);
        match &self.basic {
            Some((u, p)) => rb.basic_auth(u, Some(p)),
            None => rb,
        }
    }

    fn err(&self, e: SRCError) -> CodecError {
        CodecError::Registry {
            url: self.url.clone(),
            error: match &e.cause {
                Some(c) => format!("{}: {c}", e.error),
                None => e.error.clone(),
            },
            retriable: e.retriable,
        }
    }

    /// Adds the transport's own reason (TLS verification, connection refused) to a failed
    /// call: schema_registry_converter reports only "http call … failed", which tells an
    /// operator nothing. Costs one extra request, on the error path only.
    async fn explain<T>(&self, r: Result<T, CodecError>) -> Result<T, CodecError> {
        let Err(CodecError::Registry {
            url,
            mut error,
            retriable,
        }) = r
        else {
            return r;
        };
        if error.contains("http call") {
            let probe = format!("{}/subjects", self.url.trim_end_matches('/'));
            if let Err(e) = self.request(reqwest::Method::GET, &probe).send().await {
                let mut cause: Option<&dyn std::error::Error> = Some(&e);
                let mut chain = vec![];
                while let Some(c) = cause {
                    chain.push(c.to_string());
                    cause = c.source();
                }
                error = format!("{error}: {}", chain.join(": "));
            }
        }
        Err(CodecError::Registry {
            url,
            error,
            retriable,
        })
    }

    /// Registers an Avro schema under `subject` (idempotent: an equal schema keeps its id).
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, CodecError> {
        let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.to_string());
        let r = post_schema(&self.settings, subject.to_string(), supplied)
            .await
            .map(|r| r.id)
            .map_err(|e| self.err(e));
        self.explain(r).await
    }

    /// The schema text registered under `id`.
    pub async fn fetch(&self, id: u32) -> Result<String, CodecError> {
        let r = get_schema_by_id(id, &self.settings)
            .await
            .map(|r| r.schema)
            .map_err(|e| self.err(e));
        self.explain(r).await
    }

    /// Encodes `value` with `schema` for `topic` (topic-record subject naming: one topic carries
    /// several event types of one aggregate), registering the schema if needed.
    pub async fn encode(
        &self,
        topic: &str,
        schema: &str,
        value: Value,
    ) -> Result<Vec<u8>, CodecError> {
        let supplied =
            SuppliedSchema::new(record_name(schema), SchemaType::Avro, schema.to_string());
        let strategy =
            SubjectNameStrategy::TopicRecordNameStrategyWithSchema(topic.to_string(), supplied);
        let r = self
            .encoder
            .encode_value(value, &strategy)
            .await
            .map_err(|e| self.err(e));
        self.explain(r).await
    }

    /// Decodes Confluent wire-format bytes, fetching the writer schema by id (cached).
    pub async fn decode(&self, bytes: &[u8]) -> Result<Value, CodecError> {
        let r = self
            .decoder
            .decode(Some(bytes))
            .await
            .map(|r| r.value)
            .map_err(|e| self.err(e));
        self.explain(r).await
    }
}

/// One version registered under a subject ([`Registry::versions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectVersion {
    /// The subject's version number (1, 2, …).
    pub version: i64,
    /// The schema id (what the wire format's header carries).
    pub id: u32,
    /// The schema text.
    pub schema: String,
}

/// What the registry says about a candidate schema for a subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryVerdict {
    /// The subject does not exist yet: nothing to be compatible with.
    NoSubject,
    /// Compatible with the latest version under the subject's rule.
    Compatible,
    /// Incompatible; the registry's messages (when it gives any).
    Incompatible(Vec<String>),
}

impl Registry {
    /// Registers every contract of `catalog` (a service calls this at start; `eosflow schemas
    /// register` does it from the CLI), under the subject `strategy` names for `topic_of(contract)`.
    pub async fn register_catalog(
        &self,
        catalog: &super::catalog::Catalog,
        strategy: super::catalog::SubjectStrategy,
        topic_of: impl Fn(&super::catalog::Contract) -> String,
    ) -> Result<Vec<(String, String, u32)>, CodecError> {
        let mut out = Vec::new();
        for c in catalog.iter() {
            let subject = strategy.subject(&topic_of(c), c);
            let id = self.register(&subject, &c.text).await?;
            out.push((c.type_name.clone(), subject, id));
        }
        Ok(out)
    }

    fn http_err(&self, e: impl std::fmt::Display) -> CodecError {
        CodecError::Registry {
            url: self.url.clone(),
            error: e.to_string(),
            retriable: true,
        }
    }

    /// Sets the subject's compatibility rule (`BACKWARD`, …): Apicurio's default is no rule at
    /// all, under which its compatibility endpoint answers "compatible" to anything.
    pub async fn set_compatibility(&self, subject: &str, rule: &str) -> Result<(), CodecError> {
        let url = format!(
            "{}/config/{}",
            self.url.trim_end_matches('/'),
            urlencode(subject)
        );
        let resp = self
            .request(reqwest::Method::PUT, &url)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .json(&serde_json::json!({ "compatibility": rule }))
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(self.http_err(format!("PUT {url}: {status}: {body}")));
        }
        Ok(())
    }

    /// The latest schema text under `subject`, or `None` when the subject does not exist.
    pub async fn latest(&self, subject: &str) -> Result<Option<String>, CodecError> {
        let url = format!(
            "{}/subjects/{}/versions/latest",
            self.url.trim_end_matches('/'),
            urlencode(subject)
        );
        let resp = self
            .request(reqwest::Method::GET, &url)
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.map_err(|e| self.http_err(e))?;
        if !status.is_success() {
            return Err(self.http_err(format!("GET {url}: {status}: {body}")));
        }
        Ok(body["schema"].as_str().map(str::to_string))
    }

    /// Every version registered under `subject`, oldest first, or `None` when the subject does
    /// not exist: what a store may hold (its changelog subject lists every value schema it was
    /// ever written with), for `eosflow schemas check` and a store serde's warm cache.
    ///
    /// ```no_run
    /// use eosflow::serdes::{Registry, StoreSchema};
    ///
    /// # async fn held() -> Result<(), eosflow::serdes::CodecError> {
    /// let registry = Registry::new("http://127.0.0.1:18081/apis/ccompat/v7");
    /// let subject = StoreSchema::subject("shop", "counts");
    /// for v in registry.versions(&subject).await?.unwrap_or_default() {
    ///     println!("version {} is schema id {}", v.version, v.id);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn versions(&self, subject: &str) -> Result<Option<Vec<SubjectVersion>>, CodecError> {
        let base = format!(
            "{}/subjects/{}/versions",
            self.url.trim_end_matches('/'),
            urlencode(subject)
        );
        let resp = self
            .request(reqwest::Method::GET, &base)
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.map_err(|e| self.http_err(e))?;
        if !status.is_success() {
            return Err(self.http_err(format!("GET {base}: {status}: {body}")));
        }
        let mut numbers: Vec<i64> = body
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
            .unwrap_or_default();
        numbers.sort_unstable();
        let mut out = Vec::with_capacity(numbers.len());
        for n in numbers {
            let url = format!("{base}/{n}");
            let resp = self
                .request(reqwest::Method::GET, &url)
                .send()
                .await
                .map_err(|e| self.http_err(e))?;
            let status = resp.status();
            let v: serde_json::Value = resp.json().await.map_err(|e| self.http_err(e))?;
            if !status.is_success() {
                return Err(self.http_err(format!("GET {url}: {status}: {v}")));
            }
            let (Some(id), Some(schema)) = (v["id"].as_u64(), v["schema"].as_str()) else {
                return Err(self.http_err(format!("GET {url}: no id or schema in {v}")));
            };
            out.push(SubjectVersion {
                version: n,
                id: u32::try_from(id)
                    .map_err(|e| self.http_err(format!("GET {url}: id {id}: {e}")))?,
                schema: schema.to_string(),
            });
        }
        Ok(Some(out))
    }

    /// Asks the registry whether `schema` may follow the latest version of `subject` under the
    /// subject's configured rule (Confluent `POST /compatibility/subjects/{s}/versions/latest`).
    pub async fn check_compatibility(
        &self,
        subject: &str,
        schema: &str,
    ) -> Result<RegistryVerdict, CodecError> {
        let url = format!(
            "{}/compatibility/subjects/{}/versions/latest?verbose=true",
            self.url.trim_end_matches('/'),
            urlencode(subject)
        );
        let resp = self
            .request(reqwest::Method::POST, &url)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .json(&serde_json::json!({"schemaType": "AVRO", "schema": schema}))
            .send()
            .await
            .map_err(|e| self.http_err(e))?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
        // Confluent answers 404 for an unknown subject; Apicurio answers "compatible", so the
        // subject's existence is asked first.
        if status == reqwest::StatusCode::NOT_FOUND || self.latest(subject).await?.is_none() {
            return Ok(RegistryVerdict::NoSubject);
        }
        if !status.is_success() {
            return Err(self.http_err(format!("POST {url}: {status}: {body}")));
        }
        if body["is_compatible"].as_bool() == Some(true) {
            return Ok(RegistryVerdict::Compatible);
        }
        let messages = body["messages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        m.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| m.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(RegistryVerdict::Incompatible(messages))
    }
}

/// Percent-encodes a subject for a URL path segment.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The full name (`namespace.name`) of an Avro record schema, for subject naming.
pub(crate) fn record_name(schema: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(schema).ok()?;
    let name = v.get("name")?.as_str()?;
    match v.get("namespace").and_then(|n| n.as_str()) {
        Some(ns) if !name.contains('.') => Some(format!("{ns}.{name}")),
        _ => Some(name.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_contract_in_schemas_is_valid_avro_with_docs() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
        let mut stack = vec![root];
        let mut checked = 0;
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("schemas dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "avsc") {
                    let text = std::fs::read_to_string(&path).expect("read schema");
                    apache_avro::Schema::parse_str(&text)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
                    for f in json["fields"].as_array().expect("a record") {
                        assert!(
                            f.get("doc").is_some(),
                            "{}: field {} has no doc",
                            path.display(),
                            f["name"]
                        );
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 0);
    }

    #[test]
    fn record_name_joins_namespace() {
        let s = r#"{"type":"record","name":"Created","namespace":"things","fields":[]}"#;
        assert_eq!(super::record_name(s).as_deref(), Some("things.Created"));
        assert_eq!(super::record_name("not json"), None);
    }
}
