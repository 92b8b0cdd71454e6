//! What a catalog build found wrong with a composite tool: the backends' live tool
//! lists contradict it. Typed, so startup can tell a contradiction by a backend that
//! answered (fatal) from one that may still resolve when a backend comes up.

use std::sync::Arc;

/// One composite tool the live catalog contradicts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompositeProblem {
    /// A step names a tool no backend in the catalog offers: the step fails when it
    /// runs.
    MissingStepTool {
        /// The composite tool.
        composite: String,
        /// The step (a forEach's own id for its inner step).
        step: String,
        /// The step's `tool` as configured (`<backend>.<tool>` or an advertised name).
        tool: String,
        /// The backend a `<backend>.<tool>` reference names; `None` for an advertised
        /// name, which any backend might come to offer.
        backend: Option<Arc<str>>,
    },
    /// The composite's name is a tool a backend advertises: the backend tool is not
    /// served under that name.
    NameTaken {
        /// The composite tool.
        composite: String,
        /// The backend advertising the name.
        backend: Arc<str>,
        /// The backend's own name for its tool.
        tool: String,
    },
}

impl CompositeProblem {
    /// Whether backends that answered contradict the composite for certain: the step's
    /// backend (or, for an advertised name, every backend) answered and lacks the
    /// tool, or an answering backend advertises the name. Otherwise a backend that has
    /// not answered yet may still resolve it.
    pub fn is_certain(&self, answered: &[Arc<str>], every_backend_answered: bool) -> bool {
        match self {
            Self::MissingStepTool {
                backend: Some(backend),
                ..
            } => answered.contains(backend),
            Self::MissingStepTool { backend: None, .. } => every_backend_answered,
            Self::NameTaken { .. } => true,
        }
    }
}

impl std::fmt::Display for CompositeProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MissingStepTool {
                composite,
                step,
                tool,
                ..
            } => write!(
                f,
                "composite tool {composite:?} step {step:?}: tool {tool:?} is not in the catalog; the step fails when it runs"
            ),
            Self::NameTaken {
                composite,
                backend,
                tool,
            } => write!(
                f,
                "composite tool {composite:?} collides with tool {tool:?} of backend {backend:?}; the backend tool is not served under this name"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing(backend: Option<&str>) -> CompositeProblem {
        CompositeProblem::MissingStepTool {
            composite: "c".into(),
            step: "s".into(),
            tool: "b.t".into(),
            backend: backend.map(Arc::from),
        }
    }

    #[test]
    fn only_answering_backends_make_a_problem_certain() {
        let answered: Vec<Arc<str>> = vec![Arc::from("b")];
        assert!(missing(Some("b")).is_certain(&answered, false));
        assert!(!missing(Some("late")).is_certain(&answered, false));
        assert!(!missing(None).is_certain(&answered, false));
        assert!(missing(None).is_certain(&answered, true));
        let taken = CompositeProblem::NameTaken {
            composite: "c".into(),
            backend: Arc::from("b"),
            tool: "t".into(),
        };
        assert!(taken.is_certain(&[], false));
    }
}
