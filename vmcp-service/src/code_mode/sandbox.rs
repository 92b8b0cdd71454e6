//! The Starlark interpreter of one script: no `load()`, no I/O (the standard
//! library only; `print` goes to a bounded buffer), and bounds checked before every
//! statement by the evaluator's hook: statements executed, the wall-clock deadline,
//! the heap's allocated bytes and the caller's cancellation.
//!
//! What the hook cannot see: one statement runs to its end before the next check,
//! so a single statement (a string repeat, a comprehension) can allocate past the
//! memory bound or run past the deadline before the script is stopped. Strings are
//! limited to 4 GiB by the interpreter; comprehensions are bounded by what they
//! iterate. docs/security.md states this.
//!
//! The script runs on a thread of its own (Starlark is synchronous); each tool call
//! goes through a [`ToolBridge`], which blocks that thread on the async call.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value as Json};
use starlark::codemap::FileSpanRef;
use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::{BeforeStmtFuncDyn, Evaluator};
use starlark::starlark_module;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::list::AllocList;

use crate::config::ScriptLimits;

/// One tool call: the tool's index in the script's table, and its arguments.
pub(crate) type Call = (usize, Map<String, Json>);

/// How a script's tool calls reach the gateway. Called on the script's thread.
pub(crate) trait ToolBridge: Send + Sync {
    /// Call tool `index` of the script's table with `arguments`, blocking until it
    /// ends. `Err` is the message the script sees.
    fn call(&self, index: usize, arguments: Map<String, Json>) -> Result<Json, String>;
    /// Run `calls` concurrently (bounded by `parallelMaxConcurrency`), results in
    /// order.
    fn call_all(&self, calls: Vec<Call>) -> Vec<Result<Json, String>>;
    /// Why the script must stop, once it must (its caller went away, or its
    /// deadline passed).
    fn stopped(&self) -> Option<Breach>;
}

/// A bound the script went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breach {
    /// More statements than `stepLimit`.
    Steps,
    /// Past `scriptTimeout`.
    Timeout,
    /// More heap than `maxMemoryBytes`.
    Memory,
    /// More result and printed text than `maxOutputBytes`.
    Output,
    /// The caller cancelled the request.
    Cancelled,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Steps => "the script executed more statements than codeMode.stepLimit allows",
            Self::Timeout => "the script ran longer than codeMode.scriptTimeout allows",
            Self::Memory => "the script allocated more memory than codeMode.maxMemoryBytes allows",
            Self::Output => "the script's output is larger than codeMode.maxOutputBytes allows",
            Self::Cancelled => "the script was cancelled",
        })
    }
}

/// Where in the script (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// Why a script ended without a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScriptError {
    /// The bound it went past, if that is why.
    pub(crate) breach: Option<Breach>,
    /// Where, when known.
    pub(crate) position: Option<Position>,
    pub(crate) message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some(p) => write!(f, "line {}, column {}: {}", p.line, p.column, self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// What a script returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finished {
    /// The value of its `return` (`null` without one).
    pub(crate) value: Json,
    /// What it printed.
    pub(crate) printed: String,
    /// Statements executed.
    pub(crate) steps: u64,
}

/// One script to run.
pub(crate) struct Script<'a> {
    pub(crate) source: &'a str,
    /// The `data` global.
    pub(crate) data: Json,
    /// The identifier of each tool of the bridge's table, by index.
    pub(crate) tools: &'a [String],
    pub(crate) limits: ScriptLimits,
    /// When the script must have ended.
    pub(crate) deadline: Instant,
}

/// What the native functions read: the running script's (a thread-local, as a
/// script runs on a thread of its own).
struct Extra {
    bridge: Arc<dyn ToolBridge>,
    /// Inside `parallel([...])`: the calls the lambdas asked for, not made yet.
    pending: RefCell<Option<Vec<Call>>>,
    /// The script's printed text.
    printed: RefCell<String>,
    output_bytes: usize,
    breach: Rc<Cell<Option<Breach>>>,
}

impl Extra {
    fn breached(&self, breach: Breach) -> starlark::Error {
        self.breach.set(Some(breach));
        starlark::Error::new_other(BreachError(breach))
    }
}

#[derive(Debug)]
struct BreachError(Breach);

impl fmt::Display for BreachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for BreachError {}

/// A message raised as a Starlark error.
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Message {}

fn fail(message: impl Into<String>) -> starlark::Error {
    starlark::Error::new_native(Message(message.into()))
}

impl starlark::PrintHandler for Extra {
    fn println(&self, text: &str) -> starlark::Result<()> {
        let mut printed = self.printed.borrow_mut();
        if printed.len() + text.len() + 1 > self.output_bytes {
            return Err(self.breached(Breach::Output));
        }
        printed.push_str(text);
        printed.push('\n');
        Ok(())
    }
}

thread_local! {
    static RUNNING: RefCell<Option<Rc<Extra>>> = const { RefCell::new(None) };
}

