use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::config::CodeModeConfig;

/// Tools `echo` (returns its arguments) and `boom` (fails), recording each call.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<(usize, Map<String, Json>)>>,
    batches: Mutex<Vec<usize>>,
}

impl ToolBridge for Fake {
    fn call(&self, index: usize, arguments: Map<String, Json>) -> Result<Json, String> {
        self.calls.lock().unwrap().push((index, arguments.clone()));
        match index {
            0 => Ok(Json::Object(arguments)),
            _ => Err("tool \"boom\" failed: no".into()),
        }
    }

    fn call_all(&self, calls: Vec<(usize, Map<String, Json>)>) -> Vec<Result<Json, String>> {
        self.batches.lock().unwrap().push(calls.len());
        calls.into_iter().map(|(i, a)| self.call(i, a)).collect()
    }

    fn stopped(&self) -> Option<Breach> {
        None
    }
}

fn limits() -> ScriptLimits {
    CodeModeConfig::default().limits()
}

fn run_with(source: &str, limits: ScriptLimits) -> (Result<Finished, ScriptError>, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    let tools = ["echo".to_owned(), "boom".to_owned()];
    let script = Script {
        source,
        data: json!({"city": "Oslo"}),
        tools: &tools,
        limits,
        deadline: Instant::now() + limits.script_timeout,
    };
    (run(&script, fake.clone()), fake)
}

fn run_script(source: &str) -> Result<Finished, ScriptError> {
    run_with(source, limits()).0
}

#[test]
fn tools_data_and_a_top_level_return() {
    let (result, fake) = run_with(
        "a = echo(x=1)\nb = echo(city=data['city'])\nreturn {'a': a['x'], 'b': b}\n",
        limits(),
    );
    let done = result.unwrap();
    assert_eq!(done.value, json!({"a": 1, "b": {"city": "Oslo"}}));
    assert_eq!(fake.calls.lock().unwrap().len(), 2);
    assert!(done.steps >= 3, "{}", done.steps);
}

#[test]
fn parallel_runs_one_batch_in_order() {
    let (result, fake) = run_with(
        "r = parallel([lambda: echo(n=1), lambda: echo(n=2), lambda: echo(n=3)])\n\
         return [x['n'] for x in r]\n",
        limits(),
    );
    assert_eq!(result.unwrap().value, json!([1, 2, 3]));
    assert_eq!(*fake.batches.lock().unwrap(), [3]);
}

#[test]
fn parallel_entries_make_one_call_each() {
    let error = run_script("return parallel([lambda: echo(n=1)['n']])\n").unwrap_err();
    assert!(error.message.contains("one tool call"), "{error}");
    let error = run_script("return parallel([lambda: 1])\n").unwrap_err();
    assert!(error.message.contains("one tool call"), "{error}");
}

#[test]
fn errors_name_the_script_line_and_column() {
    let error = run_script("x = 1\ny = x + 'a'\n").unwrap_err();
    assert_eq!(
        error.position,
        Some(Position { line: 2, column: 5 }),
        "{error}"
    );
    let error = run_script("x = 1\n\nreturn nope(a=1)\n").unwrap_err();
    assert_eq!(error.position.map(|p| p.line), Some(3), "{error}");
    assert!(error.message.contains("nope"), "{error}");
    // A failing tool call: the call's position.
    let error = run_script("x = 1\nboom(a=1)\n").unwrap_err();
    assert_eq!(
        error.position,
        Some(Position { line: 2, column: 1 }),
        "{error}"
    );
    assert!(error.message.contains("failed: no"), "{error}");
    // A syntax error.
    let error = run_script("x = 1\ny = = 2\n").unwrap_err();
    assert_eq!(error.position.map(|p| p.line), Some(2), "{error}");
}

#[test]
fn no_load_and_no_io() {
    assert!(run_script("load('x.star', 'y')\n").is_err());
    for name in ["open", "exec", "eval", "__import__"] {
        let error = run_script(&format!("return {name}\n")).unwrap_err();
        assert!(error.message.contains(name), "{error}");
    }
}

#[test]
fn the_step_limit_ends_a_loop() {
    let mut limits = limits();
    limits.steps = 1000;
    let error = run_with("for i in range(1000000):\n    x = i\n", limits)
        .0
        .unwrap_err();
    assert_eq!(error.breach, Some(Breach::Steps), "{error}");
}

#[test]
fn the_deadline_ends_a_script() {
    let mut limits = limits();
    limits.steps = u64::MAX;
    limits.script_timeout = Duration::from_millis(200);
    let started = Instant::now();
    let error = run_with("for i in range(1000000000):\n    x = i\n", limits)
        .0
        .unwrap_err();
    assert_eq!(error.breach, Some(Breach::Timeout), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn deep_recursion_ends_cleanly() {
    let error = run_script("def f(n):\n    return f(n + 1)\nreturn f(0)\n").unwrap_err();
    assert_eq!(error.breach, None);
    assert!(error.position.is_some(), "{error}");
}

#[test]
fn memory_and_output_are_bounded() {
    let mut limits = limits();
    limits.memory_bytes = 8 * 1024 * 1024;
    let error = run_with("s = 'x' * 20000000\nreturn len(s)\n", limits)
        .0
        .unwrap_err();
    assert_eq!(error.breach, Some(Breach::Memory), "{error}");
    let mut limits = self::limits();
    limits.output_bytes = 100;
    let error = run_with("return 'y' * 200\n", limits).0.unwrap_err();
    assert_eq!(error.breach, Some(Breach::Output), "{error}");
    let error = run_with("for i in range(100):\n    print('hello')\n", limits)
        .0
        .unwrap_err();
    assert_eq!(error.breach, Some(Breach::Output), "{error}");
}

#[test]
fn prints_are_kept() {
    let done = run_script("print('a', 1)\nreturn None\n").unwrap();
    assert_eq!(done.printed, "a 1\n");
    assert_eq!(done.value, Json::Null);
}

/// The tools of docs/code-mode.md's example.
struct DocTools;

impl ToolBridge for DocTools {
    fn call(&self, index: usize, arguments: Map<String, Json>) -> Result<Json, String> {
        Ok(match index {
            0 => json!({"items": [{"n": 1}, {"n": 2}], "repo": arguments["repo"]}),
            _ => json!({"city": arguments["city"], "sky": "clear"}),
        })
    }

    fn call_all(&self, calls: Vec<(usize, Map<String, Json>)>) -> Vec<Result<Json, String>> {
        calls.into_iter().map(|(i, a)| self.call(i, a)).collect()
    }

    fn stopped(&self) -> Option<Breach> {
        None
    }
}

/// Every ```starlark block of docs/code-mode.md runs as written.
#[test]
fn the_documented_script_runs() {
    let page = include_str!("../../../../docs/code-mode.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match &mut current {
            None if line == "```starlark" => current = Some(String::new()),
            Some(block) if line == "```" => blocks.push(current.take().unwrap_or_default()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert_eq!(blocks.len(), 1, "the page's example was found");
    let tools = [
        "github_list_issues".to_owned(),
        "weather_forecast".to_owned(),
    ];
    let limits = limits();
    let script = Script {
        source: &blocks[0],
        data: json!({"repo": "acme/app"}),
        tools: &tools,
        limits,
        deadline: Instant::now() + limits.script_timeout,
    };
    let done = run(&script, Arc::new(DocTools)).unwrap();
    assert_eq!(
        done.value,
        json!({"open": 2, "oslo": {"city": "Oslo", "sky": "clear"},
               "lima": {"city": "Lima", "sky": "clear"}})
    );
}
