//! The configuration reference (`docs/reference/configuration.md`) is generated from the config
//! types' doc comments, and this test fails when the checked-in file differs from what the code
//! generates, so the reference cannot drift from the code.
//!
//! The generator parses the config source files with `syn`, walks [`eosflow::Config`] from its
//! sections down, and prints every key with its TOML path, environment variable
//! ([`eosflow::config::env_name`]), type (a choice lists its accepted values), default (from
//! `Config::default()`) and doc text. A key, section or choice without a doc comment fails it.
//!
//! Regenerate after changing a config type: `make config-reference` (runs this test with
//! `BLESS=1`, which writes the file instead of comparing).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use syn::{Attribute, Fields, GenericArgument, Item, PathArguments, Type};

/// The files that declare configuration types, relative to the repository root.
const SOURCES: &[&str] = &[
    "src/config/mod.rs",
    "src/config/outbox.rs",
    "src/kafka/config.rs",
    "src/processor/config.rs",
    "src/state/config.rs",
    "src/retry/config.rs",
    "src/retry/policy.rs",
    "src/codec/config.rs",
    "src/telemetry/config.rs",
    "src/query/config.rs",
    "src/query/partitioner.rs",
];

const REFERENCE: &str = "docs/reference/configuration.md";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One field of a config struct.
struct Field {
    name: String,
    ty: Type,
    doc: String,
}

/// One accepted value of a choice, by its serde name.
struct Variant {
    name: String,
    doc: String,
}

#[derive(Default)]
struct Types {
    structs: BTreeMap<String, (String, Vec<Field>)>,
    enums: BTreeMap<String, Vec<Variant>>,
    missing_docs: Vec<String>,
}

/// The doc comment of an item, its lines joined by spaces.
fn doc(attrs: &[Attribute]) -> String {
    let mut lines = vec![];
    for a in attrs {
        if let syn::Meta::NameValue(nv) = &a.meta {
            if nv.path.is_ident("doc") {
                if let syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) = &nv.value
                {
                    lines.push(s.value().trim().to_string());
                }
            }
        }
    }
    lines.join(" ").trim().to_string()
}

/// `rename = "…"` / `rename_all = "…"` of a `#[serde(...)]` attribute.
fn serde_attr(attrs: &[Attribute], key: &str) -> Option<String> {
    let mut found = None;
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|meta| {
            if meta.input.peek(syn::Token![=]) {
                let value: syn::LitStr = meta.value()?.parse()?;
                if meta.path.is_ident(key) {
                    found = Some(value.value());
                }
            }
            Ok(())
        });
    }
    found
}

fn snake_case(ident: &str) -> String {
    let mut out = String::new();
    for (i, c) in ident.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(c.to_lowercase());
    }
    out
}

fn collect(types: &mut Types, file: &syn::File) {
    for item in &file.items {
        match item {
            Item::Struct(s) => {
                let name = s.ident.to_string();
                let Fields::Named(fields) = &s.fields else {
                    continue;
                };
                let mut out = vec![];
                for f in &fields.named {
                    let field = f
                        .ident
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    let doc = doc(&f.attrs);
                    if doc.is_empty() {
                        types.missing_docs.push(format!("{name}::{field}"));
                    }
                    out.push(Field {
                        name: field,
                        ty: f.ty.clone(),
                        doc,
                    });
                }
                types.structs.insert(name, (doc(&s.attrs), out));
            }
            Item::Enum(e) => {
                let name = e.ident.to_string();
                let rename_all = serde_attr(&e.attrs, "rename_all");
                let mut out = vec![];
                for v in &e.variants {
                    let ident = v.ident.to_string();
                    let serde_name = serde_attr(&v.attrs, "rename").unwrap_or_else(|| {
                        match rename_all.as_deref() {
                            Some("snake_case") => snake_case(&ident),
                            _ => ident.clone(),
                        }
                    });
                    let doc = doc(&v.attrs);
                    if doc.is_empty() {
                        types.missing_docs.push(format!("{name}::{ident}"));
                    }
                    out.push(Variant {
                        name: serde_name,
                        doc,
                    });
                }
                types.enums.insert(name, out);
            }
            _ => {}
        }
    }
}

/// The last segment of a type path with its generic arguments: `Option<SaslMechanism>` →
/// ("Option", [SaslMechanism]).
fn split(ty: &Type) -> Option<(String, Vec<&Type>)> {
    let Type::Path(p) = ty else {
        return None;
    };
    let last = p.path.segments.last()?;
    let args = match &last.arguments {
        PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => vec![],
    };
    Some((last.ident.to_string(), args))
}

/// How a reader writes a value of `ty`.
fn type_text(types: &Types, ty: &Type) -> String {
    let Some((name, args)) = split(ty) else {
        return "?".into();
    };
    let inner = |i: usize| args.get(i).map_or("?".into(), |t| type_text(types, t));
    match name.as_str() {
        "String" => "string".into(),
        "u64" | "usize" | "i32" | "u32" => "integer".into(),
        "bool" => "boolean".into(),
        "PathBuf" => "path (empty: not set)".into(),
        "Secret" => "secret string (shown as `***`)".into(),
        "Vec" => format!("list of {}s", inner(0)),
        "BTreeMap" => format!("table of {}s", inner(1)),
        "Option" => format!("{}, or empty (not set)", inner(0)),
        other => match types.enums.get(other) {
            Some(variants) => format!(
                "one of {}",
                variants
                    .iter()
                    .map(|v| format!("`{}`", v.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => other.to_string(),
        },
    }
}

/// The choice (enum) a field takes, if any, for its values' docs.
fn choice<'a>(types: &'a Types, ty: &Type) -> Option<&'a [Variant]> {
    let (name, args) = split(ty)?;
    if name == "Option" {
        return choice(types, args.first()?);
    }
    types.enums.get(&name).map(Vec::as_slice)
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn lookup<'a>(tree: &'a toml::Value, path: &str) -> Option<&'a toml::Value> {
    path.split('.').try_fold(tree, |n, k| n.get(k))
}