fn extra() -> starlark::Result<Rc<Extra>> {
    RUNNING
        .with(|running| running.borrow().clone())
        .ok_or_else(|| fail("the script environment is missing"))
}

/// Clears the thread's running script when the run ends (however it ends).
struct Running;

impl Running {
    fn set(extra: Rc<Extra>) -> Self {
        RUNNING.with(|running| *running.borrow_mut() = Some(extra));
        Self
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|running| running.borrow_mut().take());
    }
}

/// The marker a tool function returns inside `parallel([...])`.
const PENDING: &str = "\u{0}vmcp-pending-call";

#[starlark_module]
fn script_globals(builder: &mut GlobalsBuilder) {
    /// Call tool `index` with the keyword arguments `arguments` (the tool functions
    /// of the prelude call this).
    fn __vmcp_call<'v>(
        index: i32,
        arguments: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let extra = extra()?;
        let arguments = match arguments.to_json_value() {
            Ok(Json::Object(map)) => map,
            Ok(_) => return Err(fail("tool arguments must be keyword arguments")),
            Err(e) => return Err(fail(format!("tool arguments are not JSON values: {e}"))),
        };
        let index = usize::try_from(index).map_err(|_| fail("no such tool"))?;
        if let Some(pending) = extra.pending.borrow_mut().as_mut() {
            pending.push((index, arguments));
            return Ok(eval.heap().alloc(PENDING));
        }
        match extra.bridge.call(index, arguments) {
            Ok(json) => Ok(eval.heap().alloc(json)),
            Err(message) => Err(match extra.bridge.stopped() {
                Some(breach) => extra.breached(breach),
                None => fail(message),
            }),
        }
    }

    /// Run the tool calls of `calls` (a list of lambdas, each making one tool call)
    /// concurrently; their results, in order.
    fn parallel<'v>(
        calls: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let extra = extra()?;
        if extra.pending.borrow().is_some() {
            return Err(fail("parallel() cannot be nested"));
        }
        let functions: Vec<Value<'v>> = calls
            .iterate(eval.heap())
            .map_err(|_| fail("parallel() takes a list of lambdas"))?
            .collect();
        let mut batch = Vec::with_capacity(functions.len());
        for function in functions {
            *extra.pending.borrow_mut() = Some(Vec::new());
            let returned = eval.eval_function(function, &[], &[]);
            let recorded = extra.pending.borrow_mut().take().unwrap_or_default();
            // An error here is most often the lambda working on the result, which
            // does not exist yet (it stands for the pending call).
            let returned = match returned {
                Ok(value) => value,
                Err(_) if extra.breach.get().is_some() => return returned,
                Err(e) => return Err(fail(format!("{} ({})", one_call_text(), e.kind()))),
            };
            let [call] = <[_; 1]>::try_from(recorded).map_err(|_| one_call())?;
            if returned.unpack_str() != Some(PENDING) {
                return Err(one_call());
            }
            batch.push(call);
        }
        let mut results = Vec::with_capacity(batch.len());
        for result in extra.bridge.call_all(batch) {
            match result {
                Ok(json) => results.push(eval.heap().alloc(json)),
                Err(message) => {
                    return Err(match extra.bridge.stopped() {
                        Some(breach) => extra.breached(breach),
                        None => fail(message),
                    });
                }
            }
        }
        Ok(eval.heap().alloc(AllocList(results)))
    }
}

fn one_call_text() -> &'static str {
    "each entry of parallel() must be a lambda that makes one tool call and returns its \
     result, e.g. lambda: search(query=\"x\"); work on the results after parallel() returns"
}

fn one_call() -> starlark::Error {
    fail(one_call_text())
}

/// The bounds checked before each statement.
struct Guard {
    steps: Rc<Cell<u64>>,
    limits: ScriptLimits,
    deadline: Instant,
    breach: Rc<Cell<Option<Breach>>>,
    bridge: Arc<dyn ToolBridge>,
}

impl<'a, 'e: 'a> BeforeStmtFuncDyn<'a, 'e> for Guard {
    fn call<'v>(
        &mut self,
        _span: FileSpanRef,
        eval: &mut Evaluator<'v, 'a, 'e>,
    ) -> starlark::Result<()> {
        let steps = self.steps.get() + 1;
        self.steps.set(steps);
        let breach = if steps > self.limits.steps {
            Some(Breach::Steps)
        } else if eval.heap().allocated_bytes() as u64 > self.limits.memory_bytes {
            Some(Breach::Memory)
        } else if Instant::now() >= self.deadline {
            Some(Breach::Timeout)
        } else {
            self.bridge.stopped()
        };
        match breach {
            Some(breach) => {
                self.breach.set(Some(breach));
                Err(starlark::Error::new_other(BreachError(breach)))
            }
            None => Ok(()),
        }
    }
}

