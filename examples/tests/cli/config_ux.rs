//! What `vmcp validate`, `init` and `schema` tell a person about their file, run as
//! the real binary; and the published schema checked with the Python `jsonschema`
//! package against every YAML example vmcp ships.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use vmcp_tests::repo_root;

use super::serve::VMCP;

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcp-ux-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("vmcp.yaml");
    std::fs::write(&path, contents).unwrap();
    path
}

async fn vmcp(args: &[&str], file: Option<&Path>) -> (Output, String, String) {
    let mut command = Command::new(VMCP);
    command.args(args).env_remove("RUST_LOG");
    if let Some(file) = file {
        command.arg(file);
    }
    let out = command.output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

async fn validate(name: &str, yaml: &str) -> (bool, String, String) {
    let path = temp_file(name, yaml);
    let (out, stdout, stderr) = vmcp(&["validate", "-c"], Some(&path)).await;
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.success(), stdout, stderr)
}

#[tokio::test]
async fn validate_warns_when_there_are_no_backends() {
    for (name, yaml) in [("empty", ""), ("comments", "# nothing here yet\n")] {
        let (ok, stdout, stderr) = validate(name, yaml).await;
        assert!(ok, "{name}: {stderr}");
        assert!(stdout.contains("valid (0 backend(s))"), "{stdout}");
        assert!(
            stderr.contains("WARN") && stderr.contains("no backends configured"),
            "{name}: {stderr}"
        );
    }
    let (ok, _, stderr) = validate(
        "one",
        "backends: [{name: a, url: 'http://127.0.0.1:1/mcp'}]\n",
    )
    .await;
    assert!(ok);
    assert!(!stderr.contains("no backends"), "{stderr}");
}

#[tokio::test]
async fn validate_suggests_the_closest_key() {
    // A wrongly cased required key: the error says what was found instead.
    let (ok, _, stderr) = validate(
        "case",
        "backends:\n  - name: a\n    URL: http://127.0.0.1:1/mcp\n",
    )
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("backends[0].url is required (found `URL`, did you mean `url`?)"),
        "{stderr}"
    );
    // A misspelled optional key: valid, with a warning naming the likely key.
    let (ok, _, stderr) = validate(
        "typo",
        "backends:\n  - {name: a, url: 'http://127.0.0.1:1/sse', transprot: sse}\naggregation: {conflictResolutoin: prefix}\n",
    )
    .await;
    assert!(ok, "{stderr}");
    for expected in [
        r#""backends.0.transprot" is not used by vmcp (did you mean "transport"?)"#,
        r#""aggregation.conflictResolutoin" is not used by vmcp (did you mean "conflictResolution"?)"#,
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    // A key of the reference vMCP that vmcp does not implement: no false suggestion.
    let (ok, _, stderr) = validate(
        "unknown",
        "backends: [{name: a, url: 'http://127.0.0.1:1/mcp'}]\noperational: {logLevel: debug}\n",
    )
    .await;
    assert!(ok);
    assert!(
        stderr.contains(
            r#""operational.logLevel" is not used by vmcp (not implemented, or misspelled)"#
        ),
        "{stderr}"
    );
}

