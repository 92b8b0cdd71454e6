//! `kubernetes:` — where discovered mode (`outgoingAuth.source: discovered`) finds its
//! backends: the cluster, the namespace and the VirtualMCPServer whose status it writes.
//! The group is the top-level `groupRef`, as in the reference.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The environment variable naming the namespace when `kubernetes.namespace` is unset
/// (the reference's `VMCP_NAMESPACE`).
pub const NAMESPACE_ENV: &str = "VMCP_NAMESPACE";

/// The namespace of the pod's own ServiceAccount, mounted by the kubelet.
pub const IN_CLUSTER_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `kubernetes:`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesConfig {
    /// The namespace of the group and its resources. Default: `$VMCP_NAMESPACE`, else
    /// the pod's own namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A kubeconfig file. Default: the in-cluster ServiceAccount, else `$KUBECONFIG`
    /// or `~/.kube/config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The VirtualMCPServer whose `status` vmcp writes. Default: `name`; without either,
    /// no status is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_mcp_server: Option<String>,
    /// At most one status write per this interval (default 2s): a flapping backend
    /// does not flood the API server.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub status_interval: Option<Duration>,
}

impl KubernetesConfig {
    /// The status write interval.
    pub fn status_interval(&self) -> Duration {
        self.status_interval.unwrap_or(Duration::from_secs(2))
    }

    /// The namespace to watch: the setting, `$VMCP_NAMESPACE`, the pod's own.
    pub fn resolve_namespace(&self) -> Option<String> {
        if let Some(ns) = &self.namespace {
            return Some(ns.clone());
        }
        if let Ok(ns) = std::env::var(NAMESPACE_ENV)
            && !ns.is_empty()
        {
            return Some(ns);
        }
        std::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    }

    /// Check the section (only read in discovered mode).
    pub fn validate(&self, errors: &mut Vec<String>) {
        if let Some(ns) = &self.namespace
            && !is_dns_label(ns)
        {
            errors.push(format!(
                "kubernetes.namespace {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
            ));
        }
        if let Some(name) = &self.virtual_mcp_server
            && !is_dns_subdomain(name)
        {
            errors.push(format!(
                "kubernetes.virtualMcpServer {name:?} is not a resource name (lowercase letters, digits, '-' and '.')"
            ));
        }
        if self.status_interval.is_some_and(|d| d.is_zero()) {
            errors.push("kubernetes.statusInterval must be greater than 0".into());
        }
        if let Some(path) = &self.kubeconfig
            && path.as_os_str().is_empty()
        {
            errors.push("kubernetes.kubeconfig must not be empty".into());
        }
    }
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A Kubernetes object name (RFC 1123 subdomain).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}
