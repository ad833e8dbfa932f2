//! The tools a run offers its model: the agent's tools and subagents, asked for their specs
//! once per run (a spec holds a JSON schema; building it for every step was a measurable part
//! of a step's cost).

use std::sync::Arc;

use super::agent::Agent;
use super::delegation::spec_of;
use super::tool::{ToolRef, ToolSpec};

/// The specs of an agent's tools and subagents, once asked for.
#[derive(Debug, Default)]
pub(crate) struct Toolbox {
    specs: Option<Arc<[ToolSpec]>>,
}

impl Toolbox {
    /// The tools offered to the model: the agent's tools, then its subagents.
    pub(crate) fn specs(&mut self, agent: &Agent) -> Arc<[ToolSpec]> {
        Arc::clone(self.specs.get_or_insert_with(|| {
            agent
                .tools
                .iter()
                .map(|t| t.spec())
                .chain(agent.subagents.iter().map(spec_of))
                .collect()
        }))
    }

    /// The agent's tool named `name`, found through the specs asked for once per run (not by
    /// asking every tool for its spec again, as [`Agent::tool`] does).
    pub(crate) fn tool(&mut self, agent: &Agent, name: &str) -> Option<ToolRef> {
        let specs = self.specs(agent);
        let tools = &agent.tools;
        specs
            .iter()
            .take(tools.len())
            .position(|s| s.name == name)
            .and_then(|i| tools.get(i).cloned())
    }
}
