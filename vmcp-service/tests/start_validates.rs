//! `Vmcp::start` validates its configuration, so an embedder that builds one in code
//! cannot skip `config::validate`.

use vmcp_service::config::{BackendConfig, Strategy, VmcpConfig, validate};
use vmcp_service::{ConfigError, StartError, Vmcp};

#[tokio::test]
async fn start_refuses_an_invalid_config_with_the_field_path_errors_of_validate() {
    let mut config = VmcpConfig {
        backends: vec![
            BackendConfig {
                name: "a".into(),
                url: "ftp://x".into(),
                ..Default::default()
            },
            BackendConfig {
                url: "http://127.0.0.1:9/mcp".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    config.aggregation.conflict_resolution = Some(Strategy::Priority);
    let expected = vec![
        "backends[0].url must start with http:// or https://".to_owned(),
        "backends[1].name is required".to_owned(),
        "aggregation.conflictResolutionConfig.priorityOrder is required when conflictResolution is \"priority\"".to_owned(),
    ];
    match validate(&config) {
        Err(ConfigError::Invalid(errors)) => assert_eq!(errors, expected),
        other => panic!("validate: expected errors, got {other:?}"),
    }
    match Vmcp::start(config).await {
        Err(StartError::InvalidConfig(ConfigError::Invalid(errors))) => {
            assert_eq!(errors, expected)
        }
        Err(other) => panic!("start: expected InvalidConfig, got {other}"),
        Ok(_) => panic!("start accepted an invalid configuration"),
    }
}
