//! The watched objects → backends: pure, so every rule is unit-tested without a cluster.
//!
//! A backend whose auth config, Secret or CA bundle is missing is left out (and named
//! in `skipped`): connecting it without its credentials or trust would be wrong, and
//! it comes in as soon as the missing object does. Secret values only ever go into
//! [`Secret`]s, never into `skipped` or logs.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use super::kinds::Kind;
use crate::config::{
    BackendAuthConfig, BackendConfig, HeaderInjectionConfig, Secret, SubjectTokenType,
    TokenExchangeConfig, ToolOverride, Transport, WorkloadToolsConfig,
};

/// Every watched object by kind and name: the object's JSON without its metadata.
pub(crate) type Objects = BTreeMap<Kind, BTreeMap<String, Value>>;

/// What the cluster contributes to the configuration.
#[derive(Debug, Default)]
pub(crate) struct Discovered {
    pub(crate) backends: Vec<BackendConfig>,
    pub(crate) auth: BTreeMap<String, BackendAuthConfig>,
    pub(crate) tools: Vec<WorkloadToolsConfig>,
    /// CA bundles to write: path → PEM.
    pub(crate) ca_files: BTreeMap<PathBuf, String>,
    /// Backends left out, with why (names only).
    pub(crate) skipped: Vec<String>,
}

impl Discovered {
    /// Whether applying `other` would change nothing (Secrets compared by value).
    pub(crate) fn same(&self, other: &Self) -> bool {
        self.backends == other.backends
            && self.auth == other.auth
            && self.ca_files == other.ca_files
            && serde_json::to_value(&self.tools).ok() == serde_json::to_value(&other.tools).ok()
    }
}

/// The group `group`'s backends in `objects`; CA bundles go under `ca_dir`.
pub(crate) fn discover(objects: &Objects, group: &str, ca_dir: &Path) -> Discovered {
    let mut out = Discovered::default();
    let get = |kind: Kind, name: &str| objects.get(&kind).and_then(|m| m.get(name));
    if get(Kind::Group, group).is_none() {
        out.skipped.push(format!(
            "MCPGroup {group:?} does not exist: no backends discovered"
        ));
        return out;
    }
    for kind in [Kind::Server, Kind::RemoteProxy, Kind::Entry] {
        for (name, object) in objects.get(&kind).into_iter().flatten() {
            let spec = &object["spec"];
            let in_group = match kind {
                Kind::Entry => spec["groupRef"]["name"].as_str(),
                _ => spec["groupRef"].as_str(),
            };
            if in_group != Some(group) {
                continue;
            }
            if out.backends.iter().any(|b| &b.name == name) {
                out.skipped.push(format!(
                    "{} {name:?}: another backend of the group has that name",
                    kind.name()
                ));
                continue;
            }
            match backend(kind, name, object, &get, ca_dir, &mut out) {
                Ok(()) => {}
                Err(why) => out.skipped.push(format!("{} {name:?}: {why}", kind.name())),
            }
        }
    }
    out
}

fn backend<'a>(
    kind: Kind,
    name: &str,
    object: &Value,
    get: &impl Fn(Kind, &str) -> Option<&'a Value>,
    ca_dir: &Path,
    out: &mut Discovered,
) -> Result<(), String> {
    let spec = &object["spec"];
    // MCPServer and MCPRemoteProxy are reached through the proxy the operator runs
    // (its URL in the status); an MCPServerEntry is reached directly.
    let url = match kind {
        Kind::Entry => spec["remoteUrl"].as_str(),
        _ => object["status"]["url"].as_str(),
    }
    .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
    .ok_or("no http(s) URL yet (status.url, or spec.remoteUrl)")?;
    let transport = match spec["proxyMode"].as_str().or(spec["transport"].as_str()) {
        Some("sse") => Transport::Sse,
        // `stdio` servers are served over HTTP by their proxy.
        _ => Transport::StreamableHttp,
    };
    let ca_bundle_path = match spec["caBundleRef"]["configMapRef"].as_object() {
        None => None,
        Some(cm) => {
            let cm_name = cm.get("name").and_then(Value::as_str).unwrap_or(name);
            let key = cm.get("key").and_then(Value::as_str).unwrap_or("ca.crt");
            let pem = get(Kind::ConfigMap, cm_name)
                .and_then(|c| c["data"][key].as_str())
                .ok_or_else(|| format!("CA bundle ConfigMap {cm_name:?} key {key:?} not found"))?;
            let mut hash = std::hash::DefaultHasher::new();
            pem.hash(&mut hash);
            // The content's hash in the name: a changed bundle is a changed backend.
            let path = ca_dir.join(format!("{name}-{:016x}.pem", hash.finish()));
            out.ca_files.insert(path.clone(), pem.to_owned());
            Some(path)
        }
    };
    if let Some(auth) = spec["externalAuthConfigRef"]["name"].as_str() {
        let config = get(Kind::AuthConfig, auth)
            .ok_or_else(|| format!("MCPExternalAuthConfig {auth:?} not found"))?;
        let strategy = strategy(&config["spec"], get)
            .map_err(|why| format!("MCPExternalAuthConfig {auth:?}: {why}"))?;
        out.auth.insert(name.to_owned(), strategy);
    }
    if let Some(tools) = spec["toolConfigRef"]["name"].as_str() {
        let config = get(Kind::ToolConfig, tools)
            .ok_or_else(|| format!("MCPToolConfig {tools:?} not found"))?;
        out.tools.push(tool_config(name, &config["spec"]));
    }
    out.backends.push(BackendConfig {
        name: name.to_owned(),
        url: url.to_owned(),
        transport: Some(transport),
        ca_bundle_path,
        ..Default::default()
    });
    Ok(())
}