/// A `type` and sections that cannot work together do not parse; each is named with
/// its field, all of them in one run, with the other problems of the file.
#[tokio::test]
async fn validate_refuses_auth_types_without_their_sections() {
    let (ok, _, stderr) = validate(
        "shapes",
        r#"
backends: [{name: gh, url: "ftp://x"}]
incomingAuth: {type: anonymous, oidc: {issuer: "https://idp.example", audience: vmcp}}
outgoingAuth:
  source: inlne
  default: {type: header_injection, tokenExchange: {tokenUrl: "https://idp.example/token"}}
  backends:
    gh:
      type: unauthenticated
      headerInjection: {headerName: X-Key, headerValue: k}
"#,
    )
    .await;
    assert!(!ok);
    for expected in [
        r#"incomingAuth.oidc is only used with type "oidc""#,
        r#"outgoingAuth.source must be "inline" (got "inlne")"#,
        r#"outgoingAuth.default.headerInjection is required when type is "header_injection""#,
        r#"outgoingAuth.backends.gh.headerInjection is only used with type "header_injection""#,
        "backends[0].url must start with http:// or https://",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    let (ok, _, stderr) = validate(
        "shapes-oidc",
        "backends: []\nincomingAuth: {type: oidc}\noutgoingAuth: {default: {type: token_exchange, tokenExchange: {tokenUrl: 'https://t', subjectTokenType: saml}}}\n",
    )
    .await;
    assert!(!ok);
    for expected in [
        r#"incomingAuth.oidc is required when type is "oidc""#,
        r#"outgoingAuth.default.tokenExchange.subjectTokenType must be "access_token", "id_token" or "jwt" (got "saml")"#,
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

#[tokio::test]
async fn yaml_syntax_errors_give_line_column_and_text() {
    let (ok, _, stderr) =
        validate("unclosed", "backends:\n  - name: a\n    url: [http://x\n").await;
    assert!(!ok);
    assert!(
        stderr.contains("YAML syntax error at line 4, column 1")
            && stderr.contains("a flow sequence that starts at line 3, column 10")
            && stderr.contains("3 |     url: [http://x"),
        "{stderr}"
    );
    assert!(!stderr.contains("invalid type"), "{stderr}");

    let (ok, _, stderr) = validate("indent", "name: x\n  bad: indent\n").await;
    assert!(!ok);
    assert!(
        stderr.contains("YAML syntax error at line 2, column 6")
            && stderr.contains("2 |   bad: indent"),
        "{stderr}"
    );
}

#[tokio::test]
async fn init_names_the_path_it_could_not_write() {
    let dir = std::env::temp_dir().join(format!("vmcp-ux-{}-init", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let target = dir.join("sub/dir/x.yaml");
    let (out, _, stderr) = vmcp(&["init", "--output"], Some(&target)).await;
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("cannot write {}", target.display())),
        "{stderr}"
    );
}

/// Every fenced ```yaml block of a Markdown file.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            // ```yaml, or ```yaml file=NAME (a file the README's shell blocks use).
            None if line.trim_start() == "```yaml" || line.trim_start().starts_with("```yaml ") => {
                current = Some(String::new())
            }
            Some(block) if line.trim_start() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

fn markdown_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            markdown_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "md") {
            into.push(path);
        }
    }
}