/// The script as the interpreter reads it: a prelude defining one function per
/// tool, then the script as the body of a function (so a top-level `return`
/// works), indented by one space, then its call.
struct Wrapped {
    source: String,
    /// Lines before the script's first line.
    offset: usize,
}

const MAIN: &str = "__vmcp_main";

fn wrap(script: &Script<'_>) -> Wrapped {
    let mut source = String::new();
    for (index, name) in script.tools.iter().enumerate() {
        source.push_str(&format!(
            "def {name}(**kwargs):\n    return __vmcp_call({index}, kwargs)\n"
        ));
    }
    source.push_str(&format!("def {MAIN}():\n"));
    let offset = source.lines().count();
    for line in script.source.lines() {
        source.push(' ');
        source.push_str(line);
        source.push('\n');
    }
    // An empty (or comment-only) script still has a body.
    source.push_str(&format!(" return None\n{MAIN}()\n"));
    Wrapped { source, offset }
}

/// The script's position of a span of the wrapped source, if it is the script's.
fn position(
    span: &starlark::codemap::FileSpan,
    wrapped: &Wrapped,
    lines: usize,
) -> Option<Position> {
    let begin = span.resolve_span().begin;
    let line = begin.line.checked_sub(wrapped.offset)?;
    (line < lines).then_some(Position {
        line: line + 1,
        // One space of indentation was added; columns count from 1.
        column: begin.column.max(1),
    })
}

/// Where an error happened in the script: its own span, or the innermost call in
/// the script that led to it (an error inside a tool function is the call's).
fn error_position(error: &starlark::Error, wrapped: &Wrapped, lines: usize) -> Option<Position> {
    error
        .span()
        .and_then(|span| position(span, wrapped, lines))
        .or_else(|| {
            error
                .call_stack()
                .frames
                .iter()
                .rev()
                .filter_map(|frame| frame.location.as_ref())
                .find_map(|span| position(span, wrapped, lines))
        })
}

fn globals() -> Globals {
    // The standard library, `print` (to the script's buffer), `json`, `struct`,
    // `map`, `filter`, `partial`: nothing that reaches outside the interpreter.
    GlobalsBuilder::extended_by(&[
        LibraryExtension::Print,
        LibraryExtension::Json,
        LibraryExtension::StructType,
        LibraryExtension::Map,
        LibraryExtension::Filter,
        LibraryExtension::Partial,
    ])
    .with(script_globals)
    .build()
}

/// Run `script` to its end or its first error; blocks (see the module docs).
pub(crate) fn run(
    script: &Script<'_>,
    bridge: Arc<dyn ToolBridge>,
) -> Result<Finished, ScriptError> {
    let wrapped = wrap(script);
    let lines = script.source.lines().count().max(1);
    let error = |breach, position, message: String| ScriptError {
        breach,
        position,
        message,
    };
    let dialect = Dialect {
        enable_load: false,
        ..Dialect::Extended
    };
    let ast = AstModule::parse("script", wrapped.source.clone(), &dialect).map_err(|e| {
        error(
            None,
            error_position(&e, &wrapped, lines),
            e.kind().to_string(),
        )
    })?;
    let breach = Rc::new(Cell::new(None));
    let steps = Rc::new(Cell::new(0));
    let extra = Rc::new(Extra {
        bridge: bridge.clone(),
        pending: RefCell::new(None),
        printed: RefCell::new(String::new()),
        output_bytes: script.limits.output_bytes,
        breach: breach.clone(),
    });
    let _running = Running::set(extra.clone());
    let module = Module::new();
    module.set("data", module.heap().alloc(script.data.clone()));
    let globals = globals();
    let result = {
        let mut eval = Evaluator::new(&module);
        eval.set_print_handler(&*extra);
        let guard: Box<dyn BeforeStmtFuncDyn<'_, '_>> = Box::new(Guard {
            steps: steps.clone(),
            limits: script.limits,
            deadline: script.deadline,
            breach: breach.clone(),
            bridge,
        });
        eval.before_stmt_for_dap(guard.into());
        match eval.eval_module(ast, &globals) {
            Ok(value) => value
                .to_json_value()
                .map_err(|e| format!("the script's return value is not JSON: {e}")),
            Err(e) => {
                let position = error_position(&e, &wrapped, lines);
                return Err(match breach.get() {
                    Some(breach) => error(Some(breach), position, breach.to_string()),
                    None => error(None, position, message_of(&e)),
                });
            }
        }
    };
    let value = result.map_err(|message| error(None, None, message))?;
    let printed = extra.printed.take();
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size.saturating_add(printed.len()) > script.limits.output_bytes {
        return Err(error(
            Some(Breach::Output),
            None,
            Breach::Output.to_string(),
        ));
    }
    Ok(Finished {
        value,
        printed,
        steps: steps.get(),
    })
}

/// An error's message without the interpreter's source excerpt (the position is
/// reported separately, in the script's own lines).
fn message_of(error: &starlark::Error) -> String {
    error.kind().to_string()
}

#[cfg(test)]
mod tests;