fn strategy<'a>(
    spec: &Value,
    get: &impl Fn(Kind, &str) -> Option<&'a Value>,
) -> Result<BackendAuthConfig, String> {
    match spec["type"].as_str() {
        Some("unauthenticated") => Ok(BackendAuthConfig::Unauthenticated),
        Some("headerInjection") => {
            let h = &spec["headerInjection"];
            let header_name = h["headerName"].as_str().ok_or("no headerName")?;
            Ok(BackendAuthConfig::HeaderInjection(HeaderInjectionConfig {
                header_name: header_name.to_owned(),
                header_value: Some(secret(&h["valueSecretRef"], get)?),
                header_value_env: None,
            }))
        }
        Some("tokenExchange") => {
            let t = &spec["tokenExchange"];
            let client_secret = match t.get("clientSecretRef") {
                Some(r) => Some(secret(r, get)?),
                None => None,
            };
            let subject_token_type = match t["subjectTokenType"].as_str() {
                None => None,
                Some(s) => Some(
                    serde_json::from_value::<SubjectTokenType>(Value::from(s))
                        .map_err(|_| format!("subjectTokenType {s:?} is not known"))?,
                ),
            };
            Ok(BackendAuthConfig::TokenExchange(TokenExchangeConfig {
                token_url: t["tokenUrl"].as_str().ok_or("no tokenUrl")?.to_owned(),
                client_id: t["clientId"].as_str().map(str::to_owned),
                client_secret,
                client_secret_env: None,
                audience: t["audience"].as_str().map(str::to_owned),
                scopes: t["scopes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect(),
                subject_token_type,
                ca_bundle_path: None,
            }))
        }
        Some(other) => Err(format!("type {other:?} is not supported")),
        None => Err("no type".into()),
    }
}

/// The value a `{name, key}` reference names in a Secret (base64 in `data`, or
/// `stringData` as some tools leave it).
fn secret<'a>(
    reference: &Value,
    get: &impl Fn(Kind, &str) -> Option<&'a Value>,
) -> Result<Secret, String> {
    let (Some(name), Some(key)) = (reference["name"].as_str(), reference["key"].as_str()) else {
        return Err("a Secret reference needs name and key".into());
    };
    let object = get(Kind::Secret, name).ok_or_else(|| format!("Secret {name:?} not found"))?;
    let value = match object["data"][key].as_str() {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| format!("Secret {name:?} key {key:?} is not UTF-8 text"))?,
        None => object["stringData"][key]
            .as_str()
            .ok_or_else(|| format!("Secret {name:?} has no key {key:?}"))?
            .to_owned(),
    };
    Ok(Secret::new(value.trim_end_matches(['\r', '\n']).to_owned()))
}