/// One section (`[kafka]`, `[kafka.security]`, `[[outbox.tables]]`) and the sections under it.
fn section(
    types: &Types,
    defaults: &toml::Value,
    out: &mut String,
    path: &str,
    struct_name: &str,
    array: bool,
) {
    let Some((struct_doc, fields)) = types.structs.get(struct_name) else {
        panic!("{struct_name} (section {path}) is not declared in the config sources {SOURCES:?}");
    };
    let heading = if array {
        format!("[[{path}]]")
    } else {
        format!("[{path}]")
    };
    out.push_str(&format!("## `{heading}`\n\n{struct_doc}\n\n"));
    if array {
        out.push_str("Entries are set in the file only (no environment variables).\n\n");
    }
    out.push_str("| Key | Environment variable | Type | Default | Description |\n");
    out.push_str("|---|---|---|---|---|\n");
    let mut nested = vec![];
    for f in fields {
        let key = format!("{path}.{}", f.name);
        let (outer, args) = split(&f.ty).unwrap_or_default();
        if types.structs.contains_key(&outer) {
            nested.push((key, outer, false));
            continue;
        }
        if outer == "Vec" {
            if let Some((inner, _)) = args.first().and_then(|t| split(t)) {
                if types.structs.contains_key(&inner) {
                    nested.push((key, inner, true));
                    continue;
                }
            }
        }
        let env = if array {
            "—".to_string()
        } else if key == "kafka.properties" {
            "`EOSFLOW_KAFKA_PROPERTY_<NAME>` per entry".to_string()
        } else if outer == "BTreeMap" {
            "— (file only)".to_string()
        } else {
            format!("`{}`", eosflow::config::env_name(&key))
        };
        let default = if array {
            "—".to_string()
        } else {
            match lookup(defaults, &key) {
                Some(toml::Value::String(s)) if s.is_empty() => "empty".to_string(),
                Some(v) => format!("`{v}`"),
                None => "—".to_string(),
            }
        };
        let mut text = f.doc.clone();
        if let Some(variants) = choice(types, &f.ty) {
            for v in variants {
                text.push_str(&format!(" `{}`: {}", v.name, v.doc));
            }
        }
        let shown_key = if array { f.name.clone() } else { key.clone() };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            shown_key,
            env,
            cell(&type_text(types, &f.ty)),
            cell(&default),
            cell(&text)
        ));
    }
    out.push('\n');
    for (key, name, array) in nested {
        section(types, defaults, out, &key, &name, array);
    }
}

fn generate() -> String {
    let mut types = Types::default();
    for file in SOURCES {
        let path = repo().join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
        collect(&mut types, &parsed);
    }
    let defaults = toml::Value::try_from(eosflow::Config::default()).expect("defaults serialize");
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Generated from the config types' doc comments by tests/config_reference.rs: \
         do not edit; run `make config-reference`. -->\n\n\
         An eosflow instance reads built-in defaults, then a TOML file (`--config`), then \
         `EOSFLOW_*` environment variables; later sources win. Every key's environment variable \
         is its path in upper case with `_` for `.`, prefixed `EOSFLOW_`. Lists from the \
         environment are comma-separated. Unknown keys and bad values stop the start with the \
         key's name (and, for a choice, the accepted values). Secrets (passwords, \
         `postgres.url`) are never printed: `eosflow config` shows `***`, and each password \
         can come from a `*_file` key naming a mounted file instead.\n\n",
    );
    let Some((_, sections)) = types.structs.get("Config") else {
        panic!("Config is not declared in {SOURCES:?}");
    };
    let sections: Vec<(String, String)> = sections
        .iter()
        .map(|f| {
            let (ty, _) = split(&f.ty).unwrap_or_default();
            (f.name.clone(), ty)
        })
        .collect();
    for (name, ty) in &sections {
        section(&types, &defaults, &mut out, name, ty, false);
    }
    // Every key the loader knows (the defaults' leaves) is in the reference.
    fn keys(node: &toml::Value, prefix: &str, out: &mut Vec<String>) {
        match node.as_table() {
            Some(t) if !t.is_empty() => {
                for (k, v) in t {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    keys(v, &key, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut known = vec![];
    keys(&defaults, "", &mut known);
    let absent: Vec<_> = known.iter().filter(|k| !out.contains(k.as_str())).collect();
    assert!(
        absent.is_empty(),
        "keys the loader accepts but the reference leaves out: {absent:?}"
    );
    assert!(
        types.missing_docs.is_empty(),
        "every configuration key and choice needs a doc comment (it is the reference's text); \
         missing: {:?}",
        types.missing_docs
    );
    out.trim_end().to_string() + "\n"
}

#[test]
fn the_configuration_reference_is_generated_from_the_code() {
    let generated = generate();
    let path = repo().join(REFERENCE);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &generated)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{REFERENCE} differs from what the config types' doc comments generate: run \
         `make config-reference` (this test with BLESS=1) and commit the result"
    );
}
