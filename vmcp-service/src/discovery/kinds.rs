//! The resources discovered mode watches: the toolhive kinds of group
//! `toolhive.stacklok.dev/v1alpha1` and the core ConfigMaps and Secrets they reference.

use kube::core::ApiResource;

const GROUP: &str = "toolhive.stacklok.dev";
const VERSION: &str = "v1alpha1";

/// One watched kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Group,
    Server,
    RemoteProxy,
    Entry,
    AuthConfig,
    ToolConfig,
    ConfigMap,
    Secret,
}

impl Kind {
    /// Every watched kind; the backend kinds in the order that wins a name clash.
    pub(crate) const ALL: [Kind; 8] = [
        Kind::Group,
        Kind::Server,
        Kind::RemoteProxy,
        Kind::Entry,
        Kind::AuthConfig,
        Kind::ToolConfig,
        Kind::ConfigMap,
        Kind::Secret,
    ];

    /// The API's `kind` name.
    pub(crate) fn name(self) -> &'static str {
        self.names().0
    }

    fn names(self) -> (&'static str, &'static str) {
        match self {
            Kind::Group => ("MCPGroup", "mcpgroups"),
            Kind::Server => ("MCPServer", "mcpservers"),
            Kind::RemoteProxy => ("MCPRemoteProxy", "mcpremoteproxies"),
            Kind::Entry => ("MCPServerEntry", "mcpserverentries"),
            Kind::AuthConfig => ("MCPExternalAuthConfig", "mcpexternalauthconfigs"),
            Kind::ToolConfig => ("MCPToolConfig", "mcptoolconfigs"),
            Kind::ConfigMap => ("ConfigMap", "configmaps"),
            Kind::Secret => ("Secret", "secrets"),
        }
    }

    /// How the API addresses it (for `Api<DynamicObject>`).
    pub(crate) fn resource(self) -> ApiResource {
        let (kind, plural) = self.names();
        let core = matches!(self, Kind::ConfigMap | Kind::Secret);
        let (group, version) = if core { ("", "v1") } else { (GROUP, VERSION) };
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if core {
                version.into()
            } else {
                format!("{group}/{version}")
            },
            kind: kind.into(),
            plural: plural.into(),
        }
    }
}

/// The VirtualMCPServer whose status is written.
pub(crate) fn virtual_mcp_server() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "VirtualMCPServer".into(),
        plural: "virtualmcpservers".into(),
    }
}
