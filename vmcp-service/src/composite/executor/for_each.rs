//! forEach steps: the inner tool step once per item of a rendered collection, at
//! most `maxParallel` at once.

use futures::StreamExt;
use serde_json::{Map, Value, json};
use vmcp_layers::context::BackendCalls;

use super::{Done, Failure, Run, Status};
use crate::config::composite::{
    DEFAULT_FOREACH_ITERATIONS, DEFAULT_FOREACH_PARALLEL, ErrorAction, StepConfig,
};
use crate::templates::Template;

impl Run {
    pub(super) async fn for_each(
        &self,
        step: &StepConfig,
        context: &Value,
        calls: Option<&BackendCalls>,
    ) -> Result<Done, Failure> {
        let inner = step
            .step
            .as_deref()
            .ok_or_else(|| Failure::failed("forEach has no step"))?;
        let text = Template::parse(step.collection.as_deref().unwrap_or_default())
            .and_then(|t| t.render(context))
            .map_err(|e| Failure::failed(format!("collection: {e}")))?;
        let items = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Array(items)) => items,
            _ => return Err(Failure::failed("collection did not render a JSON array")),
        };
        let max = step.max_iterations.unwrap_or(DEFAULT_FOREACH_ITERATIONS);
        if items.len() > max {
            return Err(Failure::failed(format!(
                "collection has {} items; maxIterations is {max}",
                items.len()
            )));
        }
        let var = step.item_var.clone().unwrap_or_else(|| "item".to_owned());
        let parallel = step.max_parallel.unwrap_or(DEFAULT_FOREACH_PARALLEL).max(1);
        let iterations: Vec<(Value, Result<Done, Failure>)> =
            futures::stream::iter(items.into_iter().enumerate())
                .map(|(index, item)| {
                    let mut context = context.clone();
                    let mut scope = Map::new();
                    scope.insert(var.clone(), item.clone());
                    scope.insert("index".into(), json!(index));
                    context["forEach"] = Value::Object(scope);
                    async move { (item, self.tool_call(inner, &context, calls).await.0) }
                })
                .buffered(parallel)
                .collect()
                .await;
        let mut failed = 0;
        let mut list = Vec::with_capacity(iterations.len());
        for (index, (item, result)) in iterations.into_iter().enumerate() {
            match result {
                Ok(d) => list.push(json!({"index": index, "item": item, "status": "completed", "output": d.output, "error": null})),
                Err(Failure::Denied) => return Err(Failure::Denied),
                Err(Failure::Failed { message, .. }) => {
                    failed += 1;
                    list.push(json!({"index": index, "item": item, "status": "failed", "output": null, "error": message}));
                }
            }
        }
        let count = list.len();
        let output = json!({"iterations": list, "count": count, "completed": count - failed, "failed": failed});
        if failed > 0 && inner.error_action() != ErrorAction::Continue {
            return Err(Failure::failed(format!(
                "{failed} of {count} iterations failed"
            )));
        }
        Ok(Done {
            status: Status::Completed,
            content: Value::Null,
            output,
            error: None,
            raw: None,
        })
    }
}