fn tool_config(workload: &str, spec: &Value) -> WorkloadToolsConfig {
    let filter = spec["toolsFilter"].as_array().map(|names| {
        names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect()
    });
    let overrides = spec["toolsOverride"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(tool, o)| {
            (
                tool.clone(),
                ToolOverride {
                    name: o["name"].as_str().map(str::to_owned),
                    description: o["description"].as_str().map(str::to_owned),
                    annotations: None,
                },
            )
        })
        .collect();
    WorkloadToolsConfig {
        workload: workload.to_owned(),
        filter,
        exclude_all: false,
        overrides,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn objects(items: &[(Kind, &str, Value)]) -> Objects {
        let mut out = Objects::new();
        for (kind, name, object) in items {
            out.entry(*kind)
                .or_default()
                .insert((*name).to_owned(), object.clone());
        }
        out
    }

    #[test]
    fn the_groups_backends_with_their_auth_tools_and_ca() {
        let dir = Path::new("/run/vmcp-ca");
        let objects = objects(&[
            (Kind::Group, "g", json!({})),
            (
                Kind::Server,
                "fetch",
                json!({"spec": {"groupRef": "g", "transport": "stdio", "toolConfigRef": {"name": "tc"}},
                       "status": {"url": "http://fetch.ns.svc:8080/mcp"}}),
            ),
            (
                Kind::Server,
                "other-group",
                json!({"spec": {"groupRef": "h"}, "status": {"url": "http://x/mcp"}}),
            ),
            (
                Kind::Server,
                "no-url-yet",
                json!({"spec": {"groupRef": "g"}}),
            ),
            (
                Kind::Entry,
                "docs",
                json!({"spec": {"groupRef": {"name": "g"}, "remoteUrl": "https://docs/mcp", "transport": "sse",
                       "externalAuthConfigRef": {"name": "key"},
                       "caBundleRef": {"configMapRef": {"name": "ca", "key": "ca.crt"}}}}),
            ),
            (
                Kind::AuthConfig,
                "key",
                json!({"spec": {"type": "headerInjection",
                       "headerInjection": {"headerName": "X-Api-Key", "valueSecretRef": {"name": "s", "key": "k"}}}}),
            ),
            (Kind::Secret, "s", json!({"data": {"k": "czNjcmV0"}})),
            (Kind::ConfigMap, "ca", json!({"data": {"ca.crt": "PEM"}})),
            (
                Kind::ToolConfig,
                "tc",
                json!({"spec": {"toolsFilter": ["get"], "toolsOverride": {"get": {"name": "fetch_get"}}}}),
            ),
        ]);
        let d = discover(&objects, "g", dir);
        let names: Vec<_> = d.backends.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["fetch", "docs"]);
        assert_eq!(d.backends[0].url, "http://fetch.ns.svc:8080/mcp");
        assert_eq!(d.backends[0].transport, Some(Transport::StreamableHttp));
        assert_eq!(d.backends[1].transport, Some(Transport::Sse));
        let ca = d.backends[1].ca_bundle_path.clone().expect("a CA file");
        assert!(ca.starts_with(dir));
        assert_eq!(d.ca_files.get(&ca).map(String::as_str), Some("PEM"));
        match &d.auth["docs"] {
            BackendAuthConfig::HeaderInjection(h) => {
                assert_eq!(h.header_name, "X-Api-Key");
                assert_eq!(h.header_value.as_ref().map(Secret::expose), Some("s3cret"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.tools[0].workload, "fetch");
        assert_eq!(d.tools[0].filter.as_deref(), Some(&["get".to_owned()][..]));
        assert_eq!(
            d.tools[0].overrides["get"].name.as_deref(),
            Some("fetch_get")
        );
        assert_eq!(d.skipped.len(), 1, "{:?}", d.skipped);
        assert!(d.skipped[0].contains("no-url-yet"));
    }

    #[test]
    fn a_missing_secret_leaves_the_backend_out_and_names_no_value() {
        let objects = objects(&[
            (Kind::Group, "g", json!({})),
            (
                Kind::Entry,
                "docs",
                json!({"spec": {"groupRef": {"name": "g"}, "remoteUrl": "https://docs/mcp",
                       "externalAuthConfigRef": {"name": "key"}}}),
            ),
            (
                Kind::AuthConfig,
                "key",
                json!({"spec": {"type": "headerInjection",
                       "headerInjection": {"headerName": "X-Api-Key", "valueSecretRef": {"name": "s", "key": "k"}}}}),
            ),
            (Kind::Secret, "s", json!({"data": {"other": "czNjcmV0"}})),
        ]);
        let d = discover(&objects, "g", Path::new("/tmp"));
        assert!(d.backends.is_empty());
        assert!(d.skipped[0].contains("has no key \"k\""), "{:?}", d.skipped);
        assert!(!format!("{d:?}").contains("s3cret"));
    }

    #[test]
    fn without_the_group_nothing_is_discovered() {
        let objects = objects(&[(
            Kind::Server,
            "fetch",
            json!({"spec": {"groupRef": "g"}, "status": {"url": "http://f/mcp"}}),
        )]);
        let d = discover(&objects, "g", Path::new("/tmp"));
        assert!(d.backends.is_empty());
        assert!(d.skipped[0].contains("MCPGroup"));
    }
}
