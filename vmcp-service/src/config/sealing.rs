//! `sealing`: the key that seals the state the gateway hands to 2026-07-28 clients
//! (`requestState` of parked calls and paused composite runs), shared by replicas
//! (docs/scaling.md).
//!
//! Without it each process draws a random key at start, and a state only opens in
//! the process that sealed it. With it every replica seals and opens with the same
//! key, and the previous keys of a rotation still open what they sealed. A key is
//! read from a file or an environment variable, never from the configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The shortest secret accepted as a sealing key, in bytes.
pub const MIN_SEALING_KEY_BYTES: usize = 32;

/// `sealing:` — the shared sealing key of replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SealingConfig {
    /// A file holding the key: at least 32 bytes of secret (surrounding whitespace
    /// is ignored), e.g. `openssl rand -base64 48`. Exactly one of `keyFile` and
    /// `keyEnv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// The environment variable holding the key (as `keyFile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Keys of a rotation still accepted for opening (never for sealing): the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_key_files: Vec<PathBuf>,
    /// Keys of a rotation still accepted for opening: the environment variables.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_key_envs: Vec<String>,
}

/// The key material `sealing` names, read.
#[derive(Clone, PartialEq, Eq)]
pub struct SealingKeys {
    /// Seals, and opens.
    pub current: Vec<u8>,
    /// Open only.
    pub previous: Vec<Vec<u8>>,
}

impl std::fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingKeys")
            .field("previous", &self.previous.len())
            .finish_non_exhaustive()
    }
}

/// Where one key comes from.
enum Source<'a> {
    File(&'a std::path::Path),
    Env(&'a str),
}

impl SealingConfig {
    /// Read every key; every problem, each naming its field.
    pub fn load(&self) -> Result<SealingKeys, Vec<String>> {
        let mut errors = Vec::new();
        let current = match (&self.key_file, &self.key_env) {
            (Some(_), Some(_)) => {
                errors.push("sealing: set keyFile or keyEnv, not both".to_owned());
                None
            }
            (None, None) => {
                errors.push("sealing: keyFile or keyEnv is required".to_owned());
                None
            }
            (Some(path), None) => read("sealing.keyFile", Source::File(path), &mut errors),
            (None, Some(var)) => read("sealing.keyEnv", Source::Env(var), &mut errors),
        };
        let mut previous = Vec::new();
        for (i, path) in self.previous_key_files.iter().enumerate() {
            let field = format!("sealing.previousKeyFiles[{i}]");
            previous.extend(read(&field, Source::File(path), &mut errors));
        }
        for (i, var) in self.previous_key_envs.iter().enumerate() {
            let field = format!("sealing.previousKeyEnvs[{i}]");
            previous.extend(read(&field, Source::Env(var), &mut errors));
        }
        match current {
            Some(current) if errors.is_empty() => Ok(SealingKeys { current, previous }),
            _ => Err(errors),
        }
    }

    pub(super) fn validate(&self, errors: &mut Vec<String>) {
        if let Err(found) = self.load() {
            errors.extend(found);
        }
    }
}

/// One key, trimmed; `None` (and an error naming `field`, never the secret) when it
/// cannot be read or is too short.
fn read(field: &str, source: Source<'_>, errors: &mut Vec<String>) -> Option<Vec<u8>> {
    let raw = match source {
        Source::File(path) => match std::fs::read(path) {
            Ok(raw) => raw,
            Err(e) => {
                errors.push(format!("{field}: cannot read {}: {e}", path.display()));
                return None;
            }
        },
        Source::Env(var) => match std::env::var_os(var) {
            Some(value) => value.into_encoded_bytes(),
            None => {
                errors.push(format!(
                    "{field}: the environment variable {var} is not set"
                ));
                return None;
            }
        },
    };
    let key = raw.trim_ascii().to_vec();
    if key.len() < MIN_SEALING_KEY_BYTES {
        errors.push(format!(
            "{field}: the key is {} bytes; a sealing key needs at least {MIN_SEALING_KEY_BYTES} (e.g. `openssl rand -base64 48`)",
            key.len()
        ));
        return None;
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of this test's own (removed on drop).
    struct Dir(PathBuf);

    impl Dir {
        fn new(test: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("vmcp-sealing-{test}-{}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn file(dir: &Dir, name: &str, content: &str) -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn keys_are_read_and_trimmed() {
        let dir = Dir::new("read");
        let config = SealingConfig {
            key_file: Some(file(&dir, "k", &format!("  {}\n", "a".repeat(32)))),
            previous_key_files: vec![file(&dir, "p", &"b".repeat(40))],
            ..Default::default()
        };
        let keys = config.load().unwrap();
        assert_eq!(keys.current, "a".repeat(32).into_bytes());
        assert_eq!(keys.previous, vec!["b".repeat(40).into_bytes()]);
        assert!(!format!("{keys:?}").contains("aaaa"), "no secret in Debug");
    }

    #[test]
    fn problems_name_their_field_and_never_the_key() {
        let dir = Dir::new("problems");
        let short = file(&dir, "short", "too-short-secret");
        let cases = [
            (
                SealingConfig {
                    key_file: Some(dir.path().join("missing")),
                    ..Default::default()
                },
                "sealing.keyFile: cannot read",
            ),
            (
                SealingConfig {
                    key_file: Some(short.clone()),
                    ..Default::default()
                },
                "sealing.keyFile: the key is 16 bytes",
            ),
            (
                SealingConfig {
                    key_file: Some(short.clone()),
                    key_env: Some("VMCP_TEST_SEALING_KEY_UNSET".into()),
                    ..Default::default()
                },
                "sealing: set keyFile or keyEnv, not both",
            ),
            (
                SealingConfig {
                    previous_key_files: vec![short.clone()],
                    ..Default::default()
                },
                "sealing: keyFile or keyEnv is required",
            ),
            (
                SealingConfig {
                    key_env: Some("VMCP_TEST_SEALING_KEY_UNSET".into()),
                    ..Default::default()
                },
                "sealing.keyEnv: the environment variable VMCP_TEST_SEALING_KEY_UNSET is not set",
            ),
        ];
        for (config, words) in cases {
            let errors = config.load().unwrap_err();
            assert!(errors.iter().any(|e| e.starts_with(words)), "{errors:?}");
            assert!(!errors.iter().any(|e| e.contains("too-short-secret")));
        }
        let errors = SealingConfig {
            key_file: Some(file(&dir, "k", &"k".repeat(32))),
            previous_key_files: vec![short],
            ..Default::default()
        }
        .load()
        .unwrap_err();
        assert_eq!(
            errors,
            vec![format!(
                "sealing.previousKeyFiles[0]: the key is 16 bytes; a sealing key needs at least 32 (e.g. `openssl rand -base64 48`)"
            )]
        );
    }
}
