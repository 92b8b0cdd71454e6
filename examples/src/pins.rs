//! `vmcp pins list|diff|approve`: the operator's side of tool integrity, working on
//! the store the gateway reads (docs/integrity.md): the pin file (an approval is
//! written under the file's lock: write a temporary file, rename) or, with
//! `integrity.store: redis`, the replicas' Redis (a compare-and-set). The running
//! gateways notice within a second and advertise the approved definitions again.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use clap::Subcommand;
use vmcp_service::config::{PinStoreKind, load_file};
use vmcp_service::integrity::approval::{self, Selection};
use vmcp_service::integrity::redis_pins::RedisPinStore;
use vmcp_service::integrity::{EntryKind, FilePinStore, PinStore};

#[derive(Subcommand)]
pub enum PinsAction {
    /// Every pinned and pending entry: backend, kind, name, state (pinned, changed, new).
    List {
        /// Only this backend.
        #[arg(long)]
        backend: Option<String>,
    },
    /// Pending definitions against their pins, field by field.
    Diff {
        /// Only entries with this name (the backend's own, not the prefixed one).
        name: Option<String>,
        /// Only this backend.
        #[arg(long)]
        backend: Option<String>,
    },
    /// Make pending definitions the pins: NAME (in every backend, or `--backend`'s),
    /// or everything pending of `--backend`.
    Approve {
        /// The entry's name (the backend's own; a template's URI template).
        name: Option<String>,
        /// Only this backend (alone: everything pending of it).
        #[arg(long)]
        backend: Option<String>,
        /// Only this kind: `tool`, `prompt` or `template`.
        #[arg(long, value_parser = ["tool", "prompt", "template"])]
        kind: Option<String>,
    },
}

/// The pin store: the file `--file`, or what the configuration's `integrity`
/// names (its `path`, or the `sessionStorage` Redis with `store: redis`, whose
/// password comes from `VMCP_SESSION_REDIS_PASSWORD` as for `vmcp serve`).
pub fn pin_store(
    config: Option<PathBuf>,
    file: Option<PathBuf>,
) -> anyhow::Result<Arc<dyn PinStore>> {
    if let Some(file) = file {
        return Ok(Arc::new(FilePinStore::new(file)));
    }
    let Some(config) = config else {
        anyhow::bail!("name the pin file with --file, or the configuration with --config");
    };
    let loaded = load_file(&config)?.config;
    let Some(integrity) = loaded.integrity else {
        anyhow::bail!("{} has no integrity section", config.display());
    };
    match integrity.store {
        PinStoreKind::Redis => {
            let redis = vmcp_service::redis_store::RedisStore::open(&loaded.session_storage)?;
            Ok(Arc::new(RedisPinStore::new(redis)))
        }
        PinStoreKind::File => integrity
            .path
            .map(|p| Arc::new(FilePinStore::new(p)) as Arc<dyn PinStore>)
            .ok_or_else(|| anyhow::anyhow!("{} has no integrity.path", config.display())),
    }
}

/// Who approves from this command line (audited by the gateway as `approved_by`).
fn approver() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    format!("cli:{}", user.chars().take(64).collect::<String>())
}

/// Run one `vmcp pins` action on `store`.
pub async fn run(store: Arc<dyn PinStore>, action: PinsAction) -> anyhow::Result<()> {
    match action {
        PinsAction::List { backend } => {
            let (doc, _) = store.load().await?;
            let selection = Selection {
                backend: backend.as_deref(),
                ..Selection::default()
            };
            for row in approval::rows(&doc, selection) {
                let digest = match (&row.pinned, &row.pending) {
                    (Some(pinned), Some(pending)) => {
                        format!("{} -> {}", short(pinned), short(pending))
                    }
                    (Some(d), None) | (None, Some(d)) => short(d).to_owned(),
                    (None, None) => String::new(),
                };
                println!(
                    "{}\t{}\t{}\t{}\t{digest}",
                    shown(&row.backend),
                    row.key.kind.as_str(),
                    shown(&row.key.name),
                    row.state.as_str(),
                );
            }
            Ok(())
        }
        PinsAction::Diff { name, backend } => {
            let (doc, _) = store.load().await?;
            let selection = Selection {
                backend: backend.as_deref(),
                name: name.as_deref(),
                kind: None,
            };
            let diffs = approval::diffs(&doc, selection);
            if diffs.is_empty() {
                println!("nothing pending");
            }
            for entry in diffs {
                println!(
                    "{} {} {}",
                    shown(&entry.backend),
                    entry.key.kind.as_str(),
                    shown(&entry.key.name)
                );
                for (field, change) in entry.fields {
                    println!("  {field}:");
                    if let Some(old) = change.old {
                        println!("    - {}", shown(&old.to_string()));
                    }
                    if let Some(new) = change.new {
                        println!("    + {}", shown(&new.to_string()));
                    }
                }
            }
            Ok(())
        }
        PinsAction::Approve {
            name,
            backend,
            kind,
        } => {
            if name.is_none() && backend.is_none() {
                anyhow::bail!("approve NAME, or everything of one backend with --backend B");
            }
            let kind = kind.as_deref().and_then(EntryKind::parse);
            // The change may run again (a compare-and-set retried): the last run's
            // approvals are what was stored.
            let approved = Arc::new(Mutex::new(Vec::new()));
            let by = approver();
            let out = approved.clone();
            store
                .update(Box::new(move |doc| {
                    let selection = Selection {
                        backend: backend.as_deref(),
                        name: name.as_deref(),
                        kind,
                    };
                    let now = approval::approve(doc, selection, &by);
                    let changed = !now.is_empty();
                    *out.lock().unwrap_or_else(|e| e.into_inner()) = now;
                    changed
                }))
                .await?;
            let approved = std::mem::take(&mut *approved.lock().unwrap_or_else(|e| e.into_inner()));
            if approved.is_empty() {
                anyhow::bail!("nothing pending matches; `vmcp pins list` shows what is");
            }
            for (backend, key, pin) in &approved {
                // The gateway writes the audit line when it applies the approval.
                tracing::info!(
                    backend = %backend,
                    kind = key.kind.as_str(),
                    name = %key.name,
                    sha256 = %pin.sha256,
                    store = ?store,
                    "tool integrity: approved"
                );
                println!(
                    "approved {} {} {} ({})",
                    shown(backend),
                    key.kind.as_str(),
                    shown(&key.name),
                    short(&pin.sha256)
                );
            }
            Ok(())
        }
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// `text` with control characters escaped: names and descriptions come from
/// backends and must not drive the operator's terminal.
fn shown(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            {
                c.escape_debug().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}