/// `documents` checked against `schema` by the `jsonschema` package: errors by name.
async fn jsonschema_errors(schema: &Value, documents: &BTreeMap<String, Value>) -> Value {
    let mut child = Command::new(vmcp_tests::python())
        .arg(repo_root().join("tests/peers/validate_schema.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start validate_schema.py");
    let mut stdin = child.stdin.take().unwrap();
    let request = json!({"schema": schema, "documents": documents});
    stdin
        .write_all(request.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "validate_schema.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn the_published_schema_is_current_and_checks_every_example() {
    let (out, stdout, stderr) = vmcp(&["schema"], None).await;
    assert!(out.status.success(), "{stderr}");
    let schema: Value = serde_json::from_str(&stdout).unwrap();
    let published: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/vmcp.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(
        schema == published,
        "docs/vmcp.schema.json is stale: run `cargo run -p vmcp-examples --bin vmcp -- schema > docs/vmcp.schema.json`"
    );

    let (out, starter, _) = vmcp(&["init", "-o", "-"], None).await;
    assert!(out.status.success());
    assert!(
        starter.starts_with("# yaml-language-server: $schema="),
        "init's starter points editors at the schema:\n{starter}"
    );
    let mut documents = BTreeMap::new();
    let yaml = |text: &str| -> Value { serde_yaml_ng::from_str(text).unwrap() };
    documents.insert("init".to_owned(), yaml(&starter));
    let mut files = vec![repo_root().join("README.md")];
    markdown_files(&repo_root().join("docs"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file
            .strip_prefix(repo_root())
            .unwrap()
            .display()
            .to_string();
        for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
            documents.insert(format!("{name} yaml block {}", i + 1), yaml(&block));
        }
    }
    assert!(
        documents.keys().any(|k| k.starts_with("README.md"))
            && documents
                .keys()
                .any(|k| k.starts_with("docs/configuration.md")),
        "the examples were found: {:?}",
        documents.keys()
    );
    // The negative control: a misspelled key must be refused.
    documents.insert(
        "misspelled".to_owned(),
        json!({"backends": [{"name": "a", "URL": "http://127.0.0.1:1/mcp"}]}),
    );
    let report = jsonschema_errors(&schema, &documents).await;
    for (name, errors) in report.as_object().unwrap() {
        if name == "misspelled" {
            assert!(
                errors.to_string().contains("URL"),
                "the misspelled key is refused: {errors}"
            );
        } else {
            assert_eq!(errors, &json!([]), "{name} does not match the schema");
        }
    }
}

#[tokio::test]
async fn validate_refuses_a_composite_named_like_a_backend_tool_the_config_advertises() {
    let yaml = r#"
backends: [{name: gh, url: 'http://127.0.0.1:1/mcp'}]
aggregation:
  tools:
    - workload: gh
      overrides:
        list_issues: {name: issues}
compositeTools:
  - name: gh_issues
    description: the prefixed rename target of an override
    steps:
      - {id: list, tool: gh.list_issues}
  - name: gh_echo_twin
    description: no collision
    steps:
      - {id: say, tool: gh.echo}
"#;
    let (ok, _, stderr) = validate("collide", yaml).await;
    assert!(!ok, "{stderr}");
    let expected = r#"compositeTools[0] "gh_issues": name collides with the backend tool gh.list_issues, advertised as "gh_issues" (named by overrides)"#;
    assert!(
        stderr.contains(expected),
        "missing {expected:?} in:\n{stderr}"
    );
    assert!(
        !stderr.contains(r#""gh_echo_twin": name"#),
        "a distinct name is fine:\n{stderr}"
    );
    // Hidden tools are not advertised, so nothing collides.
    let hidden = yaml.replace(
        "      overrides:",
        "      excludeAll: true\n      overrides:",
    );
    let (ok, _, stderr) = validate("collide_hidden", &hidden).await;
    assert!(ok, "{stderr}");
}

#[tokio::test]
async fn validate_names_the_composite_and_step_of_every_workflow_error() {
    let yaml = r#"
backends: [{name: gh, url: 'http://127.0.0.1:1/mcp'}]
aggregation:
  tools:
    - workload: gh
      overrides:
        delete_repo: {annotations: {destructiveHint: true}}
compositeTools:
  - name: loop
    description: a cycle
    steps:
      - {id: a, tool: gh.echo, dependsOn: [c]}
      - {id: b, tool: gh.echo, dependsOn: [a]}
      - {id: c, tool: gh.echo, dependsOn: [b]}
  - name: refs
    description: unknown ids, unresolvable tools, bad templates
    steps:
      - {id: first, tool: gh.echo, dependsOn: [ghost], arguments: {text: "{{ steps.nobody.output.x }}"}}
      - {id: second, tool: jira_get, arguments: {text: "{{ params.x "}}
      - {id: third, tool: gh.echo, arguments: {text: "{{if .params.x}}y{{end}}"}}
      - {id: maybe, tool: gh.echo, condition: "{{ params.go }}"}
      - {id: reader, tool: gh.echo, dependsOn: [maybe], arguments: {text: "{{ steps.maybe.output.text }}"}}
  - name: gh_echo_twin
    description: claims to be safer than its step
    annotations: {destructiveHint: false}
    steps:
      - {id: wipe, tool: gh.delete_repo}
"#;
    let mut steps = String::from("  - name: huge\n    description: too many steps\n    steps:\n");
    for i in 0..101 {
        steps.push_str(&format!("      - {{id: s{i}, tool: gh.echo}}\n"));
    }
    let (ok, _, stderr) = validate("composite", &format!("{yaml}{steps}")).await;
    assert!(!ok);
    for expected in [
        r#"compositeTools[0] "loop": dependsOn has a cycle: a -> c -> b -> a"#,
        r#"compositeTools[1] "refs" step "first": dependsOn names unknown step "ghost""#,
        r#"compositeTools[1] "refs" step "first" arguments.text: reads unknown step "nobody""#,
        r#"compositeTools[1] "refs" step "second": tool "jira_get" does not resolve"#,
        r#"compositeTools[1] "refs" step "second" arguments.text: template syntax error"#,
        r#"compositeTools[1] "refs" step "third" arguments.text: the Go-template form "{{if .params.x}}" is not supported"#,
        r#"compositeTools[1] "refs" step "reader" arguments.text: reads step "maybe", which may be skipped"#,
        r#"compositeTools[2] "gh_echo_twin" step "wipe": annotations.destructiveHint claims the composite is safer than its step tool"#,
        r#"compositeTools[3] "huge": has 101 steps; at most 100 are allowed"#,
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

/// `rateLimiting` errors name their field paths, all of them in one run.
#[tokio::test]
async fn validate_names_rate_limit_fields() {
    let (ok, _, stderr) = validate(
        "rate-limits",
        "backends: [{name: a, url: 'http://127.0.0.1:1/mcp'}]\nrateLimiting:\n  tools: [{name: a_echo, perUser: {maxTokens: 0, refillPeriod: 1m}}]\n  backends: [{name: b, maxConcurrent: 2}]\n  verbs: {lists: {}}\n",
    )
    .await;
    assert!(!ok, "{stderr}");
    for expected in [
        "rateLimiting.tools[0].perUser.maxTokens must be greater than 0",
        r#"rateLimiting.backends[0].name "b" is not a configured backend"#,
        "rateLimiting.verbs.lists needs shared or perUser",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}

/// A bad `sealing` block: each error names its field's path (the key file too
/// short, a previous key unreadable, an unset environment variable), no key
/// material is printed, and a misspelt key is named with the likely one.
#[tokio::test]
async fn validate_names_sealing_fields() {
    let dir = std::env::temp_dir().join(format!("vmcp-cli-{}-sealing", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let short = dir.join("short.key");
    std::fs::write(&short, "ten-bytes!").unwrap();
    let good = dir.join("good.key");
    std::fs::write(&good, "k".repeat(48)).unwrap();
    let missing = dir.join("missing.key");
    let (ok, _, stderr) = validate(
        "sealing",
        &format!(
            "backends: [{{name: a, url: 'http://127.0.0.1:1/mcp'}}]\nsealing:\n  keyFile: '{}'\n  previousKeyFiles: ['{}', '{}']\n  previousKeyEnvs: [VMCP_TEST_SEALING_UNSET]\n",
            short.display(),
            good.display(),
            missing.display()
        ),
    )
    .await;
    assert!(!ok, "{stderr}");
    for expected in [
        "sealing.keyFile: the key is 10 bytes; a sealing key needs at least 32".to_owned(),
        format!(
            "sealing.previousKeyFiles[1]: cannot read {}",
            missing.display()
        ),
        "sealing.previousKeyEnvs[0]".to_owned(),
    ] {
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
    assert!(!stderr.contains("ten-bytes") && !stderr.contains(&"k".repeat(32)));
    assert!(!stderr.contains("sealing.previousKeyFiles[0]"), "{stderr}");

    // A misspelt optional key: valid (the key is good), with its path and the
    // likely key in the warning.
    let (ok, _, stderr) = validate(
        "sealing-typo",
        &format!(
            "backends: [{{name: a, url: 'http://127.0.0.1:1/mcp'}}]\nsealing: {{keyFile: '{}', previousKeyFile: ['{}']}}\n",
            good.display(),
            good.display()
        ),
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(
            r#""sealing.previousKeyFile" is not used by vmcp (did you mean "previousKeyFiles"?)"#
        ),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `vmcp.yaml` of the ConfigMap `vmcp-config` in the manifest file `file`.
fn shipped_config(file: &str) -> String {
    let manifests = std::fs::read_to_string(repo_root().join(file)).unwrap();
    let config = serde_yaml_ng::Deserializer::from_str(&manifests)
        .map(|document| {
            Value::deserialize(document).unwrap_or_else(|e| panic!("{file} parses: {e}"))
        })
        .find(|object| object["kind"] == "ConfigMap" && object["metadata"]["name"] == "vmcp-config")
        .unwrap_or_else(|| panic!("{file} has the ConfigMap vmcp-config"));
    config["data"]["vmcp.yaml"]
        .as_str()
        .expect("the ConfigMap carries vmcp.yaml")
        .to_owned()
}

/// The configuration the Kubernetes manifests ship (`deploy/vmcp.yaml`, ConfigMap
/// `vmcp-config`) is one `vmcp validate` accepts, so the Deployment starts.
#[tokio::test]
async fn the_shipped_kubernetes_config_is_valid() {
    let yaml = shipped_config("deploy/vmcp.yaml");
    let (ok, stdout, stderr) = validate("deploy", &yaml).await;
    assert!(
        ok,
        "deploy/vmcp.yaml's config is invalid:\n{stdout}{stderr}"
    );
    assert!(
        stdout.contains("valid (0 backend(s), and group engineering-tools's from the cluster)"),
        "{stdout}"
    );
    assert!(!stderr.contains("no backends configured"), "{stderr}");
}

/// The replicas' configuration (`deploy/replicas/vmcp.yaml`) is valid with the
/// environment its Deployment gives it (the sealing key from the Secret), and
/// refused, naming the key and the variable, without it.
#[tokio::test]
async fn the_replicas_manifest_config_is_valid() {
    let path = temp_file("replicas", &shipped_config("deploy/replicas/vmcp.yaml"));
    let run = async |key: Option<&str>| {
        let mut command = Command::new(VMCP);
        command
            .args(["validate", "-c"])
            .arg(&path)
            .env_remove("RUST_LOG")
            .env_remove("VMCP_SEALING_KEY");
        if let Some(key) = key {
            command.env("VMCP_SEALING_KEY", key);
        }
        let out = command.output().await.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        (out.status.success(), stdout, stderr)
    };
    let (ok, stdout, stderr) =
        run(Some("a-sealing-key-of-at-least-32-bytes-for-every-replica")).await;
    assert!(
        ok,
        "deploy/replicas/vmcp.yaml is invalid:\n{stdout}{stderr}"
    );
    assert!(
        stdout.contains("valid (0 backend(s), and group engineering-tools's from the cluster)"),
        "{stdout}"
    );
    let (ok, stdout, stderr) = run(None).await;
    assert!(!ok, "valid without its sealing key:\n{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}")
            .contains("sealing.keyEnv: the environment variable VMCP_SEALING_KEY is not set"),
        "{stdout}{stderr}"
    );
}
